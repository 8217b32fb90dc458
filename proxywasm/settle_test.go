package main

import (
	"testing"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/rlcore/rl/internal/request/pipeline"
)

// respond runs a request through the filter and, if it continues, the
// upstream's response: headers (ending the stream without trailers and
// body when end is set), then trailers if any, then the stream's end. It
// returns the local response (nil if forwarded) and the response headers
// as the client would get them.
func respond(t *testing.T, host proxytest.HostEmulator, req [][2]string, resp [][2]string, end bool, trailers [][2]string) (*proxytest.LocalHttpResponse, [][2]string) {
	t.Helper()
	id := host.InitializeHttpContext()
	if act := host.CallOnRequestHeaders(id, req, true); act != types.ActionContinue {
		local := host.GetSentLocalResponse(id)
		host.CompleteHttpContext(id)
		return local, nil
	}
	host.CallOnResponseHeaders(id, append([][2]string{{":status", "200"}}, resp...), end)
	hs := host.GetCurrentResponseHeaders(id)
	if trailers != nil {
		host.CallOnResponseTrailers(id, trailers)
	}
	host.CompleteHttpContext(id)
	return nil, hs
}

// TestFilterResponseCost (issue 22, item 3): a rule with
// response_cost_header settles, on shared data, the actual cost the
// upstream reports against the cost taken: from the response headers
// (settled at once when they end the response, else when the stream is
// done) or its trailers; a debt denies the next request for exactly as
// long as it takes to pay off, a refund gives units back, an actual cost
// below min_cost settles as min_cost; no field leaves the estimate, an
// invalid one settles nothing. The field is taken out of the response.
func TestFilterResponseCost(t *testing.T) {
	// A token bucket of 3, one token back a second; the clock stands
	// still (emulate), so a debt's retry is exact.
	host := emulate(t, `{"slots":16,"rules":[
		{"name":"llm","endpoint":"/","strategy":"token","limit":3,"window":"1s","rate":1,"key_by":"header:X-User",
		 "cost_header":"X-Cost","response_cost_header":"X-Cost-Actual"}]}`)
	req := func(user, cost string) [][2]string {
		return get("/chat", [2]string{"x-user", user}, [2]string{"x-cost", cost})
	}
	remaining := func(user string) string {
		t.Helper()
		// A request of cost 1 reads what is left (less itself).
		local, hs := respond(t, host, req(user, "1"), nil, true, nil)
		if local != nil {
			return "denied, retry after " + headerValue(local.Headers, "retry-after")
		}
		return headerValue(hs, "x-ratelimit-remaining")
	}
	counter := func(result pipeline.SettleResult) uint64 {
		n, err := host.GetCounterMetric(settleMetric("llm", result))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct {
		name     string
		cost     string
		resp     [][2]string // response headers besides :status
		end      bool        // the headers end the response
		trailers [][2]string
		want     string // the user's remaining after, or its denial
	}{
		{"debt from a header ending the response", "1", [][2]string{{"x-cost-actual", "6"}}, true, nil, "denied, retry after 4"},
		{"debt from a header, settled when the stream is done", "1", [][2]string{{"x-cost-actual", "6"}}, false, nil, "denied, retry after 4"},
		{"debt from a trailer", "1", [][2]string{{"trailer", "x-cost-actual"}}, false, [][2]string{{"x-cost-actual", "6"}}, "denied, retry after 4"},
		{"exactly the limit", "1", nil, false, [][2]string{{"x-other", "1"}, {"x-cost-actual", "3"}}, "denied, retry after 1"},
		{"a refund", "3", [][2]string{{"x-cost-actual", "1"}}, true, nil, "1"},                   // 3 - 1 used, less the probe
		{"a refund stops at min_cost", "3", [][2]string{{"x-cost-actual", "0"}}, true, nil, "1"}, // settled as 1
		{"no field: the estimate stands", "2", nil, false, [][2]string{{"x-other", "1"}}, "0"},
		{"an invalid field settles nothing", "2", [][2]string{{"x-cost-actual", "-1"}}, true, nil, "0"},
		{"given twice, as a header and a trailer", "2", [][2]string{{"x-cost-actual", "1"}}, false, [][2]string{{"x-cost-actual", "1"}}, "0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			user := c.name
			local, hs := respond(t, host, req(user, c.cost), c.resp, c.end, c.trailers)
			if local != nil {
				t.Fatalf("denied: %+v", local)
			}
			if v := headerValues(hs, "x-cost-actual"); len(v) != 0 {
				t.Errorf("the client got x-cost-actual %q", v)
			}
			if v := headerValue(hs, "trailer"); v != "" {
				t.Errorf("the client got the field announced: trailer %q", v)
			}
			if got := remaining(user); got != c.want {
				t.Errorf("after: %s, want %s", got, c.want)
			}
		})
	}
	if counter(pipeline.Settled) != 6 || counter(pipeline.SettleInvalid) != 2 || counter(pipeline.SettleFailed) != 0 {
		t.Errorf("settles counted: %d settled, %d invalid, %d failed", counter(pipeline.Settled), counter(pipeline.SettleInvalid), counter(pipeline.SettleFailed))
	}
	// A denied request is not settled, whatever its response says.
	if local, _ := respond(t, host, req("debt from a header ending the response", "1"), [][2]string{{"x-cost-actual", "0"}}, true, nil); local == nil {
		t.Fatal("admitted in debt")
	}
	if counter(pipeline.Settled) != 6 {
		t.Errorf("a denied request settled")
	}
}

// TestFilterSettleShadowCharged: a settle leaves a shadow limit the take
// did not charge (its would-deny) as it was, as store.Policy.Charged says
// for every front end: a refund of a request the candidate would have
// denied does not give the candidate back units it never took.
func TestFilterSettleShadowCharged(t *testing.T) {
	host := emulate(t, `{"slots":16,"rules":[
		{"name":"llm","endpoint":"/","key_by":"header:X-User","cost_header":"X-Cost","response_cost_header":"X-Cost-Actual",
		 "limits":[{"name":"default","strategy":"fixed","limit":1000,"window":"1h"},
		           {"name":"small","strategy":"fixed","limit":150,"window":"1h","shadow":true}]}]}`)
	denied := func() uint64 {
		n, err := host.GetCounterMetric(shadowMetric("llm", "small"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i, c := range []struct {
		cost, actual string
		denials      uint64 // small's would-denies after the request
	}{
		{"100", "100", 0}, // small: 100
		{"100", "20", 1},  // small would deny: not charged, and not refunded either
		{"60", "60", 2},   // small: 100 + 60 > 150 (refunded the 80, it would have admitted)
	} {
		local, _ := respond(t, host, get("/chat", [2]string{"x-user", "u"}, [2]string{"x-cost", c.cost}), [][2]string{{"x-cost-actual", c.actual}}, true, nil)
		if local != nil {
			t.Fatalf("request %d denied: %+v", i, local)
		}
		if got := denied(); got != c.denials {
			t.Fatalf("after request %d: %d would-denies of small, want %d", i, got, c.denials)
		}
	}
}

// TestFilterResponseCostGlobal: in global mode the settle is a callout to
// rl-wasm-host's settle path, sent when the cost is final, by the plugin at
// its next tick (which runs only while settles wait), and not waited for:
// the rule's name and key as the check sent them (or its inline limits),
// the estimate and the actual cost (rl-wasm-host settles them by
// pipeline.SettleDelta, as the filter does on shared data).
func TestFilterResponseCostGlobal(t *testing.T) {
	host := emulate(t, `{"rules":[
		{"name":"named","endpoint":"/n","strategy":"fixed","limit":5,"window":"1s","key_by":"header:x-user","response_cost_header":"x-used",
		 "global":{"cluster":"rl","rule":"llm","token":"s3cret"}},
		{"name":"inline","endpoint":"/i","strategy":"fixed","limit":5,"window":"1s","key_by":"header:x-user","response_cost_header":"x-used","cost":2,
		 "global":{"cluster":"rl","settle_path":"/rl/settle"}}]}`)
	plain := `{"allowed":true,"limit_name":"default","limit":5,"remaining":4,"window_ms":1000,"limits":[]}`
	// A shadow limit that would have denied the check: the settle names
	// it, so rl-wasm-host leaves it as it is (rl.Policy.Charged).
	wouldDeny := `{"allowed":true,"limit_name":"default","limit":5,"remaining":4,"window_ms":1000,"limits":[
		{"name":"default","allowed":true,"limit":5,"remaining":4,"window_ms":1000},
		{"name":"small","allowed":false,"shadow":true,"limit":1,"remaining":0,"window_ms":1000,"retry_after_ms":500}]}`
	for i, c := range []struct {
		path, check, answer, settlePath, settle string
	}{
		{"/n", `{"rule":"llm","key":"alice","cost":1}`, plain, "/v1/ratelimit/settle", `{"rule":"llm","key":"alice","estimate":1,"actual":7}`},
		{"/i", `{"limits":[{"name":"inline","strategy":"fixed_window","limit":5,"window":"1s"}],"key":"inline:alice","cost":2,"fail_open":false}`,
			plain, "/rl/settle", `{"limits":[{"name":"inline","strategy":"fixed_window","limit":5,"window":"1s"}],"key":"inline:alice","estimate":2,"actual":7}`},
		{"/n", `{"rule":"llm","key":"alice","cost":1}`, wouldDeny, "/v1/ratelimit/settle", `{"rule":"llm","key":"alice","estimate":1,"actual":7,"uncharged":["small"]}`},
	} {
		id := host.InitializeHttpContext()
		if act := host.CallOnRequestHeaders(id, get(c.path, [2]string{"x-user", "alice"}), true); act != types.ActionPause {
			t.Fatalf("%s: %v", c.path, act)
		}
		cs := host.GetCalloutAttributesFromContext(id)
		if len(cs) != 1 || string(cs[0].Body) != c.check {
			t.Fatalf("%s: check %+v", c.path, cs)
		}
		host.CallOnHttpCallResponse(cs[0].CalloutID, [][2]string{{":status", "200"}}, nil, []byte(c.answer))
		host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"x-used", "7"}}, true)
		if v := headerValue(host.GetCurrentResponseHeaders(id), "x-used"); v != "" {
			t.Errorf("%s: the client got x-used %q", c.path, v)
		}
		if cs = host.GetCalloutAttributesFromContext(id); len(cs) != 1 {
			t.Fatalf("%s: %d callouts: the request sent the settle itself", c.path, len(cs))
		}
		host.CompleteHttpContext(id)
		if act := host.GetCurrentHttpStreamAction(id); act != types.ActionContinue {
			t.Errorf("%s: %v: the settle held the response", c.path, act)
		}
		if p := host.GetTickPeriod(); p != settleTickMS {
			t.Fatalf("%s: tick period %d while a settle waits", c.path, p)
		}
		host.Tick()
		if p := host.GetTickPeriod(); p != 0 {
			t.Errorf("%s: tick period %d with nothing to send", c.path, p)
		}
		cs = host.GetCalloutAttributesFromContext(proxytest.PluginContextID)
		if len(cs) != i+1 {
			t.Fatalf("%s: %d callouts from the plugin, want %d", c.path, len(cs), i+1)
		}
		s := cs[i]
		if headerValue(s.Headers, ":path") != c.settlePath || headerValue(s.Headers, ":method") != "POST" || string(s.Body) != c.settle {
			t.Errorf("%s: settle %s %s", c.path, headerValue(s.Headers, ":path"), s.Body)
		}
		if c.path == "/n" && headerValue(s.Headers, "authorization") != "Bearer s3cret" {
			t.Errorf("the settle lacks the check's token")
		}
		host.CallOnHttpCallResponse(s.CalloutID, [][2]string{{":status", "200"}}, nil, []byte(`{}`))
	}
	// A request the service denied settles nothing.
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, get("/n", [2]string{"x-user", "bob"}), true)
	cs := host.GetCalloutAttributesFromContext(id)
	host.CallOnHttpCallResponse(cs[0].CalloutID, [][2]string{{":status", "429"}}, nil,
		[]byte(`{"allowed":false,"limit_name":"default","limit":5,"remaining":0,"window_ms":1000,"retry_after_ms":500}`))
	host.CompleteHttpContext(id)
	if n := len(host.GetCalloutAttributesFromContext(id)); n != 1 {
		t.Errorf("%d callouts for a denied request", n)
	}
}

// TestFilterGlobalSettleAnswers: a global settle is counted by
// rl-wasm-host's answer, when it comes, after the request is gone: 200
// settled; 403 (a refund sent with a check token), 400 or 500, failed and
// logged: the estimate stands. (503 and no answer are sent again:
// TestFilterGlobalSettleRetried.) Before, a settle was counted
// settled as soon as it was sent, whatever the answer, and the request
// sent it itself, so the SDK dropped the answer of a request gone.
func TestFilterGlobalSettleAnswers(t *testing.T) {
	host := emulate(t, `{"rules":[
		{"name":"named","endpoint":"/n","strategy":"fixed","limit":5,"window":"1s","key_by":"header:x-user","response_cost_header":"x-used",
		 "global":{"cluster":"rl","rule":"llm"}}]}`)
	counter := func(result pipeline.SettleResult) uint64 {
		n, err := host.GetCounterMetric(settleMetric("named", result))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	request := func(used string) {
		t.Helper()
		id := host.InitializeHttpContext()
		host.CallOnRequestHeaders(id, get("/n", [2]string{"x-user", "alice"}), true)
		cs := host.GetCalloutAttributesFromContext(id)
		host.CallOnHttpCallResponse(cs[0].CalloutID, [][2]string{{":status", "200"}}, nil,
			[]byte(`{"allowed":true,"limit_name":"default","limit":5,"remaining":4,"window_ms":1000,"limits":[]}`))
		host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"x-used", used}}, true)
		host.CompleteHttpContext(id)
	}
	// Actual 0 of an estimate 1 is settled as min_cost 1: no correction,
	// nothing sent, counted settled.
	request("0")
	if host.GetTickPeriod() != 0 || counter(pipeline.Settled) != 1 {
		t.Fatalf("tick %d, %d settled", host.GetTickPeriod(), counter(pipeline.Settled))
	}
	sent := 0
	for _, c := range []struct {
		status          string // "" answers without headers, as a timeout does
		settled, failed uint64
	}{
		{"200", 2, 0}, {"403", 2, 1}, {"400", 2, 2}, {"500", 2, 3}, {"200", 3, 3},
	} {
		request("3")
		if counter(pipeline.Settled) != c.settled-boolInt(c.status == "200") || counter(pipeline.SettleFailed) != c.failed-boolInt(c.status != "200") {
			t.Errorf("answer %q: counted before the answer came", c.status)
		}
		host.Tick()
		cs := host.GetCalloutAttributesFromContext(proxytest.PluginContextID)
		sent++
		if len(cs) != sent {
			t.Fatalf("%d callouts from the plugin, want %d", len(cs), sent)
		}
		var hs [][2]string
		if c.status != "" {
			hs = [][2]string{{":status", c.status}}
		}
		host.CallOnHttpCallResponse(cs[sent-1].CalloutID, hs, nil, []byte(`{}`))
		if got := counter(pipeline.Settled); got != c.settled {
			t.Errorf("answer %q: %d settled, want %d", c.status, got, c.settled)
		}
		if got := counter(pipeline.SettleFailed); got != c.failed {
			t.Errorf("answer %q: %d failed, want %d", c.status, got, c.failed)
		}
	}
}

// TestFilterGlobalSettleRetried: a global settle that rl-wasm-host refuses
// for load (503, as its per-key bound on settles answers) or never answers
// (a timeout, which the host reports without headers) is sent again after
// 10, 40 and 160 ticks; it counts settled when one of the tries is
// answered 200, failed only after the last. Before, the first 503 left the
// estimate standing: a settle flood on one key turned debts into admits.
func TestFilterGlobalSettleRetried(t *testing.T) {
	for _, c := range []struct {
		name    string
		answers []string // "" answers without headers, as a timeout does
		settled uint64
	}{
		{"503 then 200", []string{"503", "200"}, 1},
		{"no answer, 503, no answer, then 200", []string{"", "503", "", "200"}, 1},
		{"503 four times", []string{"503", "503", "503", "503"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			host := emulate(t, `{"rules":[
				{"name":"named","endpoint":"/n","strategy":"fixed","limit":5,"window":"1s","key_by":"header:x-user","response_cost_header":"x-used",
				 "global":{"cluster":"rl","rule":"llm"}}]}`)
			counter := func(result pipeline.SettleResult) uint64 {
				n, err := host.GetCounterMetric(settleMetric("named", result))
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			id := host.InitializeHttpContext()
			host.CallOnRequestHeaders(id, get("/n", [2]string{"x-user", "alice"}), true)
			cs := host.GetCalloutAttributesFromContext(id)
			host.CallOnHttpCallResponse(cs[0].CalloutID, [][2]string{{":status", "200"}}, nil,
				[]byte(`{"allowed":true,"limit_name":"default","limit":5,"remaining":4,"window_ms":1000,"limits":[]}`))
			host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"x-used", "3"}}, true)
			host.CompleteHttpContext(id)

			var bodies []string
			for i, a := range c.answers {
				// Tick until the settle goes out (the first at the first
				// tick, each retry after its wait).
				ticks := 0
				for len(host.GetCalloutAttributesFromContext(proxytest.PluginContextID)) == i {
					if host.GetTickPeriod() == 0 {
						t.Fatalf("try %d: the tick stopped with a settle waiting", i+1)
					}
					host.Tick()
					ticks++
				}
				if want := []int{1, 10, 40, 160}[i]; ticks != want {
					t.Errorf("try %d sent after %d ticks, want %d", i+1, ticks, want)
				}
				cs := host.GetCalloutAttributesFromContext(proxytest.PluginContextID)
				if len(cs) != i+1 {
					t.Fatalf("%d callouts from the plugin, want %d", len(cs), i+1)
				}
				bodies = append(bodies, string(cs[i].Body))
				var hs [][2]string
				if a != "" {
					hs = [][2]string{{":status", a}}
				}
				host.CallOnHttpCallResponse(cs[i].CalloutID, hs, nil, []byte(`{}`))
				if i < len(c.answers)-1 && (counter(pipeline.Settled) != 0 || counter(pipeline.SettleFailed) != 0) {
					t.Fatalf("try %d answered %q: counted before the last try", i+1, a)
				}
			}
			for _, b := range bodies[1:] {
				if b != bodies[0] {
					t.Errorf("a retry sent %s, the first try %s", b, bodies[0])
				}
			}
			if got := counter(pipeline.Settled); got != c.settled {
				t.Errorf("%d settled, want %d", got, c.settled)
			}
			if got := counter(pipeline.SettleFailed); got != 1-c.settled {
				t.Errorf("%d failed, want %d", got, 1-c.settled)
			}
			if host.GetTickPeriod() != 0 {
				t.Errorf("tick period %d after the last answer, want 0 (stopped)", host.GetTickPeriod())
			}
		})
	}
}

func boolInt(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// TestFilterResponseCostFailOpen: a request let through without a decision
// (shared data failing, fail_open) took nothing and settles nothing, but
// the field is removed from its response all the same.
func TestFilterResponseCostFailOpen(t *testing.T) {
	defer func(f func() sharedData) { newSharedData = f }(newSharedData)
	sd := &breakable{memData: newMemData()}
	newSharedData = func() sharedData { return sd }
	host := emulate(t, `{"rules":[{"name":"r","strategy":"fixed","limit":5,"window":"1s","fail_open":true,"response_cost_header":"x-cost-actual"}]}`)
	sd.broken = true
	local, hs := respond(t, host, get("/"), [][2]string{{"x-cost-actual", "9"}}, true, nil)
	if local != nil || headerValue(hs, "x-cost-actual") != "" {
		t.Fatalf("%+v %q", local, hs)
	}
	for _, res := range pipeline.SettleResults() {
		if n, _ := host.GetCounterMetric(settleMetric("r", res)); n != 0 {
			t.Errorf("%s: %d", res, n)
		}
	}
}
