package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/rlcore/rl/internal/request/pipeline"
	rlstore "github.com/rlcore/rl/store"
)

// emulate starts the filter in the SDK's host emulator with a plugin
// configuration and a fixed clock.
func emulate(t *testing.T, conf string) proxytest.HostEmulator {
	t.Helper()
	now := t0 + 250_000 // a quarter into a second-long window
	clock = func() int64 { return now }
	opt := proxytest.NewEmulatorOption().WithVMContext(&vmContext{}).
		WithPluginConfiguration([]byte(conf)).
		WithProperty([]string{"source", "address"}, []byte("192.0.2.7:40000"))
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(func() {
		reset()
		clock = func() int64 { return t0 } // no test reads the wall clock
	})
	if st := host.StartPlugin(); st != types.OnPluginStartStatusOK {
		t.Fatalf("plugin start: %v; logs %q", st, host.GetCriticalLogs())
	}
	return host
}

func get(path string, hs ...[2]string) [][2]string {
	return append([][2]string{{":method", "GET"}, {":authority", "api.example.com"}, {":path", path}}, hs...)
}

func headerValue(hs [][2]string, name string) string {
	for _, kv := range hs {
		if strings.EqualFold(kv[0], name) {
			return kv[1]
		}
	}
	return ""
}

func headerValues(hs [][2]string, name string) []string {
	var vs []string
	for _, kv := range hs {
		if strings.EqualFold(kv[0], name) {
			vs = append(vs, kv[1])
		}
	}
	return vs
}

// roundTrip runs a request's headers (and, if it continues, the upstream's
// response headers) through the filter.
func roundTrip(host proxytest.HostEmulator, hs [][2]string, upstream ...[2]string) (action types.Action, local *proxytest.LocalHttpResponse, resp [][2]string) {
	id := host.InitializeHttpContext()
	action = host.CallOnRequestHeaders(id, hs, true)
	if local = host.GetSentLocalResponse(id); local != nil || action != types.ActionContinue {
		return action, local, nil
	}
	host.CallOnResponseHeaders(id, append([][2]string{{":status", "200"}}, upstream...), false)
	return action, nil, host.GetCurrentResponseHeaders(id)
}

func TestFilterLocal(t *testing.T) {
	host := emulate(t, `{"slots":16,"rules":[
		{"name":"users","endpoint":"/v1","strategy":"fixed","limit":2,"window":"1s","key_by":"header:X-User","cost_header":"X-Cost"},
		{"name":"big","endpoint":"/big","strategy":"token","limit":3,"window":"1s","cost":5}]}`)
	for i := range 2 {
		act, local, resp := roundTrip(host, get("/v1/x", [2]string{"x-user", "alice"}),
			[2]string{"x-ratelimit-limit", "999"}, [2]string{"ratelimit", `"upstream";r=1;t=1`})
		if act != types.ActionContinue || local != nil {
			t.Fatalf("request %d: %v %+v", i, act, local)
		}
		if got, want := headerValues(resp, "ratelimit"), []string{`"upstream";r=1;t=1, "users";r=` + string(rune('1'-i)) + ";t=1"}; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("request %d: RateLimit %q, want %q", i, got, want)
		}
		if got := headerValue(resp, "ratelimit-policy"); got != `"users";q=2;w=1` {
			t.Errorf("request %d: RateLimit-Policy %q", i, got)
		}
		if got := headerValues(resp, "x-ratelimit-limit"); len(got) != 1 || got[0] != "2" {
			t.Errorf("request %d: X-RateLimit-Limit %q (the upstream's must be replaced)", i, got)
		}
	}
	act, local, _ := roundTrip(host, get("/v1/x", [2]string{"x-user", "alice"}))
	if act != types.ActionPause || local == nil || local.StatusCode != 429 {
		t.Fatalf("third: %v %+v", act, local)
	}
	if got := headerValue(local.Headers, "retry-after"); got != "1" { // 0.75 s rounded up
		t.Errorf("Retry-After %q", got)
	}
	if got := headerValue(local.Headers, "ratelimit"); got != `"users";r=0;t=1` {
		t.Errorf("RateLimit %q", got)
	}
	if string(local.Data) != "Rate limit exceeded\n" {
		t.Errorf("body %q", local.Data)
	}
	// Another key, and a cost from the header.
	if _, local, _ := roundTrip(host, get("/v1/x", [2]string{"x-user", "bob"}, [2]string{"x-cost", "2"})); local != nil {
		t.Fatalf("bob: %+v", local)
	}
	if _, local, _ := roundTrip(host, get("/v1/x", [2]string{"x-user", "bob"})); local == nil || local.StatusCode != 429 {
		t.Fatalf("bob after cost 2: %+v", local)
	}
	// A cost above the limit: never, no Retry-After.
	_, local, _ = roundTrip(host, get("/big"))
	if local == nil || local.StatusCode != 429 || headerValue(local.Headers, "retry-after") != "" ||
		!strings.Contains(string(local.Data), "exceeds the limit") {
		t.Fatalf("big: %+v", local)
	}
	// Unmatched: no decision, no fields.
	if act, local, resp := roundTrip(host, get("/other")); act != types.ActionContinue || local != nil || headerValue(resp, "ratelimit") != "" {
		t.Fatalf("unmatched: %v %+v %q", act, local, resp)
	}
	// Other spellings of the path are the same rule and key.
	for _, p := range []string{"/V1/x", "//v1/./x", "/a/../v1/%78"} {
		if _, local, _ := roundTrip(host, get(p, [2]string{"x-user", "alice"})); local == nil || local.StatusCode != 429 {
			t.Fatalf("%s: %+v, want the rule's 429", p, local)
		}
	}
	// Bad requests: no key, bad cost, a path that cannot be matched safely.
	for _, hs := range [][][2]string{get("/v1/x"), get("/v1/x", [2]string{"x-user", "c"}, [2]string{"x-cost", "lots"}),
		get("/v1%2Fx", [2]string{"x-user", "c"})} {
		_, local, _ := roundTrip(host, hs)
		if local == nil || local.StatusCode != 400 || !strings.HasPrefix(string(local.Data), "Bad request: ") {
			t.Fatalf("%q: %+v", hs, local)
		}
	}
}

func TestFilterIP(t *testing.T) {
	host := emulate(t, `[{"name":"ip","strategy":"gcra","limit":1,"window":"1m"}]`)
	if _, local, _ := roundTrip(host, get("/")); local != nil {
		t.Fatalf("first: %+v", local)
	}
	_, local, _ := roundTrip(host, get("/"))
	if local == nil || local.StatusCode != 429 || headerValue(local.Headers, "retry-after") != "60" {
		t.Fatalf("second: %+v", local)
	}
}

// TestFilterNoRoom: a key that finds no room in shared data is load (the
// one failure rule, outage.Class): refused 503 with Retry-After, on a
// fail_open rule too (before, fail_open admitted every new key once the
// rule was full: a flood of keys went through). The first such request of
// the rule is logged, every one counted.
func TestFilterNoRoom(t *testing.T) {
	// One slot of one key: no other live key can be decided.
	for _, open := range []bool{false, true} {
		t.Run(map[bool]string{false: "closed", true: "open"}[open], func(t *testing.T) {
			host := emulate(t, `{"slots":1,"keys_per_slot":1,"rules":[{"name":"r","strategy":"fixed","limit":5,"window":"1s","key_by":"header:k","fail_open":`+map[bool]string{false: "false", true: "true"}[open]+`}]}`)
			if _, local, _ := roundTrip(host, get("/", [2]string{"k", "a"})); local != nil {
				t.Fatal(local)
			}
			for _, k := range []string{"b", "c", "d"} {
				act, local, _ := roundTrip(host, get("/", [2]string{"k", k}))
				if local == nil || local.StatusCode != 503 || string(local.Data) != "Rate limiter overloaded; retry later\n" ||
					headerValue(local.Headers, "retry-after") != "1" {
					t.Fatalf("%s: %v %+v", k, act, local)
				}
			}
			if logs := host.GetWarnLogs(); len(logs) != 1 || !strings.Contains(logs[0], "no room") || !strings.Contains(logs[0], noRoomMetric) {
				t.Errorf("warn logs %q", logs)
			}
			if n, err := host.GetCounterMetric(noRoomMetric); err != nil || n != 3 {
				t.Errorf("metric %s: %d %v, want 3", noRoomMetric, n, err)
			}
		})
	}
}

// TestFilterOutage: shared data failing is an outage: fail_open admits
// (without fields), fail closed answers 503; logged at most once a second.
func TestFilterOutage(t *testing.T) {
	defer func(f func() sharedData) { newSharedData = f }(newSharedData)
	for _, open := range []bool{false, true} {
		t.Run(map[bool]string{false: "closed", true: "open"}[open], func(t *testing.T) {
			sd := &breakable{memData: newMemData()}
			newSharedData = func() sharedData { return sd }
			host := emulate(t, `{"rules":[{"name":"r","strategy":"fixed","limit":5,"window":"1s","fail_open":`+map[bool]string{false: "false", true: "true"}[open]+`}]}`)
			sd.broken = true
			for range 3 {
				act, local, resp := roundTrip(host, get("/"))
				if open && (act != types.ActionContinue || local != nil || headerValue(resp, "ratelimit") != "") {
					t.Fatalf("open: %v %+v %q", act, local, resp)
				}
				if !open && (local == nil || local.StatusCode != 503 || string(local.Data) != "Rate limiter unavailable\n") {
					t.Fatalf("closed: %v %+v", act, local)
				}
			}
			if logs := host.GetWarnLogs(); len(logs) != 1 || !strings.Contains(logs[0], "outage") {
				t.Errorf("warn logs %q", logs)
			}
		})
	}
}

// breakable is shared data whose every call fails once broken, as a
// host's might.
type breakable struct {
	*memData
	broken bool
}

func (d *breakable) get(key string) ([]byte, uint32, error) {
	if d.broken {
		return nil, 0, fmt.Errorf("%w: get_shared_data: internal failure", rlstore.ErrUnavailable)
	}
	return d.memData.get(key)
}

func (d *breakable) set(key string, v []byte, cas uint32) error {
	if d.broken {
		return fmt.Errorf("%w: set_shared_data: internal failure", rlstore.ErrUnavailable)
	}
	return d.memData.set(key, v, cas)
}

func TestFilterBadConfiguration(t *testing.T) {
	opt := proxytest.NewEmulatorOption().WithVMContext(&vmContext{}).
		WithPluginConfiguration([]byte(`[{"name":"pay","strategy":"tokn","limit":1,"window":"1s"}]`))
	host, reset := proxytest.NewHostEmulator(opt)
	defer reset()
	if st := host.StartPlugin(); st != types.OnPluginStartStatusFailed {
		t.Fatal("an invalid configuration started")
	}
	logs := host.GetCriticalLogs()
	if len(logs) != 1 || !strings.Contains(logs[0], `rules[0] "pay": strategy: unknown strategy "tokn"`) {
		t.Fatalf("critical logs %q", logs)
	}
}

func TestFilterGlobal(t *testing.T) {
	conf := `{"rules":[
		{"name":"inline","endpoint":"/i","limits":[{"name":"burst","strategy":"token","limit":10,"window":"1s","rate":5},{"strategy":"fixed","limit":100,"window":"1d"}],
		 "key_by":"header:x-user","global":{"cluster":"rl_service","authority":"rl.internal","timeout":"40ms"}},
		{"name":"named","endpoint":"/n","strategy":"fixed","limit":1,"window":"1s","key_by":"header:x-user","fail_open":true,
		 "global":{"cluster":"rl_service","rule":"login","path":"/api/check","token":"s3cret"}}]}`
	host := emulate(t, conf)

	start := func(path, user string) (uint32, proxytest.HttpCalloutAttribute) {
		t.Helper()
		id := host.InitializeHttpContext()
		if act := host.CallOnRequestHeaders(id, get(path, [2]string{"x-user", user}), true); act != types.ActionPause {
			t.Fatalf("%s: %v, want pause for the callout", path, act)
		}
		cs := host.GetCalloutAttributesFromContext(id)
		if len(cs) != 1 {
			t.Fatalf("%d callouts", len(cs))
		}
		return id, cs[0]
	}

	id, c := start("/i", "u 1") // a key with a space: sent as a digest
	if c.Upstream != "rl_service" || headerValue(c.Headers, ":path") != "/v1/ratelimit/check" || headerValue(c.Headers, "authorization") != "" ||
		headerValue(c.Headers, ":authority") != "rl.internal" || headerValue(c.Headers, ":method") != "POST" {
		t.Fatalf("callout %+v", c)
	}
	var body map[string]any
	if err := json.Unmarshal(c.Body, &body); err != nil {
		t.Fatal(err)
	}
	want := `{"cost":1,"fail_open":false,"key":"inline:` + pipeline.APIKeyDigest("u 1") + `","limits":[{"limit":10,"name":"burst","rate":5,"strategy":"token_bucket","window":"1s"},{"limit":100,"name":"fixed_window_1d","strategy":"fixed_window","window":"1d"}]}`
	if got, _ := json.Marshal(body); string(got) != want {
		t.Fatalf("body\n%s\nwant\n%s", got, want)
	}
	// Admitted: the request resumes, its response gets the fields.
	host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "200"}}, nil,
		[]byte(`{"allowed":true,"rule":"inline","key":"k","cost":1,"limit_name":"burst","limit":10,"remaining":9,"window_ms":1000,"reset_after_ms":200,"reset_after":1,"retry_after_ms":0,"retry_after":0,"never":false,"delay_ms":0,"next_after_ms":100,"next_after":1,"limits":[]}`))
	if act := host.GetCurrentHttpStreamAction(id); act != types.ActionContinue {
		t.Fatalf("after 200: %v", act)
	}
	host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
	if got := headerValue(host.GetCurrentResponseHeaders(id), "ratelimit"); got != `"burst";r=9;t=1` {
		t.Errorf("RateLimit %q", got)
	}

	// Denied: 429 with the service's retry, rounded up.
	id, c = start("/n", "alice")
	if headerValue(c.Headers, ":path") != "/api/check" || headerValue(c.Headers, ":authority") != "rl_service" ||
		headerValue(c.Headers, "authorization") != "Bearer s3cret" ||
		string(c.Body) != `{"rule":"login","key":"alice","cost":1}` {
		t.Fatalf("callout %+v %s", c, c.Body)
	}
	host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "429"}}, nil,
		[]byte(`{"allowed":false,"limit_name":"default","limit":1,"remaining":0,"window_ms":1000,"reset_after_ms":1500,"retry_after_ms":1001,"never":false}`))
	local := host.GetSentLocalResponse(id)
	if local == nil || local.StatusCode != 429 || headerValue(local.Headers, "retry-after") != "2" {
		t.Fatalf("denied: %+v", local)
	}

	// Failures, in order, by the one failure rule (outage.Classify): only
	// the service unreachable is an outage, which /n (fail_open) admits;
	// a timeout only as the 3rd with no decision completing since it
	// began. Its refusals, load above all, are refused here too (before,
	// /n's fail_open admitted every failure, "overloaded" included).
	for _, tc := range []struct {
		path   string
		status string
		body   string
		want   uint32 // 0: resumed
	}{
		{"/i", "", "", 503}, // a timeout: the 1st
		{"/i", "503", `{"error":"store down","code":"store_unavailable"}`, 503},
		{"/i", "200", `{"allowed":false}`, 503},
		{"/i", "200", `not json`, 503},
		{"/n", "503", `{"error":"rate limiter overloaded; retry later","code":"overloaded"}`, 503},
		{"/n", "500", `{"error":"rate limiter error","code":"internal"}`, 500},
		{"/n", "500", "", 503},
		{"/n", "401", `{"error":"no token","code":"unauthorized"}`, 503},
		{"/n", "503", "no healthy upstream", 0},               // Envoy's: the service unreachable
		{"/n", "", "", 503},                                   // a timeout: the 2nd
		{"/n", "", "", 0},                                     // the 3rd: an outage
		{"/n", "200", `{"allowed":true,"fail_open":true}`, 0}, // the service failed open
	} {
		id, c := start(tc.path, "bob")
		var hs [][2]string
		if tc.status != "" {
			hs = [][2]string{{":status", tc.status}}
		}
		host.CallOnHttpCallResponse(c.CalloutID, hs, nil, []byte(tc.body))
		local := host.GetSentLocalResponse(id)
		switch {
		case tc.want == 0 && (local != nil || host.GetCurrentHttpStreamAction(id) != types.ActionContinue):
			t.Errorf("%s %s %s: %+v, want resumed", tc.path, tc.status, tc.body, local)
		case tc.want != 0 && (local == nil || local.StatusCode != tc.want):
			t.Errorf("%s %s %s: %+v, want %d", tc.path, tc.status, tc.body, local, tc.want)
		case tc.want == 503 && headerValue(local.Headers, "retry-after") != "1":
			t.Errorf("%s %s %s: no Retry-After", tc.path, tc.status, tc.body)
		}
	}
}

// FuzzParseGlobal: whatever the decision service answers, the filter gets
// a verdict in range or an error, never a panic or a negative field.
func FuzzParseGlobal(f *testing.F) {
	f.Add("200", []byte(`{"allowed":true,"limit_name":"default","limit":10,"remaining":9,"window_ms":1000,"reset_after_ms":100,"retry_after_ms":0}`))
	f.Add("429", []byte(`{"allowed":false,"limit_name":"d","limit":1,"remaining":0,"window_ms":1,"reset_after_ms":1,"retry_after_ms":-1,"never":true}`))
	f.Add("200", []byte(`{"allowed":true,"fail_open":true}`))
	f.Add("429", []byte(`{"allowed":false,"limit_name":"b","limit":10,"remaining":0,"window_ms":1000,"reset_after_ms":1000,"retry_after_ms":100,"next_after_ms":100,`+
		`"limits":[{"name":"b","allowed":false,"limit":10,"remaining":0,"window_ms":1000,"reset_after_ms":1000,"retry_after_ms":100,"next_after_ms":100},`+
		`{"name":"d","allowed":true,"limit":1000,"remaining":990,"window_ms":86400000,"reset_after_ms":5000,"retry_after_ms":0,"next_after_ms":5000}]}`))
	f.Fuzz(func(t *testing.T, status string, body []byte) {
		v, err := parseGlobal(status, body)
		if err != nil {
			return
		}
		if len(v.Limits) == 0 || v.Deciding < 0 || v.Deciding >= len(v.Limits) || v.Allowed != (status == "200") {
			t.Fatalf("%s %s: %+v", status, body, v)
		}
		for _, l := range v.Limits {
			if l.Limit < 1 || l.Remaining < 0 || l.Window < 1 || l.ResetAfter < 0 || l.RetryAfter < 0 || l.NextAfter < 0 {
				t.Fatalf("%s %s: %+v", status, body, v)
			}
		}
		for _, kv := range pipeline.AppendFields(nil, &v, &pipeline.Fields{PartitionKey: []byte{1, 2}}) {
			if strings.ContainsAny(kv[1], "\r\n\x00") {
				t.Fatalf("header %q", kv)
			}
		}
	})
}

// TestFilterAttacks: the bypasses of issue 19 that sat in the filter's
// copies of the request rules, now the pipeline's.
func TestFilterAttacks(t *testing.T) {
	host := emulate(t, `{"slots":16,"rules":[
		{"name":"c","endpoint":"/c","strategy":"fixed","limit":1,"window":"1m","key_by":"header:X-User","cost_header":"X-Cost"},
		{"name":"m","endpoint":"/m","methods":["GET"],"strategy":"fixed","limit":1,"window":"1m","key_by":"global"},
		{"name":"h","host":"api.example.com","endpoint":"/h","strategy":"fixed","limit":1,"window":"1m","key_by":"global"},
		{"name":"k","endpoint":"/k","strategy":"fixed","limit":2,"window":"1m","key_by":"api_key:X-API-Key"}]}`)
	status := func(hs [][2]string) uint32 {
		_, local, _ := roundTrip(host, hs)
		if local == nil {
			return 200
		}
		return local.StatusCode
	}
	// 1: cost 0 in any spelling on an exhausted key is refused, never
	// forwarded.
	if s := status(get("/c", [2]string{"x-user", "a"})); s != 200 {
		t.Fatalf("first: %d", s)
	}
	for _, v := range []string{"0", "00", "-0", "+0", " 0 "} {
		if s := status(get("/c", [2]string{"x-user", "a"}, [2]string{"x-cost", v})); s != 400 {
			t.Errorf("X-Cost %q on an exhausted key: %d, want 400", v, s)
		}
	}
	// 4: HEAD is limited as GET, "get" as GET.
	if s := status(get("/m")); s != 200 {
		t.Fatalf("GET: %d", s)
	}
	for _, m := range []string{"HEAD", "get", "head"} {
		hs := [][2]string{{":method", m}, {":authority", "api.example.com"}, {":path", "/m"}}
		if s := status(hs); s != 429 {
			t.Errorf("%s after the limit: %d, want 429", m, s)
		}
	}
	// 5: a host that is not host[:port] is 400, never forwarded.
	if s := status(get("/h")); s != 200 {
		t.Fatalf("host rule: %d", s)
	}
	for _, h := range []string{"api.example.com:80:80", "api.example.com,evil", "api.example.com%00"} {
		hs := [][2]string{{":method", "GET"}, {":authority", h}, {":path", "/h"}}
		if s := status(hs); s != 400 {
			t.Errorf("Host %q: %d, want 400", h, s)
		}
	}
	// 3: a fresh bearer beside the real X-API-Key is no fresh key.
	got := 0
	for i := range 10 {
		if status(get("/k", [2]string{"x-api-key", "real"}, [2]string{"authorization", fmt.Sprintf("Bearer decoy%d", i)})) == 200 {
			got++
		}
	}
	if got != 2 {
		t.Errorf("decoy bearers: %d of 10 through a limit of 2", got)
	}
}

// TestFilterFields: every limit of a rule in both RateLimit fields (t the
// time until more quota comes back), the denying limit first on a 429, and
// a rule's options (only the closest limit, a quota unit, a partition key
// keyed by the plugin's secret): the fields rl-wasm-host writes, from the
// same code (internal/request/pipeline).
func TestFilterFields(t *testing.T) {
	secret := "0123456789abcdef-secret"
	host := emulate(t, `{"slots":16,"partition_key_secret":"`+secret+`","rules":[
		{"name":"search","endpoint":"/s","key_by":"header:X-User","limits":[
			{"name":"burst","strategy":"token","limit":2,"window":"1s"},{"name":"daily","strategy":"fixed","limit":1000,"window":"1d"}]},
		{"name":"bytes","endpoint":"/b","key_by":"header:X-User","cost_header":"X-Size","quota_unit":"content-bytes",
		 "ratelimit_fields":"closest","partition_key":true,"limits":[
			{"name":"second","strategy":"token","limit":1000,"window":"1s"},{"name":"day","strategy":"fixed","limit":100000,"window":"1d"}]}]}`)
	_, local, resp := roundTrip(host, get("/s", [2]string{"x-user", "u"}))
	if local != nil {
		t.Fatalf("%+v", local)
	}
	// A quarter second into the day: 86399.75 s to its end, rounded up.
	if got := headerValue(resp, "ratelimit-policy"); got != `"burst";q=2;w=1, "daily";q=1000;w=86400` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got := headerValue(resp, "ratelimit"); got != `"burst";r=1;t=1, "daily";r=999;t=86400` {
		t.Errorf("RateLimit %q", got)
	}
	roundTrip(host, get("/s", [2]string{"x-user", "u"}))
	_, local, _ = roundTrip(host, get("/s", [2]string{"x-user", "u"}))
	if local == nil || local.StatusCode != 429 {
		t.Fatalf("%+v", local)
	}
	if got := headerValue(local.Headers, "ratelimit"); got != `"burst";r=0;t=1, "daily";r=998;t=86400` {
		t.Errorf("429 RateLimit %q", got)
	}
	pk := ";pk=:" + base64.StdEncoding.EncodeToString(pipeline.PartitionKey([]byte(secret), "bytes", "u")) + ":"
	_, local, resp = roundTrip(host, get("/b", [2]string{"x-user", "u"}, [2]string{"x-size", "600"}))
	if local != nil {
		t.Fatalf("%+v", local)
	}
	if got, want := headerValue(resp, "ratelimit-policy"), `"second";q=1000;qu="content-bytes";w=1`+pk+`, "day";q=100000;qu="content-bytes";w=86400`+pk; got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
	if got, want := headerValue(resp, "ratelimit"), `"second";r=400;t=1`+pk; got != want {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
}

// partition_key needs the plugin's secret, at least 16 bytes, never shown.
func TestFilterPartitionKeySecret(t *testing.T) {
	rule := `"rules":[{"name":"a","strategy":"fixed","limit":1,"window":"1s","partition_key":true}]`
	_, err := parseConfig([]byte(`{` + rule + `}`))
	if err == nil || !strings.Contains(err.Error(), `partition_key: needs a secret to key the hash: set partition_key_secret`) {
		t.Errorf("%v", err)
	}
	_, err = parseConfig([]byte(`{"partition_key_secret":"short-secret",` + rule + `}`))
	if err == nil || !strings.Contains(err.Error(), "partition_key_secret: 12 bytes; want at least 16") || strings.Contains(err.Error(), "short-secret") {
		t.Errorf("%v", err)
	}
}

// TestFilterProblems: the filter's 429 is RFC 9457 problem details
// (quota-exceeded, the denying limits in violated-policies) when the
// request accepts JSON, plain text otherwise, and always or never as
// problem_details says; its 503 (no room for a new key here, so no
// decision) is temporary-reduced-capacity.
func TestFilterProblems(t *testing.T) {
	host := emulate(t, `{"slots":1,"keys_per_slot":1,"rules":[{"name":"r","key_by":"header:k","limits":[
		{"name":"second","strategy":"fixed","limit":1,"window":"1s"},{"name":"minute","strategy":"fixed","limit":1,"window":"1m"}]}]}`)
	roundTrip(host, get("/", [2]string{"k", "a"}))
	_, local, _ := roundTrip(host, get("/", [2]string{"k", "a"}, [2]string{"accept", "application/json"}))
	if local == nil || local.StatusCode != 429 || headerValue(local.Headers, "content-type") != "application/problem+json" {
		t.Fatalf("%+v", local)
	}
	var p pipeline.Problem
	if err := json.Unmarshal(local.Data, &p); err != nil || p.Type != pipeline.ProblemQuotaExceeded || p.Status != 429 ||
		strings.Join(p.ViolatedPolicies, ",") != "minute,second" {
		t.Errorf("%s: %+v %v", local.Data, p, err)
	}
	if headerValue(local.Headers, "retry-after") == "" || headerValue(local.Headers, "ratelimit") == "" {
		t.Errorf("fields missing: %q", local.Headers)
	}
	_, local, _ = roundTrip(host, get("/", [2]string{"k", "a"}, [2]string{"accept", "*/*"}))
	if local == nil || string(local.Data) != "Rate limit exceeded\n" {
		t.Errorf("*/*: %+v", local)
	}
	_, local, _ = roundTrip(host, get("/", [2]string{"k", "b"}, [2]string{"accept", "application/problem+json"}))
	if local == nil || local.StatusCode != 503 || headerValue(local.Headers, "content-type") != "application/problem+json" {
		t.Fatalf("503: %+v", local)
	}
	var p503 pipeline.Problem
	if err := json.Unmarshal(local.Data, &p503); err != nil || p503.Type != pipeline.ProblemReducedCapacity || p503.Status != 503 || len(p503.ViolatedPolicies) != 0 {
		t.Errorf("%s: %+v %v", local.Data, p503, err)
	}
}

func TestFilterProblemModes(t *testing.T) {
	for mode, wantJSON := range map[string]bool{"json": true, "text": false} {
		t.Run(mode, func(t *testing.T) {
			host := emulate(t, `{"problem_details":"`+mode+`","rules":[{"name":"r","strategy":"fixed","limit":1,"window":"1s","key_by":"global"}]}`)
			roundTrip(host, get("/"))
			accept := [2]string{"accept", "text/plain"}
			if !wantJSON {
				accept[1] = "application/json"
			}
			_, local, _ := roundTrip(host, get("/", accept))
			if got := headerValue(local.Headers, "content-type") == "application/problem+json"; got != wantJSON {
				t.Errorf("%s: %+v", mode, local)
			}
		})
	}
	if _, err := parseConfig([]byte(`{"problem_details":"xml","rules":[{"strategy":"fixed","limit":1,"window":"1s"}]}`)); err == nil ||
		!strings.Contains(err.Error(), `problem_details: "xml": want auto, json, text`) {
		t.Errorf("%v", err)
	}
}

// TestGlobalAnswerOneSpelling: rl-wasm-host's answer is read in its one
// spelling: another case or folding of a field the filter reads, or a
// field given twice, is an invalid answer (a failure, by the one failure
// rule), never taken for the field. Before, encoding/json took
// "FAIL_OPEN": true after "fail_open": false for a service that failed
// open (the request let through without a decision), and the last of two
// "remaining" fields. Unknown fields still pass.
func TestGlobalAnswerOneSpelling(t *testing.T) {
	const decision = `"limit_name":"d","limit":10,"remaining":9,"window_ms":1000,"reset_after_ms":100,"retry_after_ms":0`
	v, err := parseGlobal("200", []byte(`{"allowed":true,`+decision+`,"rule":"x","explain":{"Allowed":1},"future":[1]}`))
	if err != nil || !v.Allowed || v.Limits[0].Remaining != 9 {
		t.Fatalf("a valid answer: %+v, %v", v, err)
	}
	for _, c := range []struct{ body, want string }{
		{`{"allowed":true,"fail_open":false,"FAIL_OPEN":true,` + decision + `}`, `FAIL_OPEN: names are case-sensitive; want "fail_open"`},
		{`{"allowed":true,` + decision + `,"Remaining":0}`, `Remaining: names are case-sensitive; want "remaining"`},
		{`{"allowed":true,` + decision + `,"\u212aimit":1}`, ``},
		{`{"allowed":true,` + decision + `,"remaining":0}`, `key "remaining" given twice`},
		{`{"allowed":true,` + decision + `,"rem\u0061ining":0}`, `key "remaining" given twice`},
		{`{"allowed":true,` + decision + `,"limits":[{"name":"d","allowed":true,"limit":10,"Limit":1,"remaining":9,"window_ms":1000}]}`, `limits[0].Limit: names are case-sensitive; want "limit"`},
		{`{"allowed":true,` + decision + `,"limits":[{"name":"d","allowed":true,"limit":10,"remaining":9,"window_ms":1000,"\u017fhadow":true}]}`, `limits[0].\u017fhadow: names are case-sensitive; want "shadow"`},
		{`{"allowed":"yes",` + decision + `}`, `allowed: want true or false, got the string "yes"`},
		{`{"allowed":true,` + decision + `,"never":1}`, `never: want true or false`},
	} {
		v, err := parseGlobal("200", []byte(c.body))
		if err == nil {
			if c.want == "" {
				continue // a name that is no field's spelling ("Kimit"): unknown, passed
			}
			t.Errorf("%s: %+v, want an error", c.body, v)
			continue
		}
		if c.want == "" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.body, err, c.want)
		}
	}
	// An error's code only as rl-wasm-host spells it: "Code" after "code"
	// is no code of its, and the 503 is the service unavailable, not load.
	err = globalRefusal("503", false, []byte(`{"error":"x","code":"store_unavailable","Code":"overloaded"}`))
	if errors.Is(err, rlstore.ErrBusy) || strings.Contains(err.Error(), "overloaded") {
		t.Errorf("%v: read the respelled code", err)
	}
	if err := globalRefusal("503", false, []byte(`{"error":"x","code":"overloaded"}`)); !errors.Is(err, rlstore.ErrBusy) {
		t.Errorf("%v: want load", err)
	}
}
