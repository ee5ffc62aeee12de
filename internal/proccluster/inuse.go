package proccluster

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lockName is the file a node holds locked (flock) in its data directory
// while it runs (raftnode's LOCK), with its pid in it.
const lockName = "LOCK"

// Holder is a process that holds a data directory under the cluster's
// directory locked: a node that runs on it.
type Holder struct {
	Dir string // the locked directory
	PID int    // the holder's pid, as it wrote it in the lock file (0: unknown)
}

// InUse returns the data directories under the cluster's directory that a
// process holds locked: the running nodes this Cluster started, and any
// node started by hand on one of them (a restart command someone ran).
// Stop does not remove a directory in use.
func (c *Cluster) InUse() []Holder {
	var out []Holder
	filepath.WalkDir(c.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != lockName {
			return nil
		}
		if locked(path) {
			b, _ := os.ReadFile(path)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			out = append(out, Holder{Dir: filepath.Dir(path), PID: pid})
		}
		return nil
	})
	return out
}
