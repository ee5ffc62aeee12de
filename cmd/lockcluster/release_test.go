package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestRelease runs scripts/release for this machine's platform and checks
// what it made: the tarball's files, the .deb's control fields and paths,
// the version linked in, a static binary, the checksums. The version is
// given, so the work tree's tags do not matter.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a release binary")
	}
	const version, debVersion = "v0.1.0-test", "0.1.0~test"
	dist := t.TempDir()
	cmd := exec.Command("../../scripts/release", version)
	cmd.Env = append(os.Environ(), "TARGETS="+runtime.GOOS+"/"+runtime.GOARCH, "DIST="+dist)
	debs := runtime.GOOS == "linux"
	if _, err := exec.LookPath("dpkg-deb"); err != nil && debs {
		if os.Getenv("CI") != "" {
			t.Fatal("CI: dpkg-deb is missing (Debian package dpkg, see .ci/run)")
		}
		t.Log("no dpkg-deb (Debian package dpkg): no .deb")
		debs = false
		cmd.Env = append(cmd.Env, "DEB=no")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release: %v\n%s", err, out)
	}
	tarName := "lockcluster-" + version + "-" + runtime.GOOS + "-" + runtime.GOARCH + ".tar.gz"
	debName := "lockcluster_" + debVersion + "_" + runtime.GOARCH + ".deb"
	artifacts := []string{tarName}
	if debs {
		artifacts = append(artifacts, debName)
	}
	pages, _ := manPages(t)
	entries, _ := os.ReadDir(pages)
	var manNames []string
	for _, e := range entries {
		manNames = append(manNames, e.Name())
	}
	systemd, err := filepath.Glob("../../deploy/systemd/*")
	if err != nil || len(systemd) == 0 {
		t.Fatalf("deploy/systemd: %v %v", systemd, err)
	}

	t.Run("SHA256SUMS", func(t *testing.T) {
		sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
			sum, name, ok := strings.Cut(line, "  ")
			data, err := os.ReadFile(filepath.Join(dist, name))
			if !ok || err != nil {
				t.Fatalf("SHA256SUMS: %q: %v", line, err)
			}
			if h := sha256.Sum256(data); hex.EncodeToString(h[:]) != sum {
				t.Errorf("SHA256SUMS: %s is not %s", name, sum)
			}
			listed = append(listed, name)
		}
		slices.Sort(listed)
		slices.Sort(artifacts)
		if !slices.Equal(listed, artifacts) {
			t.Errorf("SHA256SUMS lists %v, want %v", listed, artifacts)
		}
		if sha, err := exec.LookPath("sha256sum"); err == nil {
			c := exec.Command(sha, "-c", "SHA256SUMS")
			c.Dir = dist
			if out, err := c.CombinedOutput(); err != nil {
				t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, out)
			}
		}
	})

	t.Run("tarball", func(t *testing.T) {
		files := untar(t, filepath.Join(dist, tarName))
		dir := strings.TrimSuffix(tarName, ".tar.gz") + "/"
		want := []string{"lockcluster", "LICENSE", "README.md", "lockcluster.yaml",
			"completions/lockcluster.bash", "completions/_lockcluster", "completions/lockcluster.fish"}
		for _, f := range systemd {
			want = append(want, "systemd/"+filepath.Base(f))
		}
		for _, p := range manNames {
			want = append(want, "man/man1/"+p)
		}
		var got []string
		for name := range files {
			if !strings.HasPrefix(name, dir) {
				t.Errorf("%s: outside %s", name, dir)
			}
			got = append(got, strings.TrimPrefix(name, dir))
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("the tarball has\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		bin := filepath.Join(t.TempDir(), "lockcluster")
		if err := os.WriteFile(bin, files[dir+"lockcluster"], 0o755); err != nil {
			t.Fatal(err)
		}
		checkReleaseBinary(t, bin, version)
	})

	t.Run("deb", func(t *testing.T) {
		if !debs {
			t.Skip("no .deb here (linux with dpkg-deb only)")
		}
		deb := filepath.Join(dist, debName)
		info := dpkgDeb(t, "--info", deb)
		for _, field := range []string{
			"Package: lockcluster\n", "Version: " + debVersion + "\n", "Architecture: " + runtime.GOARCH + "\n",
			"Maintainer: ", "Description: ", "Installed-Size: ", "conffiles", "postinst",
		} {
			if !strings.Contains(info, field) {
				t.Errorf("dpkg-deb --info has no %q:\n%s", field, info)
			}
		}
		if conf := dpkgDeb(t, "--info", deb, "conffiles"); !strings.Contains(conf, "/etc/lockcluster/lockcluster.yaml\n") {
			t.Errorf("conffiles:\n%s", conf)
		}
		contents := dpkgDeb(t, "--contents", deb)
		paths := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(contents), "\n") {
			f := strings.Fields(line)
			if len(f) < 6 || f[1] != "root/root" {
				t.Errorf("dpkg-deb --contents: %q: not root's", line)
				continue
			}
			paths[strings.TrimPrefix(f[5], ".")] = true
		}
		want := []string{
			"/usr/bin/lockcluster",
			"/etc/lockcluster/lockcluster.yaml",
			"/usr/share/bash-completion/completions/lockcluster",
			"/usr/share/zsh/vendor-completions/_lockcluster",
			"/usr/share/fish/vendor_completions.d/lockcluster.fish",
			"/usr/share/doc/lockcluster/copyright",
		}
		for _, f := range systemd {
			switch {
			case strings.HasSuffix(f, ".service"):
				want = append(want, "/usr/lib/systemd/system/"+filepath.Base(f))
			case strings.HasSuffix(f, ".sysusers"):
				want = append(want, "/usr/lib/sysusers.d/lockcluster.conf")
			}
		}
		for _, p := range manNames {
			want = append(want, "/usr/share/man/man1/"+p+".gz")
		}
		for _, p := range want {
			if !paths[p] {
				t.Errorf("the .deb has no %s:\n%s", p, contents)
			}
		}

		root := t.TempDir()
		if out, err := exec.Command("dpkg", "-x", deb, root).CombinedOutput(); err != nil {
			t.Fatalf("dpkg -x: %v\n%s", err, out)
		}
		checkReleaseBinary(t, filepath.Join(root, "usr/bin/lockcluster"), version)
		units, _ := filepath.Glob(filepath.Join(root, "usr/lib/systemd/system/*.service"))
		for _, u := range units {
			b, _ := os.ReadFile(u)
			if !strings.Contains(string(b), "ExecStart=/usr/bin/lockcluster ") {
				t.Errorf("%s does not start /usr/bin/lockcluster:\n%s", filepath.Base(u), b)
			}
		}
		// dpkg installs and purges it, in a root of its own (the maintainer
		// scripts run here, with DPKG_ROOT set, and leave this machine be).
		inst := t.TempDir()
		for _, d := range []string{"var/lib/dpkg/updates", "var/lib/dpkg/info"} {
			if err := os.MkdirAll(filepath.Join(inst, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(inst, "var/lib/dpkg/status"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		dpkgRoot := func(args ...string) string {
			t.Helper()
			args = append([]string{"--root=" + inst, "--force-script-chrootless", "--force-not-root"}, args...)
			out, err := exec.Command("dpkg", args...).CombinedOutput()
			if err != nil {
				t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return string(out)
		}
		dpkgRoot("--install", deb)
		if st := dpkgRoot("--status", "lockcluster"); !strings.Contains(st, "Status: install ok installed") || !strings.Contains(st, "/etc/lockcluster/lockcluster.yaml ") {
			t.Errorf("dpkg --status after --install:\n%s", st)
		}
		dpkgRoot("--purge", "lockcluster")
		if _, err := os.Stat(filepath.Join(inst, "usr/bin/lockcluster")); !os.IsNotExist(err) {
			t.Errorf("after --purge: /usr/bin/lockcluster: %v", err)
		}

		gz, err := os.Open(filepath.Join(root, "usr/share/man/man1/lockcluster-lock.1.gz"))
		if err != nil {
			t.Fatal(err)
		}
		defer gz.Close()
		zr, err := gzip.NewReader(gz)
		if err != nil {
			t.Fatal(err)
		}
		if page, err := io.ReadAll(zr); err != nil || !bytes.Contains(page, []byte(".SH NAME\nlockcluster-lock - ")) {
			t.Errorf("lockcluster-lock.1.gz: %v\n%s", err, page)
		}
	})
}

// checkReleaseBinary runs bin: it says version, a revision, this Go, and
// on linux it is static.
func checkReleaseBinary(t *testing.T, bin, version string) {
	t.Helper()
	b := versionOf(t, bin)
	if b.Version != version || b.Revision == "dev" || b.Revision == "" || b.GoVersion != runtime.Version() {
		t.Fatalf("%s says %+v", bin, b)
	}
	if runtime.GOOS != "linux" {
		return
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is dynamically linked (it has an ELF interpreter)", bin)
		}
	}
}

// untar reads a .tar.gz's regular files.
func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: owned by %d:%d, not root", h.Name, h.Uid, h.Gid)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}

func dpkgDeb(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("dpkg-deb", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestReleaseVersion: with no version given, scripts/release links in
// what 'git describe --tags' says: the tag on a tagged commit. It runs
// the script in a scratch repository of its own, so that the work tree's
// tags do not matter.
func TestReleaseVersion(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	repo := t.TempDir()
	script, err := os.ReadFile("../../scripts/release")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(repo, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "scripts/release"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		t.Helper()
		c := exec.Command("git", args...)
		c.Dir = repo
		c.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	printed := func() string {
		t.Helper()
		out, err := exec.Command(filepath.Join(repo, "scripts/release"), "--print-version").Output()
		if err != nil {
			t.Fatalf("scripts/release --print-version: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "scripts/release")
	git("commit", "-q", "-m", "one")
	short := git("rev-parse", "--short", "HEAD")
	if v := printed(); v != "v0.0.0-"+short {
		t.Errorf("with no tag: %q, want v0.0.0-%s", v, short)
	}
	git("tag", "v1.2.3")
	git("tag", "nightly") // not a version tag
	if v := printed(); v != "v1.2.3" {
		t.Errorf("on the tag: %q, want v1.2.3", v)
	}
	git("commit", "-q", "--allow-empty", "-m", "two")
	short = git("rev-parse", "--short", "HEAD")
	if v := printed(); v != "v1.2.3-1-g"+short {
		t.Errorf("a commit after the tag: %q, want v1.2.3-1-g%s", v, short)
	}
	if err := os.WriteFile(filepath.Join(repo, "scripts/release"), append(script, '\n'), 0o755); err != nil {
		t.Fatal(err)
	}
	if v := printed(); v != "v1.2.3-1-g"+short+"-dirty" {
		t.Errorf("a dirty tree: %q, want v1.2.3-1-g%s-dirty", v, short)
	}
}

// TestDebVersion: the .deb's version is the tag's, in Debian's rules, and
// sorts as the tags do: a pre-release before its release, commits after a
// tag after it.
func TestDebVersion(t *testing.T) {
	deb := func(v string) string {
		t.Helper()
		out, err := exec.Command("../../scripts/release", "--deb-version", v).Output()
		if err != nil {
			t.Fatalf("scripts/release --deb-version %s: %v", v, err)
		}
		return strings.TrimSpace(string(out))
	}
	for _, c := range []struct{ tag, want string }{
		{"v0.1.0", "0.1.0"},
		{"v0.1.0-test", "0.1.0~test"},
		{"v1.2.0-rc.1", "1.2.0~rc.1"},
		{"v1.2.0-rc-1", "1.2.0~rc.1"},
		{"v1.2.0-3-gabc1234", "1.2.0+3.gabc1234"},
		{"v1.2.0-3-gabc1234-dirty", "1.2.0+3.gabc1234.dirty"},
		{"v1.2.0-dirty", "1.2.0+dirty"},
		{"v1.2.0-rc.1-3-gabc1234", "1.2.0~rc.1+3.gabc1234"},
		{"v1.2.0+build.5", "1.2.0+build.5"},
		{"v0.0.0-abc1234-dirty", "0.0.0~abc1234+dirty"},
		{"dev", "0~dev"},
	} {
		if got := deb(c.tag); got != c.want {
			t.Errorf("%s: Debian version %q, want %q", c.tag, got, c.want)
		}
	}
	if out, err := exec.Command("../../scripts/release", "--deb-version", "v1.0.0_beta").CombinedOutput(); err == nil {
		t.Errorf("v1.0.0_beta: %s, want a refusal", out)
	}

	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI: dpkg is missing (see .ci/run)")
		}
		t.Skip("no dpkg: the order is not checked")
	}
	order := []string{"v1.2.0-rc.1", "v1.2.0-rc.1-3-gabc1234", "v1.2.0-rc.2", "v1.2.0",
		"v1.2.0-1-gabc1234", "v1.2.0-1-gabc1234-dirty", "v1.2.0-2-g0000000", "v1.2.1-rc.1", "v1.2.1", "v1.10.0"}
	var pairs [][2]string
	for i := 1; i < len(order); i++ {
		pairs = append(pairs, [2]string{order[i-1], order[i]})
	}
	// A dirty tree on a tag: after the tag, before the next one.
	pairs = append(pairs, [2]string{"v1.2.0", "v1.2.0-dirty"}, [2]string{"v1.2.0-dirty", "v1.2.1-rc.1"})
	for _, p := range pairs {
		a, b := deb(p[0]), deb(p[1])
		if out, err := exec.Command(dpkg, "--compare-versions", a, "lt", b).CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("dpkg: %s (%s) does not sort before %s (%s): %v %s", a, p[0], b, p[1], err, out)
		}
	}
}
