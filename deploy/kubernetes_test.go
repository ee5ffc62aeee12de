package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

type k8sProbe struct {
	HTTPGet *struct {
		Path   string
		Port   any // a number or a port's name
		Scheme string
	} `json:"httpGet"`
}

type k8sContainer struct {
	Name    string
	Command []string
	Args    []string
	Env     []struct {
		Name      string
		Value     string
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `json:"fieldPath"`
			} `json:"fieldRef"`
		} `json:"valueFrom"`
	}
	EnvFrom []struct {
		ConfigMapRef *struct{ Name string } `json:"configMapRef"`
		SecretRef    *struct{ Name string } `json:"secretRef"`
	} `json:"envFrom"`
	Ports []struct {
		Name          string
		ContainerPort int `json:"containerPort"`
	}
	LivenessProbe  *k8sProbe `json:"livenessProbe"`
	ReadinessProbe *k8sProbe `json:"readinessProbe"`
	StartupProbe   *k8sProbe `json:"startupProbe"`
	VolumeMounts   []struct {
		Name      string
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly"`
	} `json:"volumeMounts"`
}

type k8sStatefulSet struct {
	Metadata struct{ Name string }
	Spec     struct {
		Replicas            int
		ServiceName         string `json:"serviceName"`
		PodManagementPolicy string `json:"podManagementPolicy"`
		Template            struct {
			Spec struct {
				Containers []k8sContainer
				Volumes    []struct {
					Name   string
					Secret *struct {
						SecretName string `json:"secretName"`
					}
					ConfigMap *struct{ Name string } `json:"configMap"`
				}
			}
		}
		VolumeClaimTemplates []struct {
			Metadata struct{ Name string }
		} `json:"volumeClaimTemplates"`
	}
}

type k8sService struct {
	Metadata struct{ Name string }
	Spec     struct {
		ClusterIP                string `json:"clusterIP"`
		PublishNotReadyAddresses bool   `json:"publishNotReadyAddresses"`
	}
}

// manifest is deploy/kubernetes/lockcluster.yaml, decoded.
type manifest struct {
	kinds      map[string]int
	configMaps map[string]map[string]string
	services   map[string]k8sService
	set        k8sStatefulSet
}

func readManifest(t *testing.T) *manifest {
	t.Helper()
	f, err := os.Open("kubernetes/lockcluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := &manifest{kinds: map[string]int{}, configMaps: map[string]map[string]string{}, services: map[string]k8sService{}}
	dec := yaml.NewDecoder(f)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		kind, _ := doc["kind"].(string)
		m.kinds[kind]++
		b, _ := json.Marshal(doc)
		var err error
		switch kind {
		case "ConfigMap":
			var cm struct {
				Metadata struct{ Name string }
				Data     map[string]string
			}
			err = json.Unmarshal(b, &cm)
			m.configMaps[cm.Metadata.Name] = cm.Data
		case "Service":
			var s k8sService
			err = json.Unmarshal(b, &s)
			m.services[s.Metadata.Name] = s
		case "StatefulSet":
			err = json.Unmarshal(b, &m.set)
		}
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
	}
	return m
}

func (m *manifest) container(t *testing.T) k8sContainer {
	t.Helper()
	c := m.set.Spec.Template.Spec.Containers
	if len(c) != 1 {
		t.Fatalf("StatefulSet: %d containers, want 1", len(c))
	}
	return c[0]
}

// settings are the container's serve settings: the ConfigMap's variables
// (envFrom) and its own, then the flags in its arguments, which win.
func (m *manifest) settings(t *testing.T) map[string]string {
	t.Helper()
	c := m.container(t)
	out := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			for k, v := range m.configMaps[ef.ConfigMapRef.Name] {
				if key, ok := strings.CutPrefix(k, "LOCKCLUSTER_"); ok {
					out[strings.ToLower(strings.ReplaceAll(key, "_", "-"))] = v
				}
			}
		}
	}
	for _, e := range c.Env {
		if key, ok := strings.CutPrefix(e.Name, "LOCKCLUSTER_"); ok {
			out[strings.ToLower(strings.ReplaceAll(key, "_", "-"))] = e.Value
		}
	}
	for _, a := range c.Args[1:] {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Fatalf("argument %q: want --setting=value", a)
		}
		out[k] = v
	}
	return out
}

// knownSettings are serve's settings, from the generated sample config.
func knownSettings(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("lockcluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{"config": true, "id": true}
	for _, m := range regexp.MustCompile(`(?m)^([a-z-]+):`).FindAllStringSubmatch(string(b), -1) {
		known[m[1]] = true
	}
	return known
}

// The manifest's shape: the Secrets and the ConfigMap it names are
// referenced and mounted, its probes use HTTPS when its settings turn TLS
// on, every setting is one serve has, and the start-up rule is in its
// arguments (bootstrap-check over the StatefulSet's own pods).
func TestKubernetesManifest(t *testing.T) {
	m := readManifest(t)
	if m.kinds["ConfigMap"] != 1 || m.kinds["Service"] != 2 || m.kinds["StatefulSet"] != 1 || m.kinds["PodDisruptionBudget"] != 1 {
		t.Fatalf("kinds: %v", m.kinds)
	}
	ss := m.set.Spec
	headless := m.services[ss.ServiceName]
	if ss.Replicas != 3 || headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
		t.Fatalf("StatefulSet %+v with service %+v: want 3 replicas behind a headless service that publishes unready pods", ss, headless)
	}
	if ss.PodManagementPolicy != "Parallel" {
		t.Errorf("podManagementPolicy %q: the first pod waits for the others to answer before it bootstraps", ss.PodManagementPolicy)
	}
	c := m.container(t)
	if len(c.Command) != 0 || len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("container command %v args %v", c.Command, c.Args)
	}
	// The ConfigMap is the container's environment.
	var cms []string
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			if _, ok := m.configMaps[ef.ConfigMapRef.Name]; !ok {
				t.Errorf("envFrom names ConfigMap %q, which the manifest does not define", ef.ConfigMapRef.Name)
			}
			cms = append(cms, ef.ConfigMapRef.Name)
		}
	}
	if len(cms) == 0 {
		t.Error("no ConfigMap in the container's envFrom")
	}
	set := m.settings(t)
	known := knownSettings(t)
	for k := range set {
		if !known[k] {
			t.Errorf("setting %q (an argument or LOCKCLUSTER_ variable) is not one serve has", k)
		}
	}
	// Secrets: every secret volume is mounted, and the files the settings
	// name lie in mounted secrets.
	secretMount := map[string]string{} // mount path -> secret
	mounts := map[string]string{}      // volume -> mount path
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm.MountPath
	}
	for _, v := range m.set.Spec.Template.Spec.Volumes {
		if v.Secret == nil || v.Secret.SecretName == "" {
			continue
		}
		p, ok := mounts[v.Name]
		if !ok {
			t.Errorf("secret volume %s (%s) is not mounted", v.Name, v.Secret.SecretName)
		}
		secretMount[p] = v.Secret.SecretName
	}
	inSecret := func(path string) string {
		for p, s := range secretMount {
			if strings.HasPrefix(path, p+"/") {
				return s
			}
		}
		return ""
	}
	for _, k := range []string{"tls-cert", "tls-key", "tls-ca", "config"} {
		if set[k] == "" || inSecret(set[k]) == "" {
			t.Errorf("%s=%q: want a file of a mounted Secret (TLS and auth come from Secrets)", k, set[k])
		}
	}
	// Probes: HTTPS exactly when TLS is on (the HTTP port then speaks it).
	tlsOn := set["tls-cert"] != ""
	httpPort := portOf(set["http-addr"])
	for name, p := range map[string]*k8sProbe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe: want an httpGet", name)
			continue
		}
		scheme := strings.ToUpper(p.HTTPGet.Scheme)
		if scheme == "" {
			scheme = "HTTP"
		}
		if want := map[bool]string{true: "HTTPS", false: "HTTP"}[tlsOn]; scheme != want {
			t.Errorf("%s probe scheme %s, want %s (TLS on: %v)", name, scheme, want, tlsOn)
		}
		if got := c.containerPort(p.HTTPGet.Port); got != httpPort {
			t.Errorf("%s probe port %v is %d, want the http-addr port %d", name, p.HTTPGet.Port, got, httpPort)
		}
	}
	if c.LivenessProbe.HTTPGet.Path != "/livez" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("probe paths %q %q", c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path)
	}
	// The start-up rule: the voters are the StatefulSet's pods, in
	// ordinal order, and bootstrap-check gives each one's client API.
	boot, check := peerIDs(set["bootstrap"]), peerIDs(set["bootstrap-check"])
	var pods []string
	for i := 0; i < ss.Replicas; i++ {
		pods = append(pods, fmt.Sprintf("%s-%d", m.set.Metadata.Name, i))
	}
	if !slices.Equal(boot, pods) || !slices.Equal(check, pods) {
		t.Errorf("bootstrap voters %v, bootstrap-check %v: want the pods %v in order", boot, check, pods)
	}
	if set["join"] != "" {
		t.Errorf("join=%q: the pods join through bootstrap-check", set["join"])
	}
}

func portOf(hostport string) int {
	i := strings.LastIndex(hostport, ":")
	n, _ := strconv.Atoi(hostport[i+1:])
	return n
}

func peerIDs(list string) []string {
	var out []string
	for _, p := range strings.Split(list, ",") {
		if id, _, ok := strings.Cut(p, "="); ok {
			out = append(out, id)
		}
	}
	return out
}

// containerPort resolves a probe's port (a number or a name).
func (c k8sContainer) containerPort(port any) int {
	switch p := port.(type) {
	case float64:
		return int(p)
	case string:
		for _, cp := range c.Ports {
			if cp.Name == p {
				return cp.ContainerPort
			}
		}
	}
	return -1
}

// pod is one pod of the StatefulSet, run as a process: the manifest's
// arguments and environment, its mounts moved into a directory.
type pod struct {
	name   string
	args   []string
	env    []string
	data   string // the data volume's directory
	probe  string // the readiness probe's URL
	grpc   string // its client API, on loopback
	logDir string
	runs   int
	proc   *proc
}

func (p *pod) start(t *testing.T, bin string) {
	t.Helper()
	p.runs++
	p.proc = startProc(t, p.name, bin, p.args, p.env, p.data, filepath.Join(p.logDir, fmt.Sprintf("%s.%d.log", p.name, p.runs)))
}

// A pod that comes back on an empty volume joins its cluster; it never
// bootstraps a second one. Three pods start as the manifest runs them
// (TLS and auth on, the Secrets' files made as the README says), form one
// cluster; then lockcluster-2, then lockcluster-0 (the one voter that may
// bootstrap), are stopped, their volumes emptied, and started again
// with the same arguments, and then lockcluster-0 and -1 together: each
// catches up on the cluster's log (its applied index reaches the one
// before the wipe), the members stay three with one leader, and none
// bootstraps.
func TestKubernetesEmptyVolumeRejoins(t *testing.T) {
	bin := binary(t)
	m := readManifest(t)
	c := m.container(t)
	const ns = "lockcluster-test"
	top := t.TempDir()
	adminToken, nsToken := "admin-token-0123456789abcdef", "billing-token-0123456789abcdef"

	// The Secrets' files, as README, Production makes them.
	secrets := map[string]string{} // secret name -> directory
	for _, v := range m.set.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Secret.SecretName] = filepath.Join(top, "secrets", v.Secret.SecretName)
			os.MkdirAll(secrets[v.Secret.SecretName], 0o755)
		}
	}
	if secrets["lockcluster-tls"] == "" || secrets["lockcluster-auth"] == "" {
		t.Fatalf("the manifest mounts the secrets %v; this test fills lockcluster-tls and lockcluster-auth", secrets)
	}
	var names []string
	for i := 0; i < m.set.Spec.Replicas; i++ {
		names = append(names, fmt.Sprintf("%s-%d", m.set.Metadata.Name, i))
	}
	svc := m.set.Spec.ServiceName
	caDir := filepath.Join(top, "ca")
	makeCerts(t, bin, caDir, names, func(n string) string {
		return fmt.Sprintf("%s.%s.%s.svc,lockcluster-client.%s.svc,lockcluster-client,localhost,127.0.0.1", n, svc, ns, ns)
	})
	files, _ := filepath.Glob(filepath.Join(caDir, "*"))
	for _, f := range files {
		if filepath.Base(f) != "ca.key" {
			b, _ := os.ReadFile(f)
			os.WriteFile(filepath.Join(secrets["lockcluster-tls"], filepath.Base(f)), b, 0o440)
		}
	}
	authText, err := os.ReadFile("kubernetes/auth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	auth := strings.NewReplacer("<admin token>", adminToken, "<billing token>", nsToken).Replace(string(authText))
	os.WriteFile(filepath.Join(secrets["lockcluster-auth"], "lockcluster.yaml"), []byte(auth), 0o440)

	hosts := regexp.MustCompile(`[a-z0-9-]+\.` + regexp.QuoteMeta(svc+"."+ns) + `\.svc:\d+`)
	addrs := newAddrMap(t)
	pods := make([]*pod, len(names))
	var grpcAddrs []string
	for i, name := range names {
		self := fmt.Sprintf("%s.%s.%s.svc", name, svc, ns)
		p := &pod{name: name, logDir: top, data: filepath.Join(top, "volumes", name)}
		// Mounts: secrets shared by every pod, a volume of its own.
		mountDir := map[string]string{}
		vols := map[string]string{}
		for _, v := range m.set.Spec.Template.Spec.Volumes {
			if v.Secret != nil {
				vols[v.Name] = secrets[v.Secret.SecretName]
			}
		}
		for _, v := range m.set.Spec.VolumeClaimTemplates {
			vols[v.Metadata.Name] = p.data
		}
		var paths []string
		for _, vm := range c.VolumeMounts {
			if vols[vm.Name] == "" {
				t.Fatalf("volume mount %s: no such volume", vm.Name)
			}
			mountDir[vm.MountPath] = vols[vm.Name]
			paths = append(paths, vm.MountPath)
		}
		sort.Slice(paths, func(a, b int) bool { return len(paths[a]) > len(paths[b]) })
		local := func(s string) string {
			s = addrs.rewrite(s, hosts, self)
			if k, v, ok := strings.Cut(s, "="); ok {
				for _, mp := range paths {
					if v == mp || strings.HasPrefix(v, mp+"/") {
						return k + "=" + mountDir[mp] + strings.TrimPrefix(v, mp)
					}
				}
			}
			return s
		}
		// The environment: the ConfigMap's, then the container's own.
		vars := map[string]string{}
		env := []string{"PATH=/usr/bin:/bin", "NO_COLOR=1"}
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil {
				for k, v := range m.configMaps[ef.ConfigMapRef.Name] {
					vars[k] = v
					env = append(env, local(k+"="+v))
				}
			}
		}
		for _, e := range c.Env {
			v := e.Value
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				v = map[string]string{"metadata.name": name, "metadata.namespace": ns}[e.ValueFrom.FieldRef.FieldPath]
			}
			vars[e.Name] = v
			env = append(env, local(e.Name+"="+v))
		}
		// The arguments, $(VAR) expanded as Kubernetes does.
		expand := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
		for _, a := range c.Args {
			a = expand.ReplaceAllStringFunc(a, func(ref string) string {
				if v, ok := vars[ref[2:len(ref)-1]]; ok {
					return v
				}
				return ref
			})
			p.args = append(p.args, local(a))
		}
		pr := c.ReadinessProbe.HTTPGet
		scheme := strings.ToLower(pr.Scheme)
		if scheme == "" {
			scheme = "http"
		}
		p.probe = fmt.Sprintf("%s://%s%s", scheme, addrs.get(fmt.Sprintf("%s:%d", self, c.containerPort(pr.Port))), pr.Path)
		p.grpc = addrs.get(self + ":" + strconv.Itoa(portOf(m.settings(t)["grpc-addr"])))
		p.env = env
		os.MkdirAll(p.data, 0o755)
		pods[i] = p
		grpcAddrs = append(grpcAddrs, p.grpc)
	}
	probe := httpClient(t, "") // the kubelet verifies no certificate
	ready := func(p *pod) { waitHTTP(t, p.proc, probe, p.probe, 90*time.Second) }
	cliAuth := []string{"--cacert", filepath.Join(caDir, "ca.crt"), "--token", adminToken}

	for _, p := range pods { // podManagementPolicy: Parallel
		p.start(t, bin)
	}
	for _, p := range pods {
		ready(p)
	}
	leader, applied := oneCluster(t, bin, cliAuth, grpcAddrs, names, 1, 30*time.Second)
	t.Logf("one cluster: leader %s, applied index %d", leader, applied)
	for i, p := range pods {
		log := p.proc.logText()
		if strings.Contains(log, "bootstrapping a new cluster") != (i == 0) {
			t.Errorf("%s: bootstrapped: %v, want only the first pod to:\n%s", p.name, !(i == 0), log)
		}
	}
	// Some writes, so that the log is more than a fresh cluster's.
	for i := 0; i < 5; i++ {
		cli(t, bin, "lock", "deploy-test", "--addr", strings.Join(grpcAddrs, ","), "-n", "billing", "--cacert", filepath.Join(caDir, "ca.crt"), "--token", nsToken, "--", "true")
	}
	_, applied = oneCluster(t, bin, cliAuth, grpcAddrs, names, applied+5, 30*time.Second)

	// One volume lost, then the first voter's, then two at once (a
	// majority of empty voters, which could elect each other).
	for _, wipe := range [][]int{{2}, {0}, {0, 1}} {
		for _, i := range wipe {
			p := pods[i]
			p.proc.stop(t, 30*time.Second)
			if err := os.RemoveAll(p.data); err != nil {
				t.Fatal(err)
			}
			os.MkdirAll(p.data, 0o755) // a new, empty volume
		}
		for _, i := range wipe {
			pods[i].start(t, bin)
		}
		for _, i := range wipe {
			ready(pods[i])
		}
		leader, applied = oneCluster(t, bin, cliAuth, grpcAddrs, names, applied, 60*time.Second)
		for _, i := range wipe {
			p := pods[i]
			log := p.proc.logText()
			if strings.Contains(log, "bootstrapping a new cluster") || strings.Contains(log, "bootstrapped cluster") {
				t.Fatalf("%s on an empty volume bootstrapped:\n%s", p.name, log)
			}
			if !strings.Contains(log, "joining") {
				t.Errorf("%s on an empty volume does not say it joins:\n%s", p.name, log)
			}
		}
		t.Logf("pods %v rejoined on empty volumes: leader %s, applied index %d", wipe, leader, applied)
	}
	for _, p := range pods {
		p.proc.stop(t, 30*time.Second)
	}
}
