package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// setting is one serve setting: a flag, a LOCKCLUSTER_* variable and a
// key of the YAML config file. Precedence: flag > env > file > default.
type setting struct {
	key   string // flag name and YAML key
	usage string
	str   *string
	dur   *time.Duration
}

func (s setting) env() string {
	return "LOCKCLUSTER_" + strings.ToUpper(strings.ReplaceAll(s.key, "-", "_"))
}

func (s setting) set(v string) error {
	if s.str != nil {
		*s.str = v
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%s: %q is not a duration (like 500ms or 2s)", s.key, v)
	}
	*s.dur = d
	return nil
}

func bindFlags(fs *pflag.FlagSet, settings []setting) {
	for _, s := range settings {
		usage := fmt.Sprintf("%s (env %s)", s.usage, s.env())
		if s.str != nil {
			fs.StringVar(s.str, s.key, *s.str, usage)
		} else {
			fs.DurationVar(s.dur, s.key, *s.dur, usage)
		}
	}
}

// resolve applies the config file, then the environment, then the flags
// the user set (the flag values were parsed already; they are re-applied
// last so they win).
func resolve(fs *pflag.FlagSet, settings []setting, file string) error {
	flagged := map[string]string{}
	fs.Visit(func(f *pflag.Flag) { flagged[f.Name] = f.Value.String() })
	if file != "" {
		raw, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		var values map[string]string
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		if err := dec.Decode(&values); err != nil && err.Error() != "EOF" {
			return fmt.Errorf("config file %s: %w", file, err)
		}
		known := map[string]setting{}
		for _, s := range settings {
			known[s.key] = s
		}
		for k, v := range values {
			s, ok := known[k]
			if !ok {
				return fmt.Errorf("config file %s: unknown key %q (see 'lockcluster serve --help' for the settings)", file, k)
			}
			if err := s.set(v); err != nil {
				return fmt.Errorf("config file %s: %w", file, err)
			}
		}
	}
	for _, s := range settings {
		if v, ok := os.LookupEnv(s.env()); ok {
			if err := s.set(v); err != nil {
				return fmt.Errorf("%s: %w", s.env(), err)
			}
		}
	}
	for _, s := range settings {
		if v, ok := flagged[s.key]; ok {
			if err := s.set(v); err != nil {
				return fmt.Errorf("--%w", err)
			}
		}
	}
	return nil
}
