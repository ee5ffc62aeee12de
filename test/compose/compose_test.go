// Package compose checks the repository's docker-compose.yml and Dockerfile
// without a Docker engine: the file must load and validate with compose-go
// (the Compose Specification's reference loader, used by `docker compose`
// v2), stay within what Debian's docker-compose v1.29 accepts, and have the
// shape the README and the chaos harness rely on.
//
// It is a module of its own so that the main module never depends on
// compose-go; test/composetest in the main module runs it.
package compose

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v4"
)

const (
	composeFile = "../../docker-compose.yml"
	dockerfile  = "../../Dockerfile"
	image       = "lockcluster:dev"
	network     = "lockcluster"
)

var nodes = []string{"node0", "node1", "node2"}

// Keys that Debian's docker-compose 1.29 accepts (its compose_spec.json):
// it rejects anything else, e.g. a top-level name: or a healthcheck's
// start_interval, which compose v2 would take.
var (
	v1TopLevel    = []string{"services", "networks", "volumes", "secrets", "configs"}
	v1Healthcheck = []string{"disable", "interval", "retries", "test", "timeout", "start_period"}
)

func raw(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return m
}

func load(t *testing.T) *types.Project {
	t.Helper()
	abs, err := filepath.Abs(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := loader.LoadWithContext(ctx, types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs}},
		Environment: types.Mapping{}, // the file must not need any variable
	}, func(o *loader.Options) { o.SetProjectName("lockcluster", true) })
	if err != nil {
		t.Fatalf("compose-go rejects %s: %v", composeFile, err)
	}
	return p
}

// flag returns the value of --name=value or --name value in args.
func flag(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func TestTopLevel(t *testing.T) {
	m := raw(t)
	if _, ok := m["version"]; ok {
		t.Error("the file has a version: key; the Compose Specification has none (v2 warns, and it pins v1's schema)")
	}
	for k := range m {
		if !strings.HasPrefix(k, "x-") && !slices.Contains(v1TopLevel, k) {
			t.Errorf("top-level key %q: docker-compose 1.29 rejects it (it accepts %v and x-*)", k, v1TopLevel)
		}
	}
}

func TestServices(t *testing.T) {
	p := load(t)
	if got := p.ServiceNames(); !slices.Equal(sortedCopy(got), nodes) {
		t.Fatalf("services %v, want %v", got, nodes)
	}
	var bootstrap string
	addrs := map[string]string{}
	for i, name := range nodes {
		s := p.Services[name]
		t.Run(name, func(t *testing.T) {
			if s.Image != image {
				t.Errorf("image %q, want %q (built by scripts/docker-build.sh)", s.Image, image)
			}
			if s.Build != nil {
				t.Errorf("build: set; the image is built by scripts/docker-build.sh around a binary built on the host")
			}
			if s.PullPolicy != "never" {
				t.Errorf("pull_policy %q, want never: the image is local, nothing can be pulled", s.PullPolicy)
			}
			if s.Restart != "no" {
				t.Errorf(`restart %q, want "no": the chaos harness restarts killed nodes itself`, s.Restart)
			}
			if want := "lockcluster-" + name; s.ContainerName != want {
				t.Errorf("container_name %q, want %q (the chaos harness addresses containers by name)", s.ContainerName, want)
			}
			for dep, d := range s.DependsOn {
				if d.Condition == types.ServiceConditionHealthy {
					t.Errorf("depends_on %s: condition service_healthy; a node is healthy only once there is a leader, which needs two nodes: deadlock", dep)
				}
			}

			// serve, listening everywhere, advertising the service name.
			cmd := []string(s.Command)
			if len(cmd) == 0 || cmd[0] != "serve" {
				t.Fatalf("command %q does not start with serve", cmd)
			}
			want := map[string]string{
				"id": name, "data-dir": "/data",
				"grpc-addr": "0.0.0.0:7700", "raft-addr": "0.0.0.0:7701", "http-addr": "0.0.0.0:7702",
				"advertise-grpc": name + ":7700", "advertise-raft": name + ":7701", "advertise-http": name + ":7702",
			}
			for k, v := range want {
				if got, ok := flag(cmd, k); !ok || got != v {
					t.Errorf("--%s=%q, want %q", k, got, v)
				}
			}
			b, _ := flag(cmd, "bootstrap")
			if i == 0 {
				bootstrap = b
			} else if b != bootstrap {
				t.Errorf("--bootstrap=%q differs from node0's %q: every first node needs the same list", b, bootstrap)
			}
			var peers []string
			for _, n := range nodes {
				peers = append(peers, n+"="+n+":7701")
			}
			if b != strings.Join(peers, ",") {
				t.Errorf("--bootstrap=%q, want %q", b, strings.Join(peers, ","))
			}

			// One named volume of its own at the data directory.
			if len(s.Volumes) != 1 || s.Volumes[0].Type != types.VolumeTypeVolume || s.Volumes[0].Target != "/data" || s.Volumes[0].Source != name+"-data" {
				t.Errorf("volumes %+v, want the named volume %s-data at /data", s.Volumes, name)
			} else if _, ok := p.Volumes[name+"-data"]; !ok {
				t.Errorf("volume %s-data is not declared at the top level", name)
			}

			// Only the user-defined network, at a fixed address.
			if len(s.Networks) != 1 || s.Networks[network] == nil {
				t.Fatalf("networks %v, want only %s", s.Networks, network)
			}
			addrs[name] = s.Networks[network].Ipv4Address

			// Client and HTTP ports on the host's loopback only; raft stays inside.
			wantPorts := map[uint32]string{7700: fmt.Sprint(7700 + 10*i), 7702: fmt.Sprint(7702 + 10*i)}
			if len(s.Ports) != len(wantPorts) {
				t.Errorf("%d published ports, want %d (gRPC and HTTP)", len(s.Ports), len(wantPorts))
			}
			for _, pc := range s.Ports {
				if pc.HostIP != "127.0.0.1" {
					t.Errorf("port %d published on %q, want 127.0.0.1 only", pc.Target, pc.HostIP)
				}
				if w, ok := wantPorts[pc.Target]; !ok || pc.Published != w {
					t.Errorf("port %d published as %q, want %q", pc.Target, pc.Published, w)
				}
			}

			// The healthcheck execs the binary: no shell in a scratch image.
			h := s.HealthCheck
			if h == nil || h.Disable {
				t.Fatal("no healthcheck")
			}
			test := []string(h.Test)
			if len(test) < 5 || !slices.Equal(test[:5], []string{"CMD", "/lockcluster", "health", "--addr", "127.0.0.1:7700"}) {
				t.Errorf("healthcheck test %q, want [CMD /lockcluster health --addr 127.0.0.1:7700 ...]", test)
			}
			if h.Interval == nil || h.Timeout == nil || h.Retries == nil {
				t.Errorf("healthcheck without interval, timeout or retries: Docker's defaults (30s) are too slow to watch a chaos test")
			} else if rt, ok := flag(test, "request-timeout"); ok {
				if d, err := time.ParseDuration(rt); err != nil || d >= time.Duration(*h.Timeout) {
					t.Errorf("health --request-timeout %s must be shorter than the healthcheck timeout %s", rt, time.Duration(*h.Timeout))
				}
			}
			if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) < 15*time.Second {
				t.Errorf("stop_grace_period %v: a node may take 15 s to hand over leadership on SIGTERM", s.StopGracePeriod)
			}
		})
	}

	// The fixed addresses: distinct, in the subnet, outside the range
	// Docker hands out to anything else attached to the network.
	n, ok := p.Networks[network]
	if !ok {
		t.Fatalf("network %s is not declared", network)
	}
	if n.Name != network || bool(n.External) || n.Internal || n.Driver != "bridge" {
		t.Errorf("network %+v: want a bridge named %s, not external, not internal (published ports need the bridge's gateway)", n, network)
	}
	if len(n.Ipam.Config) != 1 {
		t.Fatalf("network ipam config %+v: want one pool", n.Ipam.Config)
	}
	subnet, err := netip.ParsePrefix(n.Ipam.Config[0].Subnet)
	if err != nil {
		t.Fatalf("subnet: %v", err)
	}
	ipRange, err := netip.ParsePrefix(n.Ipam.Config[0].IPRange)
	if err != nil {
		t.Fatalf("ip_range: %v", err)
	}
	seen := map[netip.Addr]string{}
	for _, name := range nodes {
		a, err := netip.ParseAddr(addrs[name])
		if err != nil {
			t.Errorf("%s: ipv4_address %q: %v", name, addrs[name], err)
			continue
		}
		if !subnet.Contains(a) || ipRange.Contains(a) {
			t.Errorf("%s: %s must be in %s and outside ip_range %s", name, a, subnet, ipRange)
		}
		if other, dup := seen[a]; dup {
			t.Errorf("%s and %s share %s", name, other, a)
		}
		seen[a] = name
	}
}

func TestHealthcheckKeysV1(t *testing.T) {
	m := raw(t)
	check := func(where string, v any) {
		h, ok := v.(map[string]any)
		if !ok {
			return
		}
		hc, ok := h["healthcheck"].(map[string]any)
		if !ok {
			return
		}
		for k := range hc {
			if !slices.Contains(v1Healthcheck, k) {
				t.Errorf("%s: healthcheck key %q: docker-compose 1.29 rejects it", where, k)
			}
		}
	}
	for k, v := range m {
		if strings.HasPrefix(k, "x-") {
			check(k, v)
		}
	}
	svcs, _ := m["services"].(map[string]any)
	for name, v := range svcs {
		check(name, v)
	}
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	var instr []string
	for l := range strings.SplitSeq(string(b), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(strings.ToLower(strings.ReplaceAll(l, " ", "")), "#syntax=") {
			t.Error("a # syntax= line makes BuildKit pull its frontend; nothing can be pulled")
		}
		if l != "" && !strings.HasPrefix(l, "#") {
			instr = append(instr, l)
		}
	}
	var froms []string
	for _, l := range instr {
		if f, ok := strings.CutPrefix(l, "FROM "); ok {
			froms = append(froms, strings.TrimSpace(f))
		}
	}
	if !slices.Equal(froms, []string{"scratch"}) {
		t.Errorf("FROM %v, want only scratch (no image can be pulled)", froms)
	}
	if !slices.Contains(instr, "COPY dist/lockcluster /lockcluster") {
		t.Error("the binary is not copied to /lockcluster, where the healthcheck runs it")
	}
	if !slices.Contains(instr, `ENTRYPOINT ["/lockcluster"]`) {
		t.Error(`no ENTRYPOINT ["/lockcluster"]`)
	}
}

// The compose tools themselves, where they are installed, accept the file.
func TestComposeConfig(t *testing.T) {
	tools := map[string][]string{"docker compose": {"docker", "compose"}, "docker-compose": {"docker-compose"}}
	ran := 0
	for name, argv := range tools {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := exec.LookPath(argv[0]); err != nil {
				t.Skipf("%s is not installed", argv[0])
			}
			if err := exec.CommandContext(ctx, argv[0], append(argv[1:], "version")...).Run(); err != nil {
				t.Skipf("%s is not available: %v", name, err)
			}
			args := append(argv[1:], "-p", "lockcluster-config-check", "-f", composeFile, "config", "-q")
			out, err := exec.CommandContext(ctx, argv[0], args...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s config: %v\n%s", name, err, out)
			}
			if len(strings.TrimSpace(string(out))) > 0 {
				t.Logf("%s config says: %s", name, out)
			}
			ran++
		})
	}
	t.Logf("checked with %d compose tool(s)", ran)
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
