package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
	"github.com/lockcluster/lockcluster/api/secure"
)

type devNode struct {
	id, dir          string
	grpc, raft, http string
	args             []string
	cmd              *exec.Cmd
	exited           chan struct{}
}

func newDev() *cobra.Command {
	var dataDir, host string
	var nodes, basePort int
	var useTLS bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local 3-node cluster, one process per node",
		Long: `Run a local cluster for development: each node is its own 'lockcluster serve'
process, so you can kill one (kill -9 PID) and watch another take over. Node i
serves gRPC on port 7700+10i, raft on 7701+10i and HTTP on 7702+10i; --base-port
moves them all. Data lives in a temporary directory removed on exit, unless
--data-dir is given. Ctrl-C stops every node.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 || nodes > 9 {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--nodes %d: between 1 and 9", nodes)}
			}
			if basePort < 1 || basePort+10*nodes > 65535 {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--base-port %d is out of range", basePort)}
			}
			return runDev(dataDir, host, nodes, basePort, useTLS)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "keep the nodes' data here (default: a temporary directory, removed on exit)")
	cmd.Flags().IntVar(&nodes, "nodes", 3, "how many nodes")
	cmd.Flags().IntVar(&basePort, "base-port", 7700, "node i uses base+10i (gRPC), +1 (raft), +2 (HTTP)")
	cmd.Flags().StringVar(&host, "host", "127.0.0.1", "the address the nodes listen on")
	cmd.Flags().BoolVar(&useTLS, "tls", false, "create a CA and certificates in the data dir and run every link over (mutual) TLS")
	return cmd
}

func runDev(dataDir, host string, n, base int, useTLS bool) error {
	keep := dataDir != ""
	if !keep {
		d, err := os.MkdirTemp("", "lockcluster-dev-")
		if err != nil {
			return err
		}
		dataDir = d
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var peers []string
	nodes := make([]*devNode, n)
	for i := range nodes {
		p := base + 10*i
		nd := &devNode{id: fmt.Sprintf("node%d", i), dir: filepath.Join(dataDir, fmt.Sprintf("node%d", i)),
			grpc: fmt.Sprintf("%s:%d", host, p), raft: fmt.Sprintf("%s:%d", host, p+1), http: fmt.Sprintf("%s:%d", host, p+2)}
		nodes[i] = nd
		peers = append(peers, nd.id+"="+nd.raft)
	}
	var addrs []string
	var tlsFiles secure.Files
	if useTLS {
		var err error
		if tlsFiles, err = devCerts(filepath.Join(dataDir, "tls"), host, nodes); err != nil {
			return err
		}
	}
	for _, nd := range nodes {
		nd.args = []string{"serve", "--id", nd.id, "--data-dir", nd.dir, "--grpc-addr", nd.grpc, "--raft-addr", nd.raft,
			"--http-addr", nd.http, "--bootstrap", strings.Join(peers, ",")}
		if useTLS {
			dir := filepath.Join(dataDir, "tls")
			nd.args = append(nd.args, "--tls-ca", tlsFiles.CA, "--tls-cert", filepath.Join(dir, nd.id+".crt"), "--tls-key", filepath.Join(dir, nd.id+".key"))
		}
		addrs = append(addrs, nd.grpc)
	}
	stopAll := func() {
		for _, nd := range nodes {
			if nd.cmd != nil && nd.cmd.Process != nil {
				nd.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		for _, nd := range nodes {
			if nd.exited == nil {
				continue
			}
			select {
			case <-nd.exited:
			case <-time.After(15 * time.Second):
				nd.cmd.Process.Kill()
				<-nd.exited
			}
		}
		if !keep {
			os.RemoveAll(dataDir)
		}
	}
	logDir := filepath.Join(dataDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	exits := make(chan *devNode, n)
	for _, nd := range nodes {
		if err := nd.start(self, logDir, exits); err != nil {
			stopAll()
			return fmt.Errorf("starting %s: %w", nd.id, err)
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	leader, err := waitLeader(ctx, addrs, tlsFiles, sig)
	cancel()
	if err != nil {
		stopAll()
		return err
	}
	fmt.Printf("lockcluster dev: %d nodes, data in %s (logs in %s)\n\n", n, dataDir, logDir)
	for _, nd := range nodes {
		mark := ""
		if nd.id == leader {
			mark = "  (leader)"
		}
		scheme := "http"
		if useTLS {
			scheme = "https"
		}
		fmt.Printf("  %s  pid %-7d gRPC %s  raft %s  HTTP %s://%s%s\n", nd.id, nd.cmd.Process.Pid, nd.grpc, nd.raft, scheme, nd.http, mark)
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
			stopAll()
			return nil
		case nd := <-exits:
			fmt.Printf("%s (pid %d) exited: %v. Restart it with:\n  %s %s\n", nd.id, nd.cmd.Process.Pid, nd.cmd.ProcessState, self, strings.Join(nd.args, " "))
		}
	}
}

func (nd *devNode) start(self, logDir string, exits chan<- *devNode) error {
	f, err := os.OpenFile(filepath.Join(logDir, nd.id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	nd.cmd = exec.Command(self, nd.args...)
	nd.cmd.Stdout, nd.cmd.Stderr = f, f
	nd.cmd.Env = append(os.Environ(), "NO_COLOR=1")
	if err := nd.cmd.Start(); err != nil {
		f.Close()
		return err
	}
	nd.exited = make(chan struct{})
	go func() {
		nd.cmd.Wait()
		f.Close()
		close(nd.exited)
		exits <- nd
	}()
	return nil
}

func waitLeader(ctx context.Context, addrs []string, files secure.Files, sig <-chan os.Signal) (string, error) {
	var opts []lockcluster.Option
	if files.Enabled() {
		cfg, err := files.Client()
		if err != nil {
			return "", err
		}
		opts = append(opts, lockcluster.WithTLS(cfg))
	}
	a, err := lockcluster.DialAdmin(addrs, opts...)
	if err != nil {
		return "", err
	}
	defer a.Close()
	for {
		for _, st := range a.Status(ctx) {
			if st.Err == "" && st.LeaderID != "" {
				return st.LeaderID, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the cluster elected no leader within 30s: see the logs")
		case s := <-sig:
			return "", fmt.Errorf("interrupted (%s)", s)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// devCerts creates a CA, a certificate per node and one for clients in dir.
// It returns the CA and the client's files.
func devCerts(dir, host string, nodes []*devNode) (secure.Files, error) {
	if err := secure.CreateCA(dir, "lockcluster dev CA", 30*24*time.Hour); err != nil {
		return secure.Files{}, err
	}
	hosts := []string{host, "127.0.0.1", "localhost"}
	for _, nd := range nodes {
		if err := secure.CreateCert(secure.CertRequest{CADir: dir, OutDir: dir, Name: nd.id, Hosts: hosts, Validity: 30 * 24 * time.Hour}); err != nil {
			return secure.Files{}, err
		}
	}
	if err := secure.CreateCert(secure.CertRequest{CADir: dir, OutDir: dir, Name: "client", Validity: 30 * 24 * time.Hour}); err != nil {
		return secure.Files{}, err
	}
	return secure.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "client.crt"), Key: filepath.Join(dir, "client.key")}, nil
}
