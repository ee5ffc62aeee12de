package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// The sample config file (deploy/lockcluster.yaml, and 'serve
// --sample-config') is written from the settings table serve's flags come
// from, so the two cannot drift; a test compares the committed file with
// it.

//go:generate sh -c "go run . serve --sample-config > ../../deploy/lockcluster.yaml"

// sampleConfig is a YAML config file with every setting at its default,
// each under its flag's help and environment variable.
func sampleConfig() []byte {
	c := defaultServeConfig()
	var b bytes.Buffer
	b.WriteString(`# lockcluster serve: every setting at its default, as 'lockcluster serve --sample-config' prints it.
# Copy it, keep the keys you change, and start a node with: lockcluster serve --config FILE.
# A flag beats the LOCKCLUSTER_* environment variable, which beats this file.

`)
	for _, s := range c.settings() {
		for _, line := range wrap(s.usage, 76) {
			b.WriteString("# " + line + "\n")
		}
		b.WriteString("# env " + s.env() + "\n")
		if s.key == "id" {
			b.WriteString("# id: <this host's name>\n\n")
			continue
		}
		fmt.Fprintf(&b, "%s: %s\n\n", s.key, s.yamlValue())
	}
	b.WriteString(`# Credentials live only here (no flag, no variable). Without an auth
# section any client may use any namespace, and the node says so.
# auth:
#   admin-tokens: ["<32+ random characters>"]   # cluster operations; nodes use the first
#   admin-identities: ["node0", "node1"]        # client-certificate names with admin rights
#   namespaces:
#     billing:
#       tokens: ["<token>"]
#       identities: ["billing-worker"]         # client-certificate names
`)
	return b.Bytes()
}

// yamlValue is the setting's current value as YAML.
func (s setting) yamlValue() string {
	switch {
	case s.str != nil:
		return strconv.Quote(*s.str)
	case s.dur != nil:
		return s.dur.String()
	case s.num != nil:
		return strconv.FormatInt(*s.num, 10)
	case s.float != nil:
		return strconv.FormatFloat(*s.float, 'g', -1, 64)
	case s.flag != nil:
		return strconv.FormatBool(*s.flag)
	}
	return `""`
}

// wrap breaks text into lines of at most width characters, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}
