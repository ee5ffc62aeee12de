package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/fsm"
	"github.com/lockcluster/lockcluster/raftnode"
)

// snapshot save and restore: an online backup of a running cluster, and a
// new cluster seeded from one (etcdctl snapshot save, etcdutl snapshot
// restore).

func newSnapshot(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save the cluster's state to a file; seed a new cluster from one",
		Long: `'snapshot save FILE' writes a consistent snapshot of a running cluster's
state (the leader's, after a read barrier) to FILE, checksummed: every
session, held lock and queue, at one Raft index. 'snapshot save FILE
--data-dir D' writes one from a stopped node's data directory.

'snapshot restore FILE --data-dir D --id ID --raft-addr ADDR' seeds a new
data directory from it: a one-node cluster, started with 'lockcluster serve
--data-dir D --id ID --raft-addr ADDR ...', then grown with --join. Its
member directory starts empty (each new node records itself). New locks
get fencing tokens above every token in the snapshot.`,
	}
	cmd.AddCommand(newSnapshotSave(g), newSnapshotRestore(g))
	return cmd
}

func newSnapshotSave(g *globals) *cobra.Command {
	var timeout time.Duration
	var dataDir string
	cmd := &cobra.Command{
		Use:   "save FILE [--data-dir D]",
		Short: "Write a consistent snapshot of the cluster's state to FILE",
		Long: `Write a consistent snapshot of the cluster's state to FILE: the leader's, after
a read barrier, through any member (--addr).

With --data-dir D (serve's --data-dir) it reads a STOPPED node's data
directory instead, and needs no cluster: its newest snapshot, and every
entry of the log after it, applied. A stopped node cannot know which of its
last entries were committed, so the file holds this node's log up to its
last entry: writes the cluster never acknowledged may be in it, and writes
this node never received are not. It refuses a directory that a running
node holds, and a damaged or diverged one.`,
		Args: usageArgs(1, "usage: lockcluster snapshot save FILE [--data-dir D]"),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			if dataDir != "" {
				return g.saveOffline(dataDir, args[0])
			}
			a, err := g.admin()
			if err != nil {
				return g.exit(err)
			}
			defer a.Close()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			info, err := saveSnapshotFile(ctx, a, args[0])
			if err != nil {
				return g.exit(err)
			}
			if g.output == "json" {
				return printJSON(os.Stdout, struct {
					File string `json:"file"`
					lockcluster.SnapshotInfo
				}{args[0], info})
			}
			fmt.Printf("saved %s: index %d, %d bytes, sha256 %s (from %s)\n", args[0], info.Index, info.Size, info.SHA256, info.Leader)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long the whole transfer may take")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "save from this stopped node's data directory (serve's --data-dir) instead of the cluster")
	return cmd
}

// saveSnapshotFile writes the snapshot to path.tmp, syncs it, reads it back
// to check its checksum, and only then renames it to path.
func saveSnapshotFile(ctx context.Context, a *lockcluster.Admin, path string) (info lockcluster.SnapshotInfo, err error) {
	return writeSnapshotFile(path, func(w io.Writer) (lockcluster.SnapshotInfo, error) { return a.SaveSnapshot(ctx, w) })
}

// writeSnapshotFile writes what save writes to path.tmp, syncs it, reads it
// back to check its checksum, and only then renames it to path.
func writeSnapshotFile(path string, save func(io.Writer) (lockcluster.SnapshotInfo, error)) (info lockcluster.SnapshotInfo, err error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return info, &exitError{code: exitFailure, msg: err.Error()}
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	if info, err = save(w); err != nil {
		return info, err
	}
	fail := func(err error) error { return &exitError{code: exitFailure, msg: fmt.Sprintf("%s: %v", tmp, err)} }
	if err = w.Flush(); err != nil {
		return info, fail(err)
	}
	if err = f.Sync(); err != nil {
		return info, fail(err)
	}
	if err = f.Close(); err != nil {
		return info, fail(err)
	}
	back, err := readSnapshotFile(tmp)
	if err != nil {
		return info, err
	}
	if back.SHA256 != info.SHA256 || back.Index != info.Index {
		return info, fail(fmt.Errorf("read back sha256 %s at index %d, saved %s at %d", back.SHA256, back.Index, info.SHA256, info.Index))
	}
	if err = os.Rename(tmp, path); err != nil {
		return info, fail(err)
	}
	if d, derr := os.Open(filepath.Dir(path)); derr == nil { // make the rename durable
		d.Sync()
		d.Close()
	}
	return info, nil
}

// readSnapshotFile reads and checks a snapshot file; its errors name it.
func readSnapshotFile(path string) (lockcluster.SnapshotInfo, error) {
	info, _, err := loadSnapshotFile(path)
	return info, err
}

func loadSnapshotFile(path string) (lockcluster.SnapshotInfo, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return lockcluster.SnapshotInfo{}, nil, &exitError{code: exitFailure, msg: err.Error()}
	}
	defer f.Close()
	info, data, err := lockcluster.ReadSnapshot(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return info, nil, &exitError{code: exitFailure, msg: fmt.Sprintf("%s: %v", path, err)}
	}
	return info, data, nil
}

func newSnapshotRestore(g *globals) *cobra.Command {
	host, _ := os.Hostname()
	var dataDir, id, raftAddr string
	cmd := &cobra.Command{
		Use:   "restore FILE --data-dir D [--id ID] [--raft-addr HOST:PORT]",
		Short: "Seed a new one-node cluster's data directory from a snapshot file",
		Long: `Seed a new one-node cluster's data directory from a snapshot file.

The file's checksum and the state in it are checked first. D must not hold
raft state. --id and --raft-addr are the node's: start it with 'lockcluster
serve --data-dir D --id ID' and the same raft address (--raft-addr, or
--advertise-raft if it binds a wildcard), then add nodes with 'serve --join'.
Do not start it where a member of the old cluster can reach it.`,
		Args: usageArgs(1, "usage: lockcluster snapshot restore FILE --data-dir D [--id ID] [--raft-addr HOST:PORT]"),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			if dataDir == "" || id == "" || raftAddr == "" {
				return &exitError{code: exitUsage, msg: "snapshot restore needs --data-dir, --id and --raft-addr"}
			}
			info, data, err := loadSnapshotFile(args[0])
			if err != nil {
				return err
			}
			m := fsm.New()
			if err := m.Restore(bytes.NewReader(data)); err != nil {
				return &exitError{code: exitFailure, msg: fmt.Sprintf("%s: the state does not decode: %v", args[0], err)}
			}
			if m.LastIndex() != info.Index {
				return &exitError{code: exitFailure, msg: fmt.Sprintf("%s: the header says index %d, the state is at %d", args[0], info.Index, m.LastIndex())}
			}
			dropped, err := dropDirectory(m)
			if err != nil {
				return &exitError{code: exitFailure, msg: fmt.Sprintf("%s: %v", args[0], err)}
			}
			err = raftnode.SeedDataDir(raftnode.Seed{DataDir: filepath.Join(dataDir, "raft"), ID: id, Addr: raftAddr, Index: m.LastIndex(), Data: bytes.NewReader(m.Snapshot())})
			if err != nil {
				return &exitError{code: exitFailure, msg: err.Error()}
			}
			st := m.Stats()
			if g.output == "json" {
				return printJSON(os.Stdout, map[string]any{"file": args[0], "dataDir": dataDir, "id": id, "raftAddr": raftAddr,
					"index": info.Index, "seededIndex": m.LastIndex(), "membersDropped": dropped,
					"size": info.Size, "sha256": info.SHA256, "sessions": st.Sessions, "held": st.Held, "pending": st.Pending})
			}
			fmt.Printf("restored %s into %s: index %d, %d sessions, %d held, %d pending, sha256 %s\n", args[0], dataDir, info.Index, st.Sessions, st.Held, st.Pending, info.SHA256)
			fmt.Printf("start it with: lockcluster serve --data-dir %s --id %s --raft-addr %s ...\n", dataDir, id, raftAddr)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the new node's data directory (serve's --data-dir); must not hold raft state")
	cmd.Flags().StringVar(&id, "id", host, "the new node's id (serve's --id)")
	cmd.Flags().StringVar(&raftAddr, "raft-addr", "127.0.0.1:7701", "the raft address other nodes dial to reach the new node")
	return cmd
}

// dropDirectory empties the restored state's member directory, as a new
// cluster's is: it names the old cluster's API addresses, which the new
// leader would probe and a new follower could forward to before the member
// of that id records itself again. Each removal is applied as the entry
// after the state's last, so the state stays one the machine reached by
// applying entries; the seed's index is past them. It returns how many
// records it removed.
func dropDirectory(m *fsm.Machine) (int, error) {
	ms := m.Members()
	for _, mem := range ms {
		e := fsm.Entry{Time: time.Now().UnixNano(), Cmd: &fsm.SetMember{Member: fsm.Member{ID: mem.ID}, Remove: true}}
		if err := m.Apply(m.LastIndex()+1, e).Result.Err; err != nil {
			return 0, fmt.Errorf("removing the old member record of %s: %v", mem.ID, err)
		}
	}
	return len(ms), nil
}

// usageArgs wants exactly n arguments.
func usageArgs(n int, usage string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return &exitError{code: exitUsage, msg: usage}
		}
		return nil
	}
}
