package service

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rlcore/rl/core"
)

// globalRule is a valid global rule; cases replace a part of it.
const globalRule = `rules:
  - name: api
    endpoint: /api
    key_by: global
    strategy: token
    limit: 100
    rate: 50
    window: 1s
    global:
      rlqs: 127.0.0.1:8082
      bucket: {name: api, tier: gold}
      domain: edge
      report_interval: 2s
      client_id_metadata: x-rlqs-client
      fallback: {strategy: token, limit: 5, rate: 1, window: 1s}
`

func TestGlobalConfig(t *testing.T) {
	cfg, err := ParseConfig("x.yaml", "yaml", []byte(globalRule))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Rules[0].Global
	want := GlobalSpec{Server: "127.0.0.1:8082", Domain: "edge", Bucket: map[string]string{"name": "api", "tier": "gold"}, ReportInterval: 2 * time.Second,
		Fallback: &core.Limit{Algorithm: core.TokenBucket, Limit: 5, Rate: 1, Window: 1_000_000}}
	if g == nil || g.Server != want.Server || g.Domain != want.Domain || len(g.Bucket) != 2 || g.Bucket["tier"] != "gold" ||
		g.ReportInterval != want.ReportInterval || *g.Fallback != *want.Fallback || g.ClientIDMetadata != "x-rlqs-client" {
		t.Fatalf("global %+v, want %+v", g, want)
	}
	cfg, err = ParseConfig("x.yaml", "yaml", []byte(`rules:
  - {name: api, key_by: global, strategy: fixed, limit: 100, window: 1m, global: {rlqs: "rlqs.internal:8082", bucket: {name: api}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if g := cfg.Rules[0].Global; g.Domain != DefaultGlobalDomain || g.ReportInterval != time.Second || g.Fallback != nil {
		t.Fatalf("defaults: %+v; want domain %q, 1s, no fallback (deny)", g, DefaultGlobalDomain)
	}
}

func TestGlobalConfigErrors(t *testing.T) {
	cases := []struct {
		name, from, to, want string
	}{
		{"global not a mapping", "    global:\n", "    global: 5\n    x:\n", "global: want a mapping"},
		{"unknown field", "      domain: edge\n", "      domian: edge\n", `global.domian: unknown field`},
		{"field case", "      domain: edge\n", "      Domain: edge\n", `global.Domain: unknown field: names are case-sensitive; want "domain"`},
		{"rlqs missing", "      rlqs: 127.0.0.1:8082\n", "", "global.rlqs: missing"},
		{"rlqs not host:port", "127.0.0.1:8082", "127.0.0.1", "global.rlqs: \"127.0.0.1\": want host:port"},
		{"rlqs port", "127.0.0.1:8082", "127.0.0.1:0", "global.rlqs: \"127.0.0.1:0\": the port is not in [1, 65535]"},
		{"rlqs not a string", "127.0.0.1:8082", "[1]", "global.rlqs: want a string"},
		{"domain bad", "domain: edge", "domain: \"a b\"", "global.domain:"},
		{"bucket missing", "      bucket: {name: api, tier: gold}\n", "", "global.bucket: missing"},
		{"bucket not a mapping", "{name: api, tier: gold}", "api", "global.bucket: want a mapping of strings (the bucket_id), got the string \"api\""},
		{"bucket empty", "{name: api, tier: gold}", "{}", "global.bucket: 0 entries, want 1 to 32"},
		{"bucket value not a string", "{name: api, tier: gold}", "{name: api, tier: 5}", "global.bucket.tier: want a string"},
		{"bucket value empty", "{name: api, tier: gold}", "{name: api, tier: \"\"}", "global.bucket.tier: 0 bytes, want 1 to 256"},
		{"bucket key twice", "{name: api, tier: gold}", "{name: api, name: b}", "mapping key \"name\" already defined"},
		{"report_interval short", "report_interval: 2s", "report_interval: 10ms", "global.report_interval: 10ms is outside [100ms, 1m0s]"},
		{"report_interval bad", "report_interval: 2s", "report_interval: soon", "global.report_interval: \"soon\""},
		{"client_id_metadata upper case", "client_id_metadata: x-rlqs-client", "client_id_metadata: X-Rlqs", `global.client_id_metadata: "X-Rlqs": want a gRPC metadata key`},
		{"client_id_metadata reserved", "client_id_metadata: x-rlqs-client", "client_id_metadata: grpc-x", `global.client_id_metadata: "grpc-x"`},
		{"client_id_metadata binary", "client_id_metadata: x-rlqs-client", "client_id_metadata: x-bin", `global.client_id_metadata: "x-bin"`},
		{"fallback not a limit", "fallback: {strategy: token, limit: 5, rate: 1, window: 1s}", "fallback: deny", "global.fallback: want an object"},
		{"fallback invalid", "fallback: {strategy: token, limit: 5, rate: 1, window: 1s}", "fallback: {strategy: token, limit: 0, window: 1s}", "global.fallback: limit 0: outside [1, "},
		{"fallback named", "fallback: {strategy: token,", "fallback: {name: x, strategy: token,", "global.fallback.name: a fallback has no name"},
		{"fallback shadow", "fallback: {strategy: token,", "fallback: {shadow: true, strategy: token,", "global.fallback.shadow:"},
		{"key_by not global", "key_by: global", "key_by: ip", "key_by: a global rule has one bucket for every request"},
		{"key_by missing", "    key_by: global\n", "", "key_by: a global rule has one bucket"},
		{"two limits", "    strategy: token\n    limit: 100\n    rate: 50\n    window: 1s\n",
			"    limits: [{name: a, strategy: token, limit: 1, window: 1s}, {name: b, strategy: token, limit: 1, window: 1m}]\n", "limits: a global rule has one limit"},
		{"shadow limit", "    window: 1s\n    global", "    window: 1s\n    shadow: true\n    global", "shadow: a global rule's limit is enforced"},
		{"limit not divisible", "    rate: 50\n    window: 1s\n", "    rate: 1\n    window: 30d\n", "limit: the global limit cannot be divided"},
		{"fail_open", "    key_by: global\n", "    key_by: global\n    fail_open: false\n", "fail_open: a global rule never fails"},
		{"overrides", "    key_by: global\n", "    key_by: global\n    overrides: [{key: a, limit: 1}]\n", "overrides: a global rule's limit comes from the RLQS server"},
		{"shape", "    key_by: global\n", "    key_by: global\n    shape: true\n", "shape: a global rule decides on a token bucket"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(globalRule, tc.from) {
				t.Fatalf("the rule has no %q", tc.from)
			}
			_, err := ParseConfig("x.yaml", "yaml", []byte(strings.Replace(globalRule, tc.from, tc.to, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant one containing %q", err, tc.want)
			}
		})
	}
}

func TestGlobalConfigSameBucketTwice(t *testing.T) {
	second := strings.Replace(strings.Replace(globalRule, "  - name: api\n    endpoint: /api\n", "  - name: api2\n    endpoint: /api2\n", 1), "rules:\n", "", 1)
	_, err := ParseConfig("x.yaml", "yaml", []byte(globalRule+second))
	if err == nil || !strings.Contains(err.Error(), `rules "api" and "api2" take the same bucket from 127.0.0.1:8082`) {
		t.Fatalf("error %v, want the two rules named", err)
	}
	// Another domain is another bucket.
	_, err = ParseConfig("x.yaml", "yaml", []byte(globalRule+strings.Replace(second, "domain: edge", "domain: other", 1)))
	if err != nil {
		t.Fatal(err)
	}
}

// TestGlobalConfigDocs: the example of docs/rlqs.md's client section is a
// valid configuration, read as the docs say.
func TestGlobalConfigDocs(t *testing.T) {
	b, err := os.ReadFile("../../../docs/rlqs.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "## rl-wasm-host as a client")
	_, block, ok2 := strings.Cut(sec, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/rlqs.md has no YAML example in its client section")
	}
	cfg, err := ParseConfig("rlqs.md.yaml", "yaml", []byte(block))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Rules[0].Global
	if g == nil || g.Domain != DefaultGlobalDomain || g.ReportInterval != time.Second || g.Fallback == nil || g.Fallback.Limit != 5 {
		t.Fatalf("global %+v", g)
	}
}
