package main

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rlcore/rl/internal/frontend/service"
)

// CheckFormats are the values of -check-config-format: auto (the
// configuration file's own format, by its extension), yaml or json.
func CheckFormats() []string { return []string{"auto", "yaml", "json"} }

// checkConfig is -check-config: it loads the configuration at path as
// -config does and prints it in canonical form (service.NormalizedJSON:
// every default written out, itself a configuration that loads the same)
// on stdout, in format (one of CheckFormats: "auto" is the file's own,
// YAML for .yaml and .yml, JSON for .json); quiet prints nothing on
// stdout, as nginx -t -q. Exit status: 0 valid; 2 invalid or unreadable,
// every mistake on stderr, as a start with it would report them.
func checkConfig(path, format string, quiet bool, stdout, stderr io.Writer) int {
	switch format {
	case "", "auto":
		format = "json"
		if ext := strings.ToLower(filepath.Ext(path)); ext == ".yaml" || ext == ".yml" {
			format = "yaml"
		}
	case "yaml", "json":
	default:
		fmt.Fprintf(stderr, "rl-wasm-host: -check-config-format %q: want one of %s\n", format, strings.Join(CheckFormats(), ", "))
		return 2
	}
	cfg, err := service.LoadConfig(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if quiet {
		return 0
	}
	b, err := cfg.MarshalNormalized()
	if err == nil && format == "yaml" {
		b, err = jsonToYAML(b)
	}
	if err != nil {
		fmt.Fprintln(stderr, "rl-wasm-host: -check-config:", err)
		return 2
	}
	stdout.Write(b)
	return 0
}

// jsonToYAML writes a JSON document as block-style YAML, keeping the order
// of its fields; YAML reads every string back as the string it was
// (quoted where plain would read as another type), so the document means
// the same.
func jsonToYAML(js []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(js, &doc); err != nil { // JSON is YAML
		return nil, err
	}
	var plain func(n *yaml.Node)
	plain = func(n *yaml.Node) {
		n.Style = 0
		for _, c := range n.Content {
			plain(c)
		}
	}
	plain(&doc)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
