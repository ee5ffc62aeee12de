package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// The client config file: what a client command connects with, kept in a
// file instead of flags or the environment.
//
//	endpoints: [10.0.0.1:7700, 10.0.0.2:7700, 10.0.0.3:7700]
//	namespace: billing
//	tls: {ca: ca.crt, cert: app.crt, key: app.key}
//	token-file: billing.token
//
// Each setting comes from, first found: its flag, the file, the
// environment, the built-in default. Relative paths in the file are
// relative to the file's directory.

// clientConfigEnv names the config file when --config is not given. It is
// not LOCKCLUSTER_CONFIG: that one is serve's config file, which the
// nodes' environment sets (deploy/systemd, deploy/kubernetes), where an
// admin runs 'lockcluster members' too.
const clientConfigEnv = "LOCKCLUSTER_CLIENT_CONFIG"

// clientFiles are the flags that name files a client command reads its
// settings from.
type clientFiles struct {
	config    string // --config
	tokenFile string // --token-file
}

// clientConfig is the config file's content.
type clientConfig struct {
	Endpoints []string `yaml:"endpoints"`
	Namespace string   `yaml:"namespace"`
	TLS       struct {
		CA   string `yaml:"ca"`
		Cert string `yaml:"cert"`
		Key  string `yaml:"key"`
	} `yaml:"tls"`
	TokenFile string `yaml:"token-file"`
}

// offlineCommands connect to no cluster: the client config does not apply
// to them (serve has a --config of its own). Any other command dials, and
// TestClientConfigEveryCommand checks that it honours --config.
var offlineCommands = []string{
	"lockcluster serve", "lockcluster dev", "lockcluster tls", "lockcluster version", "lockcluster snapshot restore", "lockcluster recover",
	"lockcluster __man", "lockcluster __reap", "lockcluster help", "lockcluster completion",
	"lockcluster __complete", "lockcluster __completeNoDesc",
}

func offline(cmd *cobra.Command) bool {
	path := cmd.CommandPath()
	for _, o := range offlineCommands {
		if path == o || strings.HasPrefix(path, o+" ") {
			return true
		}
	}
	return false
}

// clientConfigFlags adds --config and --token-file to root, and has every
// client command settle its settings from the flags, the config file and
// the environment before it runs.
func (g *globals) clientConfigFlags(root *cobra.Command) {
	pf := root.PersistentFlags()
	pf.StringVar(&g.files.config, "config", "", "client config file (YAML: endpoints, namespace, tls: {ca, cert, key}, token-file; env "+clientConfigEnv+"): "+
		"flags override it, and it overrides the environment")
	pf.StringVar(&g.files.tokenFile, "token-file", "", "read the bearer token from this file, which only its owner may read (env LOCKCLUSTER_TOKEN_FILE)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if offline(cmd) {
			return nil
		}
		if err := g.settle(cmd); err != nil {
			return &exitError{code: exitUsage, msg: err.Error()}
		}
		return nil
	}
}

// settle applies the config file and the token file: a setting whose flag
// was given keeps the flag's value; otherwise the file's, if it has one;
// otherwise the environment's (read here for the token file, and at
// options for the token and the TLS files).
func (g *globals) settle(cmd *cobra.Command) error {
	given := func(name string) bool {
		f := cmd.Flags().Lookup(name)
		return f != nil && f.Changed
	}
	if given("token") && given("token-file") {
		return errors.New("--token and --token-file: give one")
	}
	path := g.files.config
	if !given("config") {
		path = os.Getenv(clientConfigEnv)
	}
	var cfg clientConfig
	if path != "" {
		c, err := loadClientConfig(path)
		if err != nil {
			return err
		}
		cfg = *c
	}
	if !given("addr") && len(cfg.Endpoints) > 0 {
		g.addr = strings.Join(cfg.Endpoints, ",")
	}
	if !given("namespace") && cfg.Namespace != "" {
		g.namespace = cfg.Namespace
	}
	for _, f := range []struct {
		flag string
		dst  *string
		file string
	}{{"cacert", &g.tls.CA, cfg.TLS.CA}, {"cert", &g.tls.Cert, cfg.TLS.Cert}, {"key", &g.tls.Key, cfg.TLS.Key}} {
		if !given(f.flag) && f.file != "" {
			*f.dst = f.file
		}
	}
	tokenFile := ""
	switch {
	case given("token"):
	case given("token-file"):
		tokenFile = g.files.tokenFile
	case cfg.TokenFile != "":
		tokenFile = cfg.TokenFile
	case os.Getenv("LOCKCLUSTER_TOKEN") != "" && os.Getenv("LOCKCLUSTER_TOKEN_FILE") != "":
		return errors.New("LOCKCLUSTER_TOKEN and LOCKCLUSTER_TOKEN_FILE are both set: unset one")
	default:
		tokenFile = os.Getenv("LOCKCLUSTER_TOKEN_FILE")
	}
	if tokenFile != "" {
		t, err := readTokenFile(tokenFile)
		if err != nil {
			return err
		}
		g.token = t
	}
	return nil
}

// unknownField is how yaml's KnownFields reports a key it has no field for.
var unknownField = regexp.MustCompile(`^(line \d+): field (.+) not found in type .*$`)

// loadClientConfig reads a client config file. Unknown keys are errors;
// relative paths are made relative to the file's directory.
func loadClientConfig(path string) (*clientConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var cfg clientConfig
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			msgs := make([]string, len(te.Errors))
			for i, m := range te.Errors {
				if s := unknownField.FindStringSubmatch(m); s != nil {
					m = fmt.Sprintf("%s: unknown key %q (the keys: endpoints, namespace, tls: {ca, cert, key}, token-file)", s[1], s[2])
				}
				msgs[i] = m
			}
			return nil, fmt.Errorf("config file %s: %s", path, strings.Join(msgs, "; "))
		}
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	for _, p := range []*string{&cfg.TLS.CA, &cfg.TLS.Cert, &cfg.TLS.Key, &cfg.TokenFile} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	return &cfg, nil
}

// readTokenFile reads a bearer token from a file as ssh reads a key: the
// file must be readable by its owner only; one trailing newline is not
// part of the token; an empty token is an error.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return "", fmt.Errorf("token file %s is open to others (mode %04o): it must be readable by its owner only (chmod 600 %s)", path, m, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	t := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if strings.TrimSpace(t) == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return t, nil
}
