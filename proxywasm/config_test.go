package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

func TestParseConfig(t *testing.T) {
	cfg, err := parseConfig([]byte(`{
	  "slots": 64, "keys_per_slot": 2,
	  "rules": [
	    {"endpoint":"/v1/pay","strategy":"token_bucket","key_by":"api_key","limit":100,"window":"10s","fail_open":false},
	    {"name":"search","endpoint":"/v1/search","host":"API.example.com","methods":["get","POST"],
	     "limits":[{"name":"burst","strategy":"gcra","limit":10,"window":"1s"},{"strategy":"fixed","limit":1000,"window":"1d"}],
	     "key_by":"header:X-User","cost":2,"cost_header":"X-Cost","fail_open":true,"response_cost_header":"X-Cost-Actual"},
	    {"name":"log","strategy":"log","limit":5,"window":"1m","key_by":"query:k",
	     "global":{"cluster":"rl","timeout":"250ms","rule":"login","token":"t0k3n","settle_path":"/rl/settle"}}
	  ]}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Slots != 64 || cfg.KeysPerSlot != 2 || len(cfg.Rules) != 3 {
		t.Fatalf("slots %d keys %d rules %d", cfg.Slots, cfg.KeysPerSlot, len(cfg.Rules))
	}
	pay, search, lg := cfg.Rules[0], cfg.Rules[1], cfg.Rules[2]
	if pay.Name != "/v1/pay" || pay.KeyBy.String() != "api_key" || pay.Cost != 1 || pay.FailOpen ||
		pay.Limits[0] != (core.Limit{Algorithm: core.TokenBucket, Limit: 100, Window: 10_000_000}) || pay.LimitNames[0] != "/v1/pay" {
		t.Errorf("pay: %+v", pay)
	}
	if search.Host != "api.example.com" || strings.Join(search.Methods, ",") != "GET,POST" || search.KeyBy.String() != "header:X-User" ||
		search.CostHeader != "X-Cost" || search.Cost != 2 || !search.FailOpen || search.ResponseCostHeader != "x-cost-actual" ||
		strings.Join(search.LimitNames, ",") != "burst,fixed_window_1d" ||
		search.Limits[1] != (core.Limit{Algorithm: core.FixedWindow, Limit: 1000, Window: 86_400_000_000}) {
		t.Errorf("search: %+v", search)
	}
	if lg.Endpoint != "/" || lg.maxLog != 5 || lg.Global == nil ||
		*lg.Global != (globalSpec{Cluster: "rl", Authority: "rl", Path: "/v1/ratelimit/check", SettlePath: "/rl/settle", TimeoutMS: 250, Rule: "login", Token: "t0k3n"}) {
		t.Errorf("log: %+v %+v", lg, lg.Global)
	}
	// Most specific first: the longest endpoint.
	if cfg.proxied[0] != search || cfg.proxied[1] != pay || cfg.proxied[2] != lg {
		t.Errorf("order: %s %s %s", cfg.proxied[0].Name, cfg.proxied[1].Name, cfg.proxied[2].Name)
	}

	if str := lg.Global.String(); strings.Contains(str, "t0k3n") || !strings.Contains(str, "token=<redacted>") {
		t.Errorf("String() = %s", str)
	}

	// A bare list of rules, as hosted services export them; defaults.
	cfg, err = parseConfig([]byte(`[{"endpoint":"/","strategy":"fixed","limit":1,"window":"1s"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Slots != defaultSlots || cfg.KeysPerSlot != defaultKeysPerSlot || cfg.Rules[0].KeyBy != ruleconfig.DefaultKeyBy {
		t.Errorf("defaults: %+v %+v", cfg, cfg.Rules[0])
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       []string // each a problem's text, in order
	}{
		{"empty", ``, []string{"JSON: empty configuration"}},
		{"syntax", "{\n\"rules\": [}", []string{"JSON: line 2: invalid character"}},
		{"trailing", `{"rules":[]} {}`, []string{"JSON: data after the top-level value"}},
		{"not an object", `"x"`, []string{`want an object with "rules" (or a list of rules), got the string "x"`}},
		{"missing rules", `{}`, []string{"rules: missing"}},
		{"no rules", `{"rules":[]}`, []string{"rules: no rules"}},
		{"top level", `{"rules":[{"endpoint":"/","strategy":"fixed","limit":1,"window":"1s"}],"slots":0,"keys_per_slot":65,"upstream":"x"}`,
			[]string{"upstream: unknown field", "keys_per_slot: 65 is outside [1, 64]", "slots: 0 is outside [1, 1048576]"}},
		{"strict integers", `{"slots":1e3,"keys_per_slot":2.0,"rules":[{"name":"r","strategy":"token","limit":10.0,"window":"1s","rate":1E1,"cost":0.0}]}`,
			[]string{"keys_per_slot: want an integer, got the number 2.0", "slots: want an integer, got the number 1e3",
				`rules[0] "r": limit: want an integer, got the number 10.0`, `rules[0] "r": rate: want an integer, got the number 1E1`,
				`rules[0] "r": cost: want an integer, got the number 0.0`}},
		{"strategy", `[{"name":"pay","strategy":"tokn","limit":1,"window":"1s"}]`,
			[]string{`rules[0] "pay": strategy: unknown strategy "tokn"`}},
		{"window", `[{"endpoint":"/a","strategy":"fixed","limit":1,"window":"1 day"}]`,
			[]string{`rules[0] "/a": window: "1 day": want a duration`}},
		{"sub-µs window", `[{"endpoint":"/a","strategy":"fixed","limit":1,"window":"1500ns"}]`,
			[]string{`rules[0] "/a": window: "1500ns": not a whole number of microseconds`}},
		{"limit range", `[{"endpoint":"/a","strategy":"log","limit":5000,"window":"1s"}]`,
			[]string{`rules[0] "/a": limit 5000: outside [1, 4096] for sliding_log`}},
		{"rate on a window", `[{"endpoint":"/a","strategy":"fixed","limit":5,"window":"1s","rate":2}]`,
			[]string{`rules[0] "/a": rate 2: must be 0 or absent for fixed_window`}},
		{"units", `[{"endpoint":"/a","strategy":"token","limit":1000000000000,"window":"1d"}]`,
			[]string{`rules[0] "/a": limit 1000000000000 × window 86400000000 µs: too large`}},
		{"listed", `[{"name":"r","limits":[{"strategy":"fixed","limit":"10","window":"1s","burst":1},{"name":"a b","strategy":"gcra","limit":1,"window":"1s"}]}]`,
			[]string{`rules[0] "r": limits[0].burst: unknown field`, `rules[0] "r": limits[0].limit: want an integer, got the string "10"`,
				`rules[0] "r": limits[1].name: "a b": byte 1 is not printable ASCII`}},
		{"both shapes", `[{"name":"r","strategy":"fixed","limit":1,"window":"1s","limits":[{"strategy":"fixed","limit":1,"window":"1s"}]}]`,
			[]string{`rules[0] "r": limits: give either limits or strategy/limit/window/rate, not both`}},
		{"duplicate limit names", `[{"name":"r","limits":[{"strategy":"fixed","limit":1,"window":"1s"},{"strategy":"fixed","limit":2,"window":"1s"}]}]`,
			[]string{`rules[0] "r": limits[1].name: "fixed_window_1s" names two limits of the rule`}},
		{"rule fields", `[{"name":"r","strategy":"fixed","limit":1,"window":"1s","key_by":"cookie","cost":-1,"cost_header":"x y","fail_open":"yes","methods":["GE T"],"host":"a/b","endpoint":"v1","shape":true,"response_cost_header":""}]`,
			[]string{`rules[0] "r": shape: not supported by the filter`, `rules[0] "r": endpoint: want a path starting with "/"`,
				`rules[0] "r": host: "a/b": want a host name`, `rules[0] "r": methods[0]: "GE T" is not an HTTP method`,
				`rules[0] "r": key_by: "cookie": want ip, api_key`, `rules[0] "r": cost: -1 is outside`,
				`rules[0] "r": cost_header: "x y" is not a header name`, `rules[0] "r": response_cost_header: "" is not a header name`,
				`rules[0] "r": fail_open: want true or false`}},
		{"duplicate names", `[{"endpoint":"/a","strategy":"fixed","limit":1,"window":"1s"},{"endpoint":"/a","strategy":"fixed","limit":1,"window":"1s"}]`,
			[]string{`rules[1] "/a": name: "/a" is also the name of rules[0]`}},
		{"global", `[{"name":"g","strategy":"fixed","limit":1,"window":"1s","global":{"timeout":"0s","path":"x","clutser":"rl","settle_path":"settle"}}]`,
			[]string{`rules[0] "g": global.clutser: unknown field`, `rules[0] "g": global.cluster: missing`,
				`rules[0] "g": global.path: want a path starting with "/"`, `rules[0] "g": global.settle_path: want a path starting with "/"`,
				`rules[0] "g": global.timeout: 0s is outside [1ms, 1m0s]`}},
		{"global token", `[{"name":"g","strategy":"fixed","limit":1,"window":"1s","global":{"cluster":"rl","token":"se cret"}}]`,
			[]string{`rules[0] "g": global.token: want 1 to 4096 bytes of printable ASCII without spaces (the value is not shown)`}},
		{"global token type", `[{"name":"g","strategy":"fixed","limit":1,"window":"1s","global":{"cluster":"rl","token":12345}}]`,
			[]string{`rules[0] "g": global.token: want a string`}},
		{"duplicate key", `[{"name":"g","strategy":"fixed","limit":1,"window":"1s","global":{"cluster":"a","cluster":"b"}}]`,
			[]string{`JSON: line 1: key "cluster" given twice in one object`}},
		{"overrides of a global rule", `[{"name":"g","strategy":"fixed","limit":1,"window":"1s","key_by":"header:x-user","global":{"cluster":"rl","rule":"api"},
			"overrides":[{"key_prefix":"bot-","strategy":"fixed","limit":1,"window":"1m"}]}]`,
			[]string{`rules[0] "g": overrides: a rule with global.rule is decided by rl-wasm-host's rule "api", which matches its own overrides against the key the filter sends`}},
		{"one global rule, two key spaces", `[{"name":"byip","endpoint":"/a","strategy":"fixed","limit":1,"window":"1s","global":{"cluster":"rl","rule":"api"}},
			{"name":"byhdr","endpoint":"/b","strategy":"fixed","limit":1,"window":"1s","key_by":"header:x-user","global":{"cluster":"rl","rule":"api"}},
			{"name":"same","endpoint":"/c","strategy":"fixed","limit":1,"window":"1s","key_by":"header:X-User","global":{"cluster":"rl","rule":"other"}},
			{"name":"same2","endpoint":"/d","strategy":"fixed","limit":1,"window":"1s","key_by":"header:x-user","global":{"cluster":"rl","rule":"other"}}]`,
			[]string{`rules[1].global.rule: rl-wasm-host's rule "api" is also named by rules[0] (byip), whose keys come from key_by ip, not header:x-user`}},
		{"text prefixes of IP keys", `[{"name":"i","strategy":"fixed","limit":1,"window":"1s","overrides":[{"key_prefix":"192.168.1","strategy":"fixed","limit":2,"window":"1s"},
			{"key_prefix":"2001:db8::/96","strategy":"fixed","limit":2,"window":"1s"}]}]`,
			[]string{`rules[0] "i": overrides[0].key_prefix: "192.168.1" is not a CIDR prefix: key_by: ip matches networks, not text`,
				`rules[0] "i": overrides[1].key_prefix: IPv6 clients are keyed by their /64 (ipv6_prefix)`}},
		{"global shape", `[{"name":"g","strategy":"fixed","limit":1,"window":"1s","global":"rl"}]`,
			[]string{`rules[0] "g": global: want an object`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig([]byte(tc.json))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *ConfigError", err)
			}
			if len(ce.Problems) != len(tc.want) {
				t.Fatalf("%d problems, want %d:\n%v", len(ce.Problems), len(tc.want), err)
			}
			for i, w := range tc.want {
				if got := ce.Problems[i].String(); !strings.HasPrefix(got, w) {
					t.Errorf("problem %d = %q, want prefix %q", i, got, w)
				}
			}
			if !strings.Contains(err.Error(), ce.Problems[0].String()) {
				t.Errorf("Error() = %q lacks the first problem", err)
			}
		})
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"rules":[{"endpoint":"/v1/pay","strategy":"token_bucket","key_by":"api_key","limit":100,"window":"10s"}]}`,
		`[{"name":"s","limits":[{"strategy":"gcra","limit":10,"window":"1s","rate":3},{"strategy":"log","limit":9,"window":"2d"}],"key_by":"header:x"}]`,
		`{"slots":3,"keys_per_slot":1,"rules":[{"host":"*.a.b","methods":"GET","strategy":"leaky","limit":1,"window":"1ms","global":{"cluster":"c","timeout":"5ms"}}]}`,
		`{"rules":[{"strategy":"fixed","limit":1000,"window":"1h30m","cost":1,"cost_header":"x-cost","fail_open":true,"key_by":"query:k"}]}`,
		`[{"endpoint":"/","strategy":"sliding","limit":1,"window":"1ns"}]`,
		`{"rules":null}`, `[]`, `[1]`, `{"rules":[{"limits":[]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := parseConfig(data)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("err = %v, want a *ConfigError with problems", err)
			}
			return
		}
		// A valid configuration decides without core errors.
		if cfg.Slots < 1 || cfg.Slots > maxSlots || cfg.KeysPerSlot < 1 || cfg.KeysPerSlot > maxKeysPerSlot {
			t.Fatalf("slots %d keys %d", cfg.Slots, cfg.KeysPerSlot)
		}
		if len(cfg.Rules) == 0 || len(cfg.proxied) != len(cfg.Rules) {
			t.Fatalf("%d rules, %d proxied", len(cfg.Rules), len(cfg.proxied))
		}
		names := map[string]bool{}
		for _, r := range cfg.Rules {
			if ruleconfig.CheckName(r.Name) != nil || names[r.Name] || !strings.HasPrefix(r.Endpoint, "/") || ruleconfig.CheckKeyBy(r.KeyBy.String(), true) != nil {
				t.Fatalf("rule %+v", r)
			}
			names[r.Name] = true
			if len(r.Limits) == 0 || len(r.Limits) > maxLimits || len(r.LimitNames) != len(r.Limits) || r.Cost < 0 || r.Cost > core.MaxCost {
				t.Fatalf("rule %q: %d limits, %d names, cost %d", r.Name, len(r.Limits), len(r.LimitNames), r.Cost)
			}
			for _, l := range r.Limits {
				if err := l.Validate(); err != nil {
					t.Fatalf("rule %q: limit %+v: %v", r.Name, l, err)
				}
				// The window is written back in a form the parser reads.
				if w, err := ruleconfig.ParseWindow(core.FormatWindow(l.Window)); err != nil || w != l.Window {
					t.Fatalf("window %d → %q → %d, %v", l.Window, core.FormatWindow(l.Window), w, err)
				}
			}
			if g := r.Global; g != nil && (g.Cluster == "" || g.TimeoutMS < 1 || g.TimeoutMS > maxTimeoutMS || !strings.HasPrefix(g.Path, "/")) {
				t.Fatalf("global %+v", g)
			}
		}
	})
}
