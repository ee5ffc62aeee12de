package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/internal/node"
	"github.com/lockcluster/lockcluster/internal/pki"
	"github.com/lockcluster/lockcluster/internal/proccluster"
)

func newDev() *cobra.Command {
	var dataDir, host string
	var nodes, basePort, watchHistory, groups int
	var useTLS bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local 3-node cluster, one process per node",
		Long: `Run a local cluster for development: each node is its own 'lockcluster serve'
process, so you can kill one (kill -9 PID) and watch another take over. Node i
serves gRPC on port 7700+10i, raft on 7701+10i and HTTP on 7702+10i; --base-port
moves them all. Data lives in a temporary directory removed on exit, unless
--data-dir is given. Ctrl-C stops every node.

The nodes run a copy of this binary in the data directory's bin/, which the
restart command printed when a node exits names: it works after 'go run' has
removed its build. Ctrl-C leaves the temporary data directory in place, and
says so, while a node restarted by hand still runs on it.

docker-compose.yml publishes the same gRPC and HTTP ports on 127.0.0.1
(7700/7702, 7710/7712, 7720/7722): stop one ('docker compose down') before
starting the other, or move dev with --base-port.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 || nodes > 9 {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--nodes %d: between 1 and 9", nodes)}
			}
			if basePort < 1 || basePort+10*nodes > 65535 {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--base-port %d is out of range", basePort)}
			}
			if watchHistory < 0 {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--watch-history %d: want a positive number of changes (0: serve's default)", watchHistory)}
			}
			if groups < 1 || groups > node.MaxGroups {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--groups %d: want 1 to %d", groups, node.MaxGroups)}
			}
			return runDev(dataDir, host, nodes, basePort, useTLS, watchHistory, groups)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "keep the nodes' data here (default: a temporary directory, removed on exit)")
	cmd.Flags().IntVar(&nodes, "nodes", 3, "how many nodes")
	cmd.Flags().IntVar(&basePort, "base-port", 7700, "node i uses base+10i (gRPC), +1 (raft), +2 (HTTP)")
	cmd.Flags().StringVar(&host, "host", "127.0.0.1", "the address the nodes listen on")
	cmd.Flags().IntVar(&watchHistory, "watch-history", 0, "changes each node keeps for watches to resume from (serve's --watch-history; 0: its default)")
	cmd.Flags().IntVar(&groups, "groups", 1, "Raft groups the cluster runs (serve's --groups): the namespaces spread over them, each with its own leader")
	cmd.Flags().BoolVar(&useTLS, "tls", false, "create a CA and certificates in the data dir and run every link over (mutual) TLS")
	return cmd
}

func runDev(dataDir, host string, n, base int, useTLS bool, watchHistory, groups int) error {
	keep := dataDir != ""
	if !keep {
		d, err := os.MkdirTemp("", "lockcluster-dev-")
		if err != nil {
			return err
		}
		dataDir = d
	}
	// Absolute, so that the restart commands printed work from anywhere.
	dataDir, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	self, err := devBinary(dataDir)
	if err != nil {
		return err
	}
	var tlsFiles lockcluster.TLSFiles
	var admin []lockcluster.Option
	tlsDir := filepath.Join(dataDir, "tls")
	if useTLS {
		if tlsFiles, err = devCerts(tlsDir, host, n); err != nil {
			return err
		}
		cfg, err := tlsFiles.Config()
		if err != nil {
			return err
		}
		admin = append(admin, lockcluster.WithTLS(cfg))
	}
	logDir := filepath.Join(dataDir, "logs")
	exits := make(chan *proccluster.Node, n)
	c, err := proccluster.New(proccluster.Config{Bin: self, Nodes: n, Dir: dataDir, Keep: keep, LogDir: logDir, Host: host, BasePort: base,
		Admin: admin, Extra: func(c *proccluster.Cluster, i int) []string {
			var extra []string
			if watchHistory > 0 {
				extra = append(extra, fmt.Sprintf("--watch-history=%d", watchHistory))
			}
			if groups > 1 {
				extra = append(extra, fmt.Sprintf("--groups=%d", groups))
			}
			if !useTLS {
				return extra
			}
			id := c.Nodes[i].ID
			return append(extra, "--tls-ca", tlsFiles.CA, "--tls-cert", filepath.Join(tlsDir, id+".crt"), "--tls-key", filepath.Join(tlsDir, id+".key"))
		},
		OnExit: func(nd *proccluster.Node, _ error, _ bool) {
			select {
			case exits <- nd:
			default:
			}
		}})
	if err != nil {
		return err
	}
	if err := c.StartAll(); err != nil {
		c.Stop()
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)

	leader, err := devLeader(c, sig)
	if err != nil {
		c.Stop()
		return err
	}
	if groups > 1 {
		if err := c.Groups(context.Background(), 30*time.Second); err != nil {
			c.Stop()
			return err
		}
	}
	addrs := c.Addrs()
	fmt.Printf("lockcluster dev: %d nodes, data in %s (logs in %s)\n\n", n, dataDir, logDir)
	if groups > 1 {
		fmt.Printf("  %d Raft groups: the namespaces spread over them ('lockcluster status' lists each group's leader); (leader) below is group 0's\n\n", groups)
	}
	for i, nd := range c.Nodes {
		mark := ""
		if i == leader {
			mark = "  (leader)"
		}
		scheme := "http"
		if useTLS {
			scheme = "https"
		}
		fmt.Printf("  %s  pid %-7d gRPC %s  raft %s  HTTP %s://%s%s\n", nd.ID, c.PID(i), nd.GRPC, nd.Raft, scheme, nd.HTTP, mark)
	}
	if useTLS {
		fmt.Printf("\nTLS: every link is TLS, verified against %s; clients use the certificate below.\n", tlsFiles.CA)
		fmt.Printf("  export LOCKCLUSTER_CACERT=%s LOCKCLUSTER_CERT=%s LOCKCLUSTER_KEY=%s\n", tlsFiles.CA, tlsFiles.Cert, tlsFiles.Key)
	}
	fmt.Printf(`
LOCKCLUSTER_ADDR=%s

Try, in another terminal:
  export LOCKCLUSTER_ADDR=%s
  lockcluster lock demo -- sh -c 'echo "holding demo with token $LOCKCLUSTER_LOCK_TOKEN"; sleep 10'
  lockcluster query
  kill -9 <a pid above>   # and watch the others elect a new leader

Ctrl-C stops the cluster.
`, strings.Join(addrs, ","), strings.Join(addrs, ","))
	for {
		select {
		case s := <-sig:
			fmt.Printf("\n%s: stopping the cluster...\n", s)
			c.Stop()
			if !keep {
				// Stop removed the data unless a node started by hand
				// (a restart command above) still runs on it.
				for _, h := range c.InUse() {
					fmt.Printf("kept %s: %s is in use by process %d, which dev did not start; stop it, then remove %s\n", dataDir, h.Dir, h.PID, dataDir)
				}
			}
			return nil
		case nd := <-exits:
			i := slices.Index(c.Nodes, nd)
			fmt.Printf("%s (pid %d) exited: %v. Restart it with:\n  %s %s\n", nd.ID, c.ProcessState(i).Pid(), c.ProcessState(i), self, strings.Join(nd.Args, " "))
		}
	}
}

// devLeader waits up to 30s for a leader, or until a signal on sig.
func devLeader(c *proccluster.Cluster, sig <-chan os.Signal) (int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan os.Signal, 1)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case s := <-sig:
			got <- s
			cancel()
		case <-ctx.Done():
		}
	}()
	leader, err := c.Leader(ctx, 30*time.Second)
	cancel()
	<-watched
	select {
	case s := <-got:
		return -1, fmt.Errorf("interrupted (%s)", s)
	default:
	}
	if err != nil {
		return -1, fmt.Errorf("the cluster elected no leader within 30s: see the logs")
	}
	return leader, nil
}

// devCerts creates a CA, a certificate per node and one for clients in dir.
// It returns the CA and the client's files.
func devCerts(dir, host string, nodes int) (lockcluster.TLSFiles, error) {
	if err := pki.CreateCA(dir, "lockcluster dev CA", 30*24*time.Hour); err != nil {
		return lockcluster.TLSFiles{}, err
	}
	hosts := []string{host, "127.0.0.1", "localhost"}
	for i := range nodes {
		if err := pki.CreateCert(pki.CertRequest{CADir: dir, OutDir: dir, Name: proccluster.NodeID(i), Hosts: hosts, Validity: 30 * 24 * time.Hour}); err != nil {
			return lockcluster.TLSFiles{}, err
		}
	}
	if err := pki.CreateCert(pki.CertRequest{CADir: dir, OutDir: dir, Name: "client", Validity: 30 * 24 * time.Hour}); err != nil {
		return lockcluster.TLSFiles{}, err
	}
	return lockcluster.TLSFiles{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "client.crt"), Key: filepath.Join(dir, "client.key")}, nil
}

// devBinary hard-links (or copies) the running binary to dataDir/bin and
// returns that path: the nodes run it, and the restart commands dev prints
// name it, so that they keep working after 'go run' removes the build
// directory the running binary is in.
func devBinary(dataDir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dataDir, "bin", "lockcluster")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	tmp := dst + ".new"
	os.Remove(tmp)
	if err := os.Link(self, tmp); err != nil {
		if err := copyFile(self, tmp, 0o755); err != nil {
			return "", fmt.Errorf("copying %s to %s: %w", self, tmp, err)
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return dst, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
