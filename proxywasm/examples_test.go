package main

import (
	"encoding/json"
	"os"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The plugin configurations of the Envoy and Istio examples (examples/,
// which docs/envoy.md shows; tests/examples checks the Envoy and Istio sides)
// load as the filter loads them at on_configure.
func TestExampleConfigurations(t *testing.T) {
	read := func(path string) map[string]any {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := yaml.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return v
	}
	configs := map[string][]byte{}

	// Envoy: the StringValue of the wasm filter's plugin configuration.
	const envoy = "../examples/envoy/wasm-filter.yaml"
	var find func(v any)
	find = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if x["@type"] == "type.googleapis.com/google.protobuf.StringValue" {
				if s, ok := x["value"].(string); ok {
					configs[envoy] = []byte(s)
				}
			}
			for _, e := range x {
				find(e)
			}
		case []any:
			for _, e := range x {
				find(e)
			}
		}
	}
	find(read(envoy))

	// Istio: spec.pluginConfig, which Istio hands the filter as JSON.
	const istio = "../examples/istio/wasm-plugin.yaml"
	spec, _ := read(istio)["spec"].(map[string]any)
	b, err := json.Marshal(spec["pluginConfig"])
	if err != nil {
		t.Fatal(err)
	}
	configs[istio] = b

	for _, path := range []string{envoy, istio} {
		data, ok := configs[path]
		if !ok || len(data) == 0 || string(data) == "null" {
			t.Fatalf("%s: no plugin configuration found", path)
		}
		cfg, err := parseConfig(data)
		if err != nil {
			t.Fatalf("%s: the filter refuses its configuration: %v", path, err)
		}
		if len(cfg.Rules) == 0 {
			t.Fatalf("%s: no rules", path)
		}
	}
}
