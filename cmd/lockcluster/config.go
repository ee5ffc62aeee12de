package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
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
	num   *int64
	float *float64
	flag  *bool
}

func (s setting) env() string {
	return "LOCKCLUSTER_" + strings.ToUpper(strings.ReplaceAll(s.key, "-", "_"))
}

func (s setting) set(v string) error {
	switch {
	case s.str != nil:
		*s.str = v
	case s.dur != nil:
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%s: %q is not a duration (like 500ms or 2s)", s.key, v)
		}
		*s.dur = d
	case s.num != nil:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a whole number", s.key, v)
		}
		*s.num = n
	case s.float != nil:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a number", s.key, v)
		}
		*s.float = f
	case s.flag != nil:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%s: %q is not true or false", s.key, v)
		}
		*s.flag = b
	}
	return nil
}

func bindFlags(fs *pflag.FlagSet, settings []setting) {
	for _, s := range settings {
		usage := fmt.Sprintf("%s (env %s)", s.usage, s.env())
		switch {
		case s.str != nil:
			fs.StringVar(s.str, s.key, *s.str, usage)
		case s.dur != nil:
			fs.DurationVar(s.dur, s.key, *s.dur, usage)
		case s.num != nil:
			fs.Int64Var(s.num, s.key, *s.num, usage)
		case s.float != nil:
			fs.Float64Var(s.float, s.key, *s.float, usage)
		case s.flag != nil:
			fs.BoolVar(s.flag, s.key, *s.flag, usage)
		}
	}
}

// resolve applies the config file, then the environment, then the flags
// the user set (the flag values were parsed already; they are re-applied
// last so they win). Sections that only the file can hold (auth) are
// decoded into sections.
func resolve(fs *pflag.FlagSet, settings []setting, file string, sections map[string]any) error {
	return resolveWith(flagsGiven(fs), settings, file, sections)
}

// flagsGiven are the flags the user set, with their values.
func flagsGiven(fs *pflag.FlagSet) map[string]string {
	flagged := map[string]string{}
	fs.Visit(func(f *pflag.Flag) { flagged[f.Name] = f.Value.String() })
	return flagged
}

// resolveWith is resolve with the flags given at start: a reload (SIGHUP)
// reads the file and the environment again and applies the same flags
// last, so they keep winning.
func resolveWith(flagged map[string]string, settings []setting, file string, sections map[string]any) error {
	if file != "" {
		if err := readFile(file, settings, sections); err != nil {
			return err
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

// readFile applies a YAML config file: scalar keys are settings, mapping
// keys named in sections are decoded strictly into them.
func readFile(file string, settings []setting, sections map[string]any) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("config file %s: %w", file, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty file
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return fmt.Errorf("config file %s: the top level must be a mapping of settings", file)
	}
	known := map[string]setting{}
	for _, s := range settings {
		known[s.key] = s
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i].Value, top.Content[i+1]
		if dst, ok := sections[k]; ok {
			b, err := yaml.Marshal(v)
			if err == nil {
				dec := yaml.NewDecoder(bytes.NewReader(b))
				dec.KnownFields(true)
				err = dec.Decode(dst)
			}
			if err != nil {
				return fmt.Errorf("config file %s: %s: %w", file, k, err)
			}
			continue
		}
		s, ok := known[k]
		if !ok {
			return fmt.Errorf("config file %s: unknown key %q (see 'lockcluster serve --help' for the settings)", file, k)
		}
		if v.Kind != yaml.ScalarNode {
			return fmt.Errorf("config file %s: %s must be a single value", file, k)
		}
		if err := s.set(v.Value); err != nil {
			return fmt.Errorf("config file %s: %w", file, err)
		}
	}
	return nil
}
