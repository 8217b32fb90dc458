package rlqs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/quota"
)

// File is the YAML configuration of the RLQS server (rl-wasm-host's
// -rlqs-config):
//
//	client_id_metadata: x-rlqs-client   # optional: Config.ClientIDMetadata
//	report_interval: 5s                 # optional: how often clients report (Envoy: 5 s)
//	ttl: 15s                            # optional: grants' time to live (whole seconds)
//	guard: 1s                           # optional: the longest round trip
//	rules:                              # first match wins
//	  - domain: envoy                   # optional: any domain
//	    match: {name: api}              # bucket_id entries; "*" any value
//	    algorithm: token_bucket         # any of core's algorithms
//	    limit: 100                      # Limit: burst, or quota per window
//	    window: 1s                      # Go duration
//	    rate: 100                       # bucket algorithms; 0 = limit
type File struct {
	ClientIDMetadata string     `yaml:"client_id_metadata"`
	ReportInterval   string     `yaml:"report_interval"`
	TTL              string     `yaml:"ttl"`
	Guard            string     `yaml:"guard"`
	Rules            []FileRule `yaml:"rules"`
}

// FileRule is one rule of a File.
type FileRule struct {
	Domain    string            `yaml:"domain"`
	Match     map[string]string `yaml:"match"`
	Algorithm string            `yaml:"algorithm"`
	Limit     int64             `yaml:"limit"`
	Window    string            `yaml:"window"`
	Rate      int64             `yaml:"rate"`
}

// LoadConfig reads the file at path and returns the Config it describes
// (rules and client ID metadata; the caller sets the rest). Unknown fields
// are errors.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("rlqs: %w", err)
	}
	return ParseConfig(path, b)
}

// ParseConfig reads a File from b; name is used in errors.
func ParseConfig(name string, b []byte) (Config, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("rlqs: %s: %w", name, err)
	}
	if len(f.Rules) == 0 {
		return Config{}, fmt.Errorf("rlqs: %s: no rules: every bucket would be denied; add rules (see docs/rlqs.md)", name)
	}
	cfg := Config{ClientIDMetadata: f.ClientIDMetadata}
	for _, d := range []struct {
		field, value string
		to           *int64
	}{{"report_interval", f.ReportInterval, &cfg.Quota.ReportInterval}, {"ttl", f.TTL, &cfg.Quota.TTL}, {"guard", f.Guard, &cfg.Quota.Guard}} {
		if d.value == "" {
			continue
		}
		v, err := time.ParseDuration(d.value)
		if err != nil || v <= 0 {
			return Config{}, fmt.Errorf("rlqs: %s: %s %q: want a positive duration such as 5s", name, d.field, d.value)
		}
		*d.to = v.Microseconds()
	}
	if err := cfg.Quota.Validate(); err != nil {
		return Config{}, fmt.Errorf("rlqs: %s: %w", name, err)
	}
	for i, r := range f.Rules {
		a, err := core.ParseAlgorithm(r.Algorithm)
		if err != nil {
			return Config{}, fmt.Errorf("rlqs: %s: rules[%d].algorithm: %w", name, i, err)
		}
		w, err := time.ParseDuration(r.Window)
		if err != nil || w <= 0 {
			return Config{}, fmt.Errorf("rlqs: %s: rules[%d].window %q: want a positive duration such as 1s or 1m", name, i, r.Window)
		}
		l := core.Limit{Algorithm: a, Limit: r.Limit, Window: w.Microseconds(), Rate: r.Rate}
		if _, err := quota.FromCore(l); err != nil {
			return Config{}, fmt.Errorf("rlqs: %s: rules[%d]: %w", name, i, err)
		}
		cfg.Rules = append(cfg.Rules, Rule{Domain: r.Domain, Match: r.Match, Limit: l})
	}
	return cfg, nil
}
