package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// unit is a systemd unit file: section -> key -> values (in order).
type unit map[string]map[string][]string

func (u unit) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func readUnit(t *testing.T, file string) unit {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	var cur map[string][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			cur = map[string][]string{}
			u[strings.Trim(line, "[]")] = cur
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || cur == nil {
				t.Fatalf("%s: not a key=value line in a section: %q", file, line)
			}
			cur[k] = append(cur[k], v)
		}
	}
	return u
}

// envFile reads KEY=VALUE lines, as systemd's EnvironmentFile= does.
func envFile(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.Contains(line, "=") {
			t.Fatalf("%s: not KEY=VALUE: %q", file, line)
		}
		out = append(out, line)
	}
	return out
}

// exitCode reads one of cmd/lockcluster's exit status constants.
func exitCode(t *testing.T, name string) int {
	t.Helper()
	files, _ := filepath.Glob("../cmd/lockcluster/*.go")
	re := regexp.MustCompile(`\b` + name + `\s*=\s*(\d+)`)
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if m := re.FindSubmatch(b); m != nil {
			n, _ := strconv.Atoi(string(m[1]))
			return n
		}
	}
	t.Fatalf("no constant %s in cmd/lockcluster", name)
	return 0
}

// The unit as shipped: the user it runs as exists (the sysusers file
// creates it), it has a working and a state directory, the config it
// reads uses absolute paths inside them, and it does not restart a node
// whose exit says a restart cannot help.
func TestSystemdUnit(t *testing.T) {
	u := readUnit(t, "systemd/lockcluster.service")
	svc := u["Service"]
	if u["Unit"] == nil || u["Install"] == nil || svc == nil {
		t.Fatalf("unit sections: %v", u)
	}
	if exec := u.get("Service", "ExecStart"); !strings.HasSuffix(exec, "lockcluster serve") || !filepath.IsAbs(strings.Fields(exec)[0]) {
		t.Errorf("ExecStart=%s", exec)
	}
	if reload := u.get("Service", "ExecReload"); reload != "/bin/kill -HUP $MAINPID" {
		t.Errorf("ExecReload=%s: want SIGHUP, which reloads the settings", reload)
	}
	if u.get("Service", "KillSignal") != "SIGTERM" {
		t.Errorf("KillSignal=%s", u.get("Service", "KillSignal"))
	}
	if d := u.get("Service", "WorkingDirectory"); !filepath.IsAbs(d) {
		t.Errorf("WorkingDirectory=%q: want an absolute directory", d)
	}
	if u.get("Service", "StateDirectory") != "lockcluster" {
		t.Errorf("StateDirectory=%q", u.get("Service", "StateDirectory"))
	}
	// The user: DynamicUser, or the one the shipped sysusers file makes.
	if u.get("Service", "DynamicUser") != "yes" {
		user := u.get("Service", "User")
		b, err := os.ReadFile("systemd/lockcluster.sysusers")
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^u\s+` + regexp.QuoteMeta(user) + `\s`).Match(b) {
			t.Errorf("User=%s is neither DynamicUser nor created by systemd/lockcluster.sysusers", user)
		}
		if g := u.get("Service", "Group"); g != "" && g != user {
			t.Errorf("Group=%s: the sysusers line makes group %s", g, user)
		}
	}
	// No restart loop for a bad setting or a removed node.
	prevent := strings.Fields(u.get("Service", "RestartPreventExitStatus"))
	for _, c := range []string{"exitUsage", "exitRemoved"} {
		code := strconv.Itoa(exitCode(t, c))
		if !strings.Contains(" "+strings.Join(prevent, " ")+" ", " "+code+" ") {
			t.Errorf("RestartPreventExitStatus=%v lacks %s (%s)", prevent, code, c)
		}
	}
	if u.get("Service", "Restart") == "always" {
		t.Error("Restart=always restarts a node that exited 0 on purpose")
	}
	// The config the unit reads, and its paths.
	var cfgPath, envPath string
	for _, e := range svc["Environment"] {
		if v, ok := strings.CutPrefix(e, "LOCKCLUSTER_CONFIG="); ok {
			cfgPath = v
		}
	}
	envPath = strings.TrimPrefix(u.get("Service", "EnvironmentFile"), "-")
	if cfgPath != "/etc/lockcluster/lockcluster.yaml" || envPath != "/etc/lockcluster/lockcluster.env" {
		t.Fatalf("the unit reads %q and %q: the test installs systemd/lockcluster.yaml and lockcluster.env there", cfgPath, envPath)
	}
	b, err := os.ReadFile("systemd/lockcluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"data-dir", "tls-ca", "tls-cert", "tls-key"} {
		if p, _ := cfg[k].(string); !filepath.IsAbs(p) {
			t.Errorf("systemd/lockcluster.yaml: %s: %q is not an absolute path", k, p)
		}
	}
	known := knownSettings(t)
	for k := range cfg {
		if !known[k] && k != "auth" {
			t.Errorf("systemd/lockcluster.yaml: %q is not a serve setting", k)
		}
	}
	for _, e := range append(envFile(t, "systemd/lockcluster.env"), svc["Environment"]...) {
		k, _, _ := strings.Cut(e, "=")
		if key, ok := strings.CutPrefix(k, "LOCKCLUSTER_"); !ok || !known[strings.ToLower(strings.ReplaceAll(key, "_", "-"))] {
			t.Errorf("%s is not a serve setting's variable", k)
		}
	}
	if cfg["data-dir"] != "/var/lib/"+u.get("Service", "StateDirectory") {
		t.Errorf("data-dir %v is not the StateDirectory", cfg["data-dir"])
	}
	// The sysusers file itself, where systemd-sysusers is installed.
	if sysusers, err := exec.LookPath("systemd-sysusers"); err == nil && u.get("Service", "DynamicUser") != "yes" {
		root := t.TempDir()
		os.MkdirAll(filepath.Join(root, "etc"), 0o755)
		file, _ := filepath.Abs("systemd/lockcluster.sysusers")
		if out, err := exec.Command(sysusers, "--root="+root, file).CombinedOutput(); err != nil {
			t.Fatalf("systemd-sysusers: %v\n%s", err, out)
		}
		passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
		if !strings.HasPrefix(string(passwd), u.get("Service", "User")+":") && !strings.Contains(string(passwd), "\n"+u.get("Service", "User")+":") {
			t.Fatalf("systemd-sysusers made no user %s:\n%s", u.get("Service", "User"), passwd)
		}
	}
}

// systemd-analyze verify accepts the unit (its ExecStart pointed at the
// binary built from ./cmd/lockcluster: verify checks that it exists).
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI: systemd-analyze is missing (Debian package systemd, see .ci/run)")
		}
		t.Skip("no systemd-analyze (Debian package systemd)")
	}
	bin := binary(t)
	b, err := os.ReadFile("systemd/lockcluster.service")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	unitFile := filepath.Join(dir, "lockcluster.service")
	text := strings.Replace(string(b), "ExecStart=/usr/local/bin/lockcluster ", "ExecStart="+bin+" ", 1)
	if text == string(b) {
		t.Fatal("no ExecStart=/usr/local/bin/lockcluster line to point at the built binary")
	}
	os.WriteFile(unitFile, []byte(text), 0o644)
	out, err := exec.Command(analyze, "verify", "--man=no", unitFile).CombinedOutput()
	if err != nil || strings.Contains(string(out), "lockcluster.service") {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// Three machines as the unit and its files describe them: each runs the
// unit's ExecStart (the built binary) with the unit's environment, its
// EnvironmentFile and the shipped config, in its working directory, the
// machine's /etc/lockcluster and /var/lib/lockcluster (StateDirectory) in
// a temporary directory and node0..2.example.net on loopback ports. TLS
// and auth are on as shipped. The nodes become ready, form one cluster,
// and each stops cleanly on SIGTERM within TimeoutStopSec.
func TestSystemdUnitRuns(t *testing.T) {
	bin := binary(t)
	u := readUnit(t, "systemd/lockcluster.service")
	exec0 := strings.Fields(u.get("Service", "ExecStart"))
	cfgText, err := os.ReadFile("systemd/lockcluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env0 := envFile(t, "systemd/lockcluster.env")
	stop, err := time.ParseDuration(u.get("Service", "TimeoutStopSec") + "s")
	if err != nil {
		t.Fatal(err)
	}
	state := "/var/lib/" + u.get("Service", "StateDirectory")
	adminToken, nsToken := "admin-token-0123456789abcdef", "billing-token-0123456789abcdef"

	top := t.TempDir()
	caDir := filepath.Join(top, "ca")
	ids := []string{"node0", "node1", "node2"}
	makeCerts(t, bin, caDir, ids, func(n string) string { return n + ".example.net,127.0.0.1,localhost" })
	hosts := regexp.MustCompile(`node\d\.example\.net:\d+`)
	addrs := newAddrMap(t)

	procs := make([]*proc, len(ids))
	var grpcAddrs []string
	for i, id := range ids {
		root := filepath.Join(top, id) // this machine's /
		rootPath := func(s string) string {
			for _, p := range []string{"/etc/lockcluster", state} {
				s = strings.ReplaceAll(s, p, filepath.Join(root, p))
			}
			return s
		}
		etc := filepath.Join(root, "etc/lockcluster")
		os.MkdirAll(filepath.Join(etc, "certs"), 0o755)
		os.MkdirAll(filepath.Join(root, state), 0o700) // StateDirectory=, mode 0700
		for src, dst := range map[string]string{"ca.crt": "ca.crt", id + ".crt": "node.crt", id + ".key": "node.key"} {
			b, err := os.ReadFile(filepath.Join(caDir, src))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(etc, "certs", dst), b, 0o640)
		}
		cfg := strings.NewReplacer("<admin token>", adminToken, "<billing token>", nsToken).Replace(string(cfgText))
		cfg = rootPath(addrs.rewrite(cfg, hosts, id+".example.net"))
		os.WriteFile(filepath.Join(etc, "lockcluster.yaml"), []byte(cfg), 0o640)
		var envLines []string
		for _, l := range env0 {
			envLines = append(envLines, strings.ReplaceAll(l, "node0", id))
		}
		os.WriteFile(filepath.Join(etc, "lockcluster.env"), []byte(strings.Join(envLines, "\n")+"\n"), 0o644)

		// The process's environment: what the unit sets, then the file.
		env := []string{"PATH=/usr/bin:/bin", "NO_COLOR=1"}
		for _, e := range u["Service"]["Environment"] {
			env = append(env, rootPath(e))
		}
		for _, e := range envFile(t, rootPath(strings.TrimPrefix(u.get("Service", "EnvironmentFile"), "-"))) {
			env = append(env, addrs.rewrite(e, hosts, id+".example.net"))
		}
		args := exec0[1:]
		procs[i] = startProc(t, id, bin, args, env, rootPath(u.get("Service", "WorkingDirectory")), filepath.Join(top, id+".log"))
		grpcAddrs = append(grpcAddrs, addrs.get(id+".example.net:7700"))
	}
	client := httpClient(t, filepath.Join(caDir, "ca.crt"))
	for i, id := range ids {
		waitHTTP(t, procs[i], client, "https://"+addrs.get(id+".example.net:7702")+"/readyz", 60*time.Second)
	}
	auth := []string{"--cacert", filepath.Join(caDir, "ca.crt"), "--token", adminToken}
	leader, applied := oneCluster(t, bin, auth, grpcAddrs, ids, 1, 30*time.Second)
	t.Logf("one cluster: leader %s, applied index %d", leader, applied)
	if os.Getenv("DEPLOY_TEST_LOGS") != "" {
		t.Logf("node0's log:\n%s", procs[0].logText())
	}
	if !strings.Contains(procs[0].logText(), "bootstrapping a new cluster") {
		t.Errorf("node0 did not bootstrap:\n%s", procs[0].logText())
	}
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(t, stop)
	}
	if _, err := os.Stat(filepath.Join(top, "node0", state, "raft")); err != nil {
		t.Errorf("the data is not in the StateDirectory: %v", err)
	}
}
