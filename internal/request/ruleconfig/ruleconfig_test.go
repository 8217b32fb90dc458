package ruleconfig

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
)

// file is a front end's file as the tests write one: the shared rules and a
// rule field of its own.
type file struct {
	Fields
	Rules List[testRule] `json:"rules"`
	Size  Int            `json:"size"`
}

type testRule struct {
	Rule
	Extra  Bool      `json:"extra"`
	Nested testInner `json:"nested"`
}

type testInner struct {
	Fields
	Deep String `json:"deep"`
}

// parse decodes and checks data as a front end does.
func parse(t *testing.T, data string, o Options) ([]Spec, []Problem) {
	t.Helper()
	var f file
	if ps := Decode([]byte(data), &f); len(ps) > 0 {
		return nil, ps
	}
	c := &Checker{}
	if !c.Object("", "an object with \"rules\"", &f.Fields) {
		return nil, c.Problems
	}
	c.Want("rules", "a list of rules", f.Rules.Got)
	specs := CheckRules(c, f.Rules.Items, func(r *testRule) (Spec, string, bool) {
		s, ok := r.Check(c, o)
		c.Bool("extra", r.Extra)
		if r.Nested.Set && c.Object("nested", "an object", &r.Nested.Fields) {
			c.String("nested.deep", r.Nested.Deep)
		}
		return s, s.Name, ok
	})
	c.Int("size", f.Size)
	return specs, c.Problems
}

func texts(ps []Problem) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

func TestDecodeTyped(t *testing.T) {
	specs, ps := parse(t, `{"size": 3, "rules": [
	  {"endpoint": "/v1/pay", "strategy": "token_bucket", "key_by": "api_key", "limit": 1000, "window": "10s", "rate": 5, "extra": true},
	  {"name": "search", "host": "API.example.com", "methods": "get", "cost": 2, "cost_header": "X-Cost", "fail_open": true,
	   "response_cost_header": "X-Cost-Actual",
	   "limits": [{"name": "burst", "algorithm": "gcra", "limit": 10, "window": "1s"}, {"strategy": "fixed", "limit": 1000, "window": "1d"}],
	   "ratelimit_fields": "closest", "quota_unit": "content-bytes", "partition_key": true,
	   "nested": {"deep": "x"}}]}`, Options{})
	require.Empty(t, ps)
	require.Equal(t, []Spec{{
		Name: "/v1/pay", Endpoint: "/v1/pay", KeyBy: KeyBy{KeyAPIKey, BearerHeader}, Cost: 1, MinCost: 1, QuotaUnit: "requests",
		Limits: []NamedLimit{{Name: "/v1/pay", Limit: core.Limit{Algorithm: core.TokenBucket, Limit: 1000, Window: 10_000_000, Rate: 5}}},
	}, {
		Name: "search", Endpoint: "/", Host: "api.example.com", Methods: []string{"GET"}, KeyBy: DefaultKeyBy, Cost: 2, MinCost: 1, CostHeader: "X-Cost", FailOpen: true,
		ResponseCostHeader: "X-Cost-Actual", Closest: true, QuotaUnit: "content-bytes", PartitionKey: true,
		Limits: []NamedLimit{
			{Name: "burst", Limit: core.Limit{Algorithm: core.GCRA, Limit: 10, Window: 1_000_000}},
			{Name: "fixed_window_1d", Limit: core.Limit{Algorithm: core.FixedWindow, Limit: 1000, Window: 86_400_000_000}},
		},
	}}, specs)

	// A bare list is the rules; Options.Proxied gives a rule without
	// endpoint every path.
	specs, ps = parse(t, `[{"name": "api", "strategy": "fixed", "limit": 1, "window": "1s"}]`, Options{})
	require.Empty(t, ps)
	require.Equal(t, "", specs[0].Endpoint, "a rule of the decision API only")
	specs, ps = parse(t, `[{"strategy": "fixed", "limit": 1, "window": "1s"}]`, Options{Proxied: true})
	require.Empty(t, ps)
	require.Equal(t, "/", specs[0].Name)
}

// An unknown key is a problem naming it, at any depth, and every one of
// them is reported.
func TestUnknownFields(t *testing.T) {
	_, ps := parse(t, `{"colour": 1, "rules": [{"name": "a", "strategy": "fixed", "limit": 1, "window": "1s", "burst": 2, "Limit": 3,
	  "nested": {"deep": "x", "deeper": {"a": 1}},
	  "limits2": [], "x": null}, {"name": "b", "limits": [{"strategy": "fixed", "limit": 1, "window": "1s", "brust": 1}]}]}`, Options{})
	require.Equal(t, []string{
		`colour: unknown field (want one of rules, size)`,
		`rules[0] "a": burst: unknown field (want one of name, endpoint, host, methods, strategy, algorithm, limit, window, rate, shadow, limits, key_by, cost, min_cost, cost_header, response_cost_header, fail_open, ratelimit_fields, quota_unit, partition_key, overrides, extra, nested)`,
		`rules[0] "a": Limit: unknown field: names are case-sensitive; want "limit"`,
		`rules[0] "a": limits2: unknown field (want one of name, endpoint, host, methods, strategy, algorithm, limit, window, rate, shadow, limits, key_by, cost, min_cost, cost_header, response_cost_header, fail_open, ratelimit_fields, quota_unit, partition_key, overrides, extra, nested)`,
		`rules[0] "a": x: unknown field (want one of name, endpoint, host, methods, strategy, algorithm, limit, window, rate, shadow, limits, key_by, cost, min_cost, cost_header, response_cost_header, fail_open, ratelimit_fields, quota_unit, partition_key, overrides, extra, nested)`,
		`rules[0] "a": nested.deeper: unknown field (want one of deep)`,
		`rules[1] "b": limits[0].brust: unknown field (want one of name, strategy, algorithm, limit, window, rate, shadow)`,
	}, texts(ps))
}

// TestNamesOneSpelling: a configuration's fields, a rule file's or the
// decision API's inline limits', are read in their one documented
// spelling: another case or a Unicode folding of a name ("Limit", "LIMITS",
// "\u212aey" with a Kelvin sign, which encoding/json would all take) is an
// unknown field naming the spelling wanted, never the field, so "limit"
// and "Limit" in one object cannot be read as one field given twice with
// the last winning.
func TestNamesOneSpelling(t *testing.T) {
	_, ps := parse(t, `{"RULES": [], "rules": [{"name": "a", "strategy": "fixed", "limit": 1000, "LIMIT": 1, "window": "1s",
	  "Nested": {"DEEP": "x"}}, {"name": "b",
	  "limits": [{"name": "b", "strategy": "fixed", "limit": 1000, "\u212aey": 1, "Window": "1h", "window": "1s"}]}]}`, Options{})
	require.Equal(t, []string{
		`RULES: unknown field: names are case-sensitive; want "rules"`,
		`rules[0] "a": LIMIT: unknown field: names are case-sensitive; want "limit"`,
		`rules[0] "a": Nested: unknown field: names are case-sensitive; want "nested"`,
		`rules[1] "b": limits[0].\u212aey: unknown field (want one of name, strategy, algorithm, limit, window, rate, shadow)`,
		`rules[1] "b": limits[0].Window: unknown field: names are case-sensitive; want "window"`,
	}, texts(ps))

	// A Limit decoded alone (the decision API's inline limits).
	var l Limit
	require.NoError(t, l.UnmarshalJSON([]byte(`{"strategy": "fixed", "limit": 1000, "Limit": 1, "\u017ftrategy": "gcra", "window": "1m"}`)))
	c := &Checker{}
	_, ok := CheckLimits(c, "limits", []Limit{l}, "")
	require.False(t, ok)
	require.Equal(t, []string{
		`limits[0].Limit: unknown field: names are case-sensitive; want "limit"`,
		`limits[0].\u017ftrategy: unknown field: names are case-sensitive; want "strategy"`,
	}, texts(c.Problems))
	require.Equal(t, "", Spelling("limit", []string{"limit"}))
	require.Equal(t, "", Spelling("brust", []string{"burst"}))
	require.Equal(t, "", Spelling("\u017fey", []string{"key"}), "a long s folds to s, not k")
	require.Equal(t, "shadow", Spelling("\u017fhadow", []string{"shadow"}))
}

// A value of the wrong kind names the field, says what it wants and what
// it got, and does not hide the other fields' problems.
func TestKindsNameTheField(t *testing.T) {
	_, ps := parse(t, `{"size": "3", "rules": [{"name": 5, "endpoint": "/a", "strategy": "fixed", "limit": 1.5, "window": 10,
	  "rate": null, "methods": {"a": 1}, "key_by": ["ip"], "cost": "2", "cost_header": false, "fail_open": "yes", "extra": 1,
	  "ratelimit_fields": true, "quota_unit": 7, "partition_key": "on",
	  "nested": {"deep": 1}},
	  {"name": "b", "limits": {"strategy": "fixed"}}, 7, {"name": "c", "limits": [3, {"name": "x", "strategy": "fixed", "limit": 99999999999999999999, "window": "1s"}]},
	  {"name": "d", "strategy": "fixed", "limit": 1, "window": "1s", "nested": "deep"}]}`, Options{})
	require.Equal(t, []string{
		`rules[0] "/a": name: want a string, got the number 5`,
		`rules[0] "/a": methods: want a list of HTTP methods, got an object`,
		`rules[0] "/a": limit: want an integer, got the number 1.5`,
		`rules[0] "/a": window: want a string, got the number 10`,
		`rules[0] "/a": rate: want an integer, got nothing (null)`,
		`rules[0] "/a": key_by: want a string, got a list`,
		`rules[0] "/a": cost: want an integer, got the string "2"`,
		`rules[0] "/a": cost_header: want a string, got the boolean false`,
		`rules[0] "/a": fail_open: want true or false, got the string "yes"`,
		`rules[0] "/a": ratelimit_fields: want a string, got the boolean true`,
		`rules[0] "/a": quota_unit: want a string, got the number 7`,
		`rules[0] "/a": partition_key: want true or false, got the string "on"`,
		`rules[0] "/a": extra: want true or false, got the number 1`,
		`rules[0] "/a": nested.deep: want a string, got the number 1`,
		`rules[1] "b": limits: want a list of limits, got an object`,
		`rules[2]: want an object (a rule), got the number 7`,
		`rules[3] "c": limits[0]: want an object {name, strategy, limit, window, rate}, got the number 3`,
		`rules[3] "c": limits[1].limit: want an integer, got the number 99999999999999999999`,
		`rules[4] "d": nested: want an object, got the string "deep"`,
		// Checked after the rules: CheckRules left c.Rule "".
		`size: want an integer, got the string "3"`,
	}, texts(ps))
}

// Every rule's mistakes are reported at once, each naming its rule and
// field; a limit's range is checked only once its fields are sound.
func TestSeveralProblemsAtOnce(t *testing.T) {
	_, ps := parse(t, `[
	  {"name": "a", "strategy": "tokn", "limit": 0, "window": "1 day"},
	  {"endpoint": "v1", "host": "https://x", "methods": ["GE T"], "strategy": "fixed", "limit": 10, "window": "1m", "rate": 5,
	   "key_by": "cookie", "cost": 0, "cost_header": "x y", "response_cost_header": "x:y"},
	  {"name": "c", "strategy": "fixed", "limit": 1, "window": "1s", "limits": [{"strategy": "fixed", "limit": 1, "window": "1s"}]},
	  {"name": "d", "limits": [{"strategy": "log", "limit": 5000, "window": "1s"}, {"strategy": "fixed", "limit": 1, "window": "1s"},
	   {"strategy": "fixed", "limit": 2, "window": "1s"}, {"name": "a b", "algorithm": "gcra", "strategy": "gcra", "limit": 1, "window": "1500ns"}]},
	  {"name": "a", "strategy": "fixed", "limit": 1, "window": "1s"},
	  {"strategy": "token", "limit": 1000000000000, "window": "1d"},
	  {"name": "e", "limits": []}
	]`, Options{})
	require.Equal(t, []string{
		`rules[0] "a": strategy: unknown strategy "tokn" (want one of ` + Strategies + `)`,
		`rules[0] "a": window: "1 day": want a duration such as "10s", "1m", "24h" or "1d"`,
		`rules[1] "v1": endpoint: want a path starting with "/", got "v1"`,
		`rules[1] "v1": host: "https://x": want a host name such as api.example.com or *.example.com, without scheme, port or path`,
		`rules[1] "v1": methods[0]: "GE T" is not an HTTP method`,
		`rules[1] "v1": rate 5: must be 0 or absent for fixed_window (rate applies to token_bucket, leaky_bucket and gcra)`,
		`rules[1] "v1": key_by: "cookie": want ip, api_key, api_key:<header>, header:<name>, query:<name> or global`,
		`rules[1] "v1": cost: 0 is outside [1, 1099511627776] (a decision costs at least 1; cost 0 is a peek)`,
		`rules[1] "v1": cost_header: "x y" is not a header name`,
		`rules[1] "v1": response_cost_header: "x:y" is not a header name`,
		`rules[2] "c": limits: give either limits or strategy/limit/window/rate, not both`,
		`rules[3] "d": limits[0]: limit 5000: outside [1, 4096] for sliding_log`,
		`rules[3] "d": limits[2].name: "fixed_window_1s" names two limits of the rule`,
		`rules[3] "d": limits[3].name: "a b": byte 1 is not printable ASCII (or is a space, quote or backslash)`,
		`rules[3] "d": limits[3].algorithm: give strategy or algorithm (the same thing), not both`,
		`rules[3] "d": limits[3].window: "1500ns": not a whole number of microseconds`,
		`rules[4] "a": name: "a" is also the name of rules[0] (names default to the endpoint; set "name" to tell them apart)`,
		`rules[5]: name: missing: a rule needs a name or an endpoint`,
		`rules[5]: limit 1000000000000 × window 86400000000 µs: too large for token_bucket (limit × window in µs must be at most 2305843009213693952)`,
		`rules[6] "e": limits: 0 limits, want 1 to 16`,
	}, texts(ps))
}

func TestDocumentProblems(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"empty", "", "JSON: empty configuration"},
		{"syntax", "{\n\"rules\": [}", "JSON: line 2: invalid character"},
		{"trailing", `{"rules": []} {}`, "JSON: data after the top-level value"},
		{"duplicate top", `{"rules": [], "rules": []}`, `JSON: line 1: key "rules" given twice in one object`},
		{"duplicate in a rule", "{\"rules\": [\n{\"name\": \"a\",\n \"name\": \"b\"}]}", `JSON: line 3: key "name" given twice`},
		{"duplicate in a limit", `[{"limits": [{"limit": 1, "limit": 2}]}]`, `key "limit" given twice`},
		{"duplicate in an unknown field", `[{"whatever": {"a": {"b": 1, "b": 2}}}]`, `key "b" given twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var f file
			ps := Decode([]byte(c.doc), &f)
			require.Len(t, ps, 1)
			require.Contains(t, ps[0].String(), c.want)
		})
	}
	// The same key in two objects is no problem.
	var f file
	require.Empty(t, Decode([]byte(`[{"name": "a"}, {"name": "b", "limits": [{"name": "x"}]}]`), &f))
}

// A Limit decoded by encoding/json (the decision API's inline limits) keeps
// its unknown keys and wrong kinds for CheckLimits, which reports them
// under the field path given.
func TestLimitThroughEncodingJSON(t *testing.T) {
	var req struct {
		Limits []Limit `json:"limits"`
	}
	dec := json.NewDecoder(strings.NewReader(`{"limits": [{"strategy": "fixed", "limit": "1", "window": "1s", "burst": 2}, 3, {"strategy": "gcra", "limit": 2, "window": "1m"}]}`))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&req))
	c := &Checker{}
	out, ok := CheckLimits(c, "items[1].limits", req.Limits, "")
	require.False(t, ok)
	require.Equal(t, []string{
		`items[1].limits[0].burst: unknown field (want one of name, strategy, algorithm, limit, window, rate, shadow)`,
		`items[1].limits[0].limit: want an integer, got the string "1"`,
		`items[1].limits[1]: want an object {name, strategy, limit, window, rate}, got the number 3`,
	}, texts(c.Problems))
	require.Equal(t, []NamedLimit{{Name: "gcra_1m", Limit: core.Limit{Algorithm: core.GCRA, Limit: 2, Window: 60_000_000}}}, out)
}

func TestIntegers(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "-3": -3, "9223372036854775807": 1<<63 - 1, "-9223372036854775808": -1 << 63, "4611686018427387903": 1<<62 - 1} {
		var v Int
		require.NoError(t, v.UnmarshalJSON([]byte(in)))
		require.True(t, v.OK(), in)
		require.Equal(t, want, v.V, in)
	}
	for _, in := range []string{"1.5", "1e300", "9223372036854775808", "4.7e18", `"1"`, "true", "null", "[]", "{}",
		// Integers are strict: a number with a fraction or an exponent is
		// refused even when whole.
		"10.0", "2.0", "1e3", "1E3", "1e+3", "-0.0", "0e0", "+1"} {
		var v Int
		require.NoError(t, v.UnmarshalJSON([]byte(in)))
		require.False(t, v.OK(), in)
		require.NotEmpty(t, v.Got, in)
	}
}

func TestCheckHost(t *testing.T) {
	for _, ok := range []string{"api.example.com", "*.example.com", "localhost", "192.0.2.1", "::1", "2001:db8::1", "API.Example.COM"} {
		require.NoError(t, CheckHost(ok), ok)
	}
	for _, bad := range []string{"", "*", "*.", "*.*.example.com", "a.*.com", "https://x", "x/y", "x:80", "[::1]", "a..b", ".a", "a.", "a b", "u@x", "é.com", "fe80::1%eth0", strings.Repeat("a", 254)} {
		require.Error(t, CheckHost(bad), bad)
	}
	// An IPv6 address is kept in canonical form, as requests' hosts are
	// matched in.
	for in, want := range map[string]string{"2001:DB8::0001": "2001:db8::1", "2001:0db8:0:0:0:0:0:1": "2001:db8::1",
		"::FFFF:C000:0201": "::ffff:192.0.2.1", "API.example.com": "api.example.com", "192.0.2.1": "192.0.2.1"} {
		specs, ps := parse(t, `[{"name":"a","host":"`+in+`","strategy":"fixed","limit":1,"window":"1s"}]`, Options{})
		require.Empty(t, ps, in)
		require.Equal(t, want, specs[0].Host, in)
	}
}

// TestRuleNamesHoldNoColon: a rule's name starts its stored keys
// ("<name>:<key>"), for every front end (the filter's global mode sends
// "<rule>:<key>" to one rl-wasm-host rule): a ':' in it, given or taken
// from the endpoint, is refused, so no rule's keys reach another's.
func TestRuleNamesHoldNoColon(t *testing.T) {
	for _, o := range []Options{{}, {Proxied: true}} {
		_, ps := parse(t, `[{"name":"a:admin","strategy":"fixed","limit":1,"window":"1s"},{"endpoint":"/x:y","strategy":"fixed","limit":1,"window":"1s"}]`, o)
		require.Len(t, ps, 2)
		for _, p := range ps {
			require.Equal(t, "name", p.Field)
			require.Contains(t, p.Message, `is ":"`)
		}
		specs, ps := parse(t, `[{"name":"a","limits":[{"name":"per:second","strategy":"fixed","limit":1,"window":"1s"}]}]`, o)
		require.Empty(t, ps, "a limit's name keeps its ':' (it names a state within the key)")
		require.Equal(t, "a", specs[0].Name)
	}
	require.NoError(t, CheckBaseName("rls"))
	require.Error(t, CheckBaseName(":"))
}

func TestParseDuration(t *testing.T) {
	for s, want := range map[string]time.Duration{"1d": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "10s": 10 * time.Second, "1h30m": 90 * time.Minute, "250ms": 250 * time.Millisecond, "1500ns": 1500} {
		d, err := ParseDuration(s)
		require.NoError(t, err)
		require.Equal(t, want, d)
	}
	for _, s := range []string{"", "d", "0s", "-1d", "1x", "1.5d", "-1s"} {
		_, err := ParseDuration(s)
		require.Error(t, err, s)
	}
	_, err := ParseWindow("1500ns")
	require.ErrorContains(t, err, "not a whole number of microseconds")
	for _, us := range []int64{1, 999, 1000, 1_000_000, 60_000_000, 90_000_000, 3_600_000_000, 86_400_000_000, 7 * 86_400_000_000, core.MaxWindow} {
		w, err := ParseWindow(core.FormatWindow(us))
		require.NoError(t, err, us)
		require.Equal(t, us, w, core.FormatWindow(us))
	}
}

// FuzzDecode: any input is decoded and checked without panicking; either
// it has problems, each with a message, or every rule is sound.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"rules":[{"endpoint":"/v1/pay","strategy":"token_bucket","key_by":"api_key","limit":100,"window":"10s"}]}`,
		`[{"name":"s","limits":[{"strategy":"gcra","limit":10,"window":"1s","rate":3},{"strategy":"log","limit":9,"window":"2d"}],"key_by":"header:x"}]`,
		`{"size":3,"rules":[{"host":"*.a.b","methods":"GET","strategy":"leaky","limit":1,"window":"1ms","nested":{"deep":"x"}}]}`,
		`{"rules":[{"strategy":"fixed","limit":1000,"window":"1h30m","cost":0,"cost_header":"x-cost","fail_open":true,"key_by":"query:k","extra":false}]}`,
		`[{"endpoint":"/","strategy":"sliding","limit":1,"window":"1ns","zz":{"a":[1,{"b":null}]}}]`,
		`{"rules":null}`, `[]`, `[1]`, `{"rules":[{"limits":[]}]}`, `{"a":1,"a":2}`, `"x"`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, o := range []Options{{}, {Proxied: true, PathKey: true}} {
			specs, ps := parse(t, string(data), o)
			for _, p := range ps {
				if p.Message == "" {
					t.Fatalf("problem without a message: %+v", p)
				}
			}
			if len(ps) > 0 {
				continue
			}
			names := map[string]bool{}
			for _, s := range specs {
				if CheckName(s.Name) != nil || names[s.Name] || CheckKeyBy(s.KeyBy.String(), o.PathKey) != nil || s.Cost < 0 || s.Cost > core.MaxCost {
					t.Fatalf("spec %+v", s)
				}
				if o.Proxied && s.Endpoint == "" || s.Endpoint != "" && !strings.HasPrefix(s.Endpoint, "/") {
					t.Fatalf("endpoint %q", s.Endpoint)
				}
				names[s.Name] = true
				if len(s.Limits) == 0 || len(s.Limits) > core.MaxLimits {
					t.Fatalf("%d limits", len(s.Limits))
				}
				lnames := map[string]bool{}
				for _, l := range s.Limits {
					if err := l.Validate(); err != nil || lnames[l.Name] || CheckName(l.Name) != nil {
						t.Fatalf("limit %+v: %v", l, err)
					}
					lnames[l.Name] = true
				}
			}
		}
	})
}

// A Limit decoded alone (as the decision API's inline limits are, through
// encoding/json) keeps a key given twice for the checks to refuse.
func TestLimitRepeatedKey(t *testing.T) {
	var ls []Limit
	require.NoError(t, json.Unmarshal([]byte(`[{"strategy":"fixed","limit":1,"window":"1s","window":"1h","x":1,"x":2}]`), &ls))
	c := &Checker{}
	_, ok := CheckLimits(c, "limits", ls, "")
	require.False(t, ok)
	require.Equal(t, []string{`limits[0].window: given twice in one object`, `limits[0].x: given twice in one object`,
		`limits[0].x: unknown field (want one of name, strategy, algorithm, limit, window, rate, shadow)`}, texts(c.Problems))
}

// AppendJSON writes a YAML tree as JSON: floats apart from integers, keys
// as text; two keys with the same text are refused, never one dropped.
func TestAppendJSON(t *testing.T) {
	b, err := AppendJSON(nil, map[string]any{"b": []any{1, int64(-2), uint64(3), 10.0, 1.5, 1e21, math.Inf(1), nil, true, "x"},
		"a": map[any]any{1: "one", true: "t", 2.5: "f"}})
	require.NoError(t, err)
	require.Equal(t, `{"a":{"1":"one","2.5":"f","true":"t"},"b":[1,-2,3,10.0,1.5,1e+21,"+Inf",null,true,"x"]}`, string(b))
	for _, tc := range []struct {
		doc  any
		want string
	}{
		{map[any]any{1: "a", "1": "b"}, `key "1" given twice in one mapping (as "1" and 1)`},
		{map[any]any{true: "a", "true": "b"}, `key "true" given twice in one mapping (as "true" and true)`},
		{map[any]any{1.0: "a", 1: "b"}, `key "1" given twice in one mapping (as 1 and 1.0)`},
		{[]any{map[string]any{"x": map[any]any{2.5: 1, "2.5": 2}}}, `key "2.5" given twice in one mapping (as "2.5" and 2.5)`},
	} {
		_, err := AppendJSON(nil, tc.doc)
		require.EqualError(t, err, tc.want+": quote keys so they differ")
	}
}

// TestDuplicateKey: a repeated key is found at any depth, however it is
// escaped; the same key in two objects is no repeat.
func TestDuplicateKey(t *testing.T) {
	for _, c := range []struct {
		doc   string
		found bool
	}{
		{`{"a":1,"b":2}`, false},
		{`{"a":1,"a":2}`, true},
		{`{"a":1,"\u0061":2}`, true},
		{`{"a":1,"A":2}`, false}, // two names; the decoder refuses the one it does not take
		{`{"x":{"a":1,"a":2}}`, true},
		{`[{"a":1},{"a":2}]`, false},
		{`{"limits":[{"a":1,"a":2}]}`, true},
		{`{"items":[{"key":"k","key":"j","limits":[]}]}`, true},
		{`{"limits":[],"limits":[]}`, true},
	} {
		got := DuplicateKey([]byte(c.doc))
		if (got != "") != c.found {
			t.Errorf("DuplicateKey(%s) = %q, want found=%v", c.doc, got, c.found)
		}
	}
}

// The RateLimit fields' options take the values of one list each, named in
// the message.
func TestRateLimitFieldOptions(t *testing.T) {
	specs, ps := parse(t, `[{"name": "a", "strategy": "fixed", "limit": 1, "window": "1s", "ratelimit_fields": "all", "quota_unit": "requests"}]`, Options{})
	require.Empty(t, ps)
	require.False(t, specs[0].Closest)
	require.Equal(t, "requests", specs[0].QuotaUnit)
	_, ps = parse(t, `[{"name": "a", "strategy": "fixed", "limit": 1, "window": "1s", "ratelimit_fields": "nearest",
	  "quota_unit": "concurrent-requests"}]`, Options{})
	require.Equal(t, []string{
		`rules[0] "a": ratelimit_fields: "nearest": want all or closest (the RateLimit field lists every limit, or only the one closest to exhaustion)`,
		`rules[0] "a": quota_unit: "concurrent-requests": want one of requests, content-bytes`,
	}, texts(ps))
}

// TestShadowLimits: a limit of a list, or the shorthand's, says shadow:
// true; anything but a boolean is refused.
func TestShadowLimits(t *testing.T) {
	specs, ps := parse(t, `{"rules": [
	  {"endpoint": "/a", "strategy": "fixed", "limit": 10, "window": "1m", "shadow": true},
	  {"endpoint": "/b", "limits": [{"name": "now", "strategy": "fixed", "limit": 10, "window": "1m"},
	                                {"name": "candidate", "strategy": "gcra", "limit": 5, "window": "1m", "shadow": true}]}]}`, Options{})
	require.Empty(t, ps)
	require.Equal(t, []NamedLimit{{Name: "/a", Limit: core.Limit{Algorithm: core.FixedWindow, Limit: 10, Window: 60_000_000}, Shadow: true}}, specs[0].Limits)
	require.Equal(t, []NamedLimit{
		{Name: "now", Limit: core.Limit{Algorithm: core.FixedWindow, Limit: 10, Window: 60_000_000}},
		{Name: "candidate", Limit: core.Limit{Algorithm: core.GCRA, Limit: 5, Window: 60_000_000}, Shadow: true},
	}, specs[1].Limits)
	_, ps = parse(t, `{"rules": [{"endpoint": "/a", "limits": [{"strategy": "fixed", "limit": 10, "window": "1m", "shadow": "yes"}]}]}`, Options{})
	require.Equal(t, []string{`rules[0] "/a": limits[0].shadow: want true or false, got the string "yes"`}, texts(ps))
}

// A rule's only limit, unnamed, is named after the rule (an override's
// too, so that it carries the rule's state); a limit among several has
// core's default name; a limit named keeps its name.
func TestLoneLimitName(t *testing.T) {
	for _, tc := range []struct {
		name, rule string
		want       []string // the rule's limits, then its override's
	}{
		{"flat fields", `"name": "search", "strategy": "fixed", "limit": 1, "window": "1s"`, []string{"search"}},
		{"a list of one", `"name": "search", "limits": [{"strategy": "fixed", "limit": 1, "window": "1s"}]`, []string{"search"}},
		{"named", `"name": "search", "limits": [{"name": "burst", "strategy": "fixed", "limit": 1, "window": "1s"}]`, []string{"burst"}},
		{"named default", `"name": "search", "limits": [{"name": "default", "strategy": "fixed", "limit": 1, "window": "1s"}]`, []string{"default"}},
		{"several", `"name": "search", "limits": [{"strategy": "fixed", "limit": 1, "window": "1s"}, {"strategy": "gcra", "limit": 9, "window": "1m"}]`,
			[]string{"fixed_window_1s", "gcra_1m"}},
		{"named by its endpoint", `"endpoint": "/v1/pay", "strategy": "fixed", "limit": 1, "window": "1s"`, []string{"/v1/pay"}},
		{"overrides", `"name": "search", "key_by": "header:X-User", "strategy": "fixed", "limit": 1, "window": "1s", "overrides": [
		    {"key": "a", "strategy": "fixed", "limit": 2, "window": "1s"}, {"key": "b", "limits": [{"strategy": "fixed", "limit": 3, "window": "1s"}]}]`,
			[]string{"search", "search", "search"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specs, ps := parse(t, `[{`+tc.rule+`}]`, Options{})
			require.Empty(t, ps)
			var got []string
			for _, l := range specs[0].Limits {
				got = append(got, l.Name)
			}
			for _, o := range specs[0].Overrides {
				for _, l := range o.Limits {
					got = append(got, l.Name)
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
	require.Equal(t, "default", LoneLimitName(""))
	require.Equal(t, "default", LoneLimitName("a b"))
	require.Equal(t, "search", LoneLimitName("search"))
}
