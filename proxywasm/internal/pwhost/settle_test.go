package pwhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

func field(hs [][2]string, name string) (string, bool) {
	for _, kv := range hs {
		if strings.EqualFold(kv[0], name) {
			return kv[1], true
		}
	}
	return "", false
}

// TestResponseCost (issue 22, item 3): the committed filter settles the
// actual cost an upstream reports in a trailer, after a body, on its
// shared data, and takes the trailer and its announcement out of the
// response: the debt denies the key's next request, on another VM too,
// for exactly as long as it takes to pay off.
func TestResponseCost(t *testing.T) {
	h := newHost(t)
	conf := []byte(`{"slots":16,"rules":[{"name":"llm","endpoint":"/","key_by":"header:x-user","strategy":"token","limit":3,"window":"1s","rate":1,
		"response_cost_header":"X-Tokens-Used"}]}`)
	vm1, err := h.NewVM(context.Background(), conf)
	if err != nil {
		t.Fatal(err)
	}
	vm2, err := h.NewVM(context.Background(), conf)
	if err != nil {
		t.Fatal(err)
	}
	req := [][2]string{{":method", "POST"}, {":authority", "app"}, {":path", "/chat"}, {"x-user", "ann"}}
	s, err := vm1.Exchange(req, nil, Response{
		Headers:  [][2]string{{":status", "200"}, {"trailer", "X-Other, X-Tokens-Used"}},
		Trailers: [][2]string{{"x-other", "1"}, {"x-tokens-used", "6"}},
	})
	if err != nil || s.Local != nil {
		t.Fatalf("%v %+v", err, s.Local)
	}
	if v, _ := field(s.ResponseHeaders, "trailer"); v != "X-Other" {
		t.Errorf("trailer announced: %q", v)
	}
	if _, ok := field(s.ResponseTrailers, "x-tokens-used"); ok || len(s.ResponseTrailers) != 1 {
		t.Errorf("trailers left: %q", s.ResponseTrailers)
	}
	if n, _ := h.Metric("rl_filter.settles.llm.settled"); n != 1 {
		t.Errorf("%d settles counted", n)
	}
	// 6 used of 3, one back a second: the next passes in 4 s, on any VM.
	s, err = vm2.Request(req, nil, [][2]string{{":status", "200"}})
	if err != nil || s.Local == nil || s.Local.Status != 429 {
		t.Fatalf("in debt: %v %+v", err, s.Local)
	}
	if v, _ := field(s.Local.Headers, "retry-after"); v != "4" {
		t.Errorf("Retry-After %q in %q", v, s.Local.Headers)
	}
	h.Now.Add(4e9 - 1000) // 1 µs early
	if s, _ := vm2.Request(req, nil, nil); s.Local == nil {
		t.Error("admitted 1 µs early")
	}
	h.Now.Add(1000)
	if s, _ := vm1.Request(req, nil, nil); s.Local != nil {
		t.Errorf("denied at Retry-After: %+v", s.Local)
	}
}

// TestGlobalSettleWithRLWasmHost (issue 22, item 3): in global mode the
// committed filter sends a settle to rl-wasm-host's decision API when the
// response reports its cost, from the plugin at its next tick; the service
// settles it, the filter counts the 200, and the debt denies the key's
// next request on another replica.
func TestGlobalSettleWithRLWasmHost(t *testing.T) {
	base := startRLWasmHost(t, `{"rules":[{"name":"llm","strategy":"token","limit":1000,"window":"1h","cost":100}]}`)
	const conf = `{"rules":[{"name":"chat","endpoint":"/chat","key_by":"header:x-user","strategy":"token","limit":1000,"window":"1h",
		"cost":100,"response_cost_header":"x-tokens-used","global":{"cluster":"rl","rule":"llm","timeout":"5s"}}]}`
	var vms []*VM
	for range 2 { // two replicas: no shared data between them
		vm, err := newHost(t).NewVM(context.Background(), []byte(conf))
		if err != nil {
			t.Fatal(err)
		}
		vms = append(vms, vm)
	}
	forward := forwarder(t, base)
	req := [][2]string{{":method", "POST"}, {":authority", "app"}, {":path", "/chat"}, {"x-user", "ann"}}
	s, err := vms[0].Request(req, nil, nil)
	if err != nil || len(s.Callouts) != 1 {
		t.Fatalf("%v, %d callouts", err, len(s.Callouts))
	}
	// Admitted at the estimate, 100; the response says 2500 were used.
	if err := vms[0].RespondWith(s, s.Callouts[0], forward(s.Callouts[0]), Response{Headers: [][2]string{{":status", "200"}, {"x-tokens-used", "2500"}}}); err != nil {
		t.Fatal(err)
	}
	if s.Local != nil || !s.Resumed {
		t.Fatalf("not admitted: %+v", s.Local)
	}
	if _, ok := field(s.ResponseHeaders, "x-tokens-used"); ok {
		t.Error("the client got x-tokens-used")
	}
	if len(s.Callouts) != 1 || len(vms[0].Callouts) != 0 {
		t.Fatalf("%d callouts of the request, %d of the plugin, before the tick", len(s.Callouts), len(vms[0].Callouts))
	}
	if ticked, err := vms[0].Tick(); !ticked || err != nil {
		t.Fatalf("tick: %v %v", ticked, err)
	}
	if len(vms[0].Callouts) != 1 || vms[0].TickPeriod() != 0 {
		t.Fatalf("%d callouts of the plugin, tick period %d", len(vms[0].Callouts), vms[0].TickPeriod())
	}
	c := vms[0].Callouts[0]
	if p, _ := field(c.Headers, ":path"); p != "/v1/ratelimit/settle" || string(c.Body) != `{"rule":"llm","key":"ann","estimate":100,"actual":2500}` {
		t.Fatalf("settle %s %s", p, c.Body)
	}
	resp := forward(c)
	if st, _ := field(resp.Headers, ":status"); st != "200" {
		t.Fatalf("the service answered the settle %s %s", st, resp.Body)
	}
	var d struct {
		Allowed   bool
		Delta     int64
		Remaining int64
	}
	if err := json.Unmarshal(resp.Body, &d); err != nil || !d.Allowed || d.Delta != 2400 || d.Remaining != 0 {
		t.Fatalf("settle answer %s", resp.Body)
	}
	if err := vms[0].Answer(c, resp); err != nil {
		t.Fatal(err)
	}
	if n, _ := vms[0].h.Metric("rl_filter.settles.chat.settled"); n != 1 {
		t.Errorf("%d settles counted after the 200", n)
	}
	// 2500 used of 1000: the other replica's next request is denied.
	s, err = vms[1].Request(req, nil, nil)
	if err != nil || len(s.Callouts) != 1 {
		t.Fatalf("%v", err)
	}
	if err := vms[1].Respond(s, s.Callouts[0], forward(s.Callouts[0]), nil); err != nil {
		t.Fatal(err)
	}
	if s.Local == nil || s.Local.Status != 429 {
		t.Fatalf("in debt, admitted: %+v", s.Local)
	}
	if v, _ := field(s.Local.Headers, "retry-after"); v != "5760" { // 1600 tokens to pay at 1000 an hour, less a few ms, rounded up
		t.Errorf("Retry-After %q", v)
	}
}

// TestGlobalRefundNeedsASettleToken: rl-wasm-host lets a check token
// settle only debts (a refund of what no check took would be a reset by
// another name), so a global rule whose token is a check token has its
// refunds refused, 403: the committed filter counts them failed, and logs
// it; the estimate stands. A settle token's refund is settled. Before, the
// filter counted every settle sent as settled.
func TestGlobalRefundNeedsASettleToken(t *testing.T) {
	sum := func(tok string) string { h := sha256.Sum256([]byte(tok)); return hex.EncodeToString(h[:]) }
	base := startRLWasmHost(t, `{"api_tokens":[{"name":"edge","role":"check","sha256":"`+sum("check-token")+`"},
		{"name":"settler","role":"settle","sha256":"`+sum("settle-token")+`"}],
		"rules":[{"name":"llm","strategy":"fixed","limit":10,"window":"1h"}]}`)
	forward := forwarder(t, base)
	for _, c := range []struct {
		token, result string
		remaining     string // the key's X-RateLimit-Remaining after: the refund's, or the estimate's
	}{
		{"check-token", "failed", "0"},   // 5 + the next request's 5 used of 10
		{"settle-token", "settled", "3"}, // 2 + 5
	} {
		conf := `{"rules":[{"name":"chat","endpoint":"/chat","key_by":"header:x-user","strategy":"fixed","limit":10,"window":"1h",
			"cost":5,"response_cost_header":"x-tokens-used","global":{"cluster":"rl","rule":"llm","token":"` + c.token + `"}}]}`
		h := newHost(t)
		vm, err := h.NewVM(context.Background(), []byte(conf))
		if err != nil {
			t.Fatal(err)
		}
		req := [][2]string{{":method", "POST"}, {":authority", "app"}, {":path", "/chat"}, {"x-user", c.token}}
		s, err := vm.Request(req, nil, nil)
		if err != nil || len(s.Callouts) != 1 {
			t.Fatalf("%s: %v", c.token, err)
		}
		// Estimate 5; the response says 2 were used: a refund of 3.
		if err := vm.RespondWith(s, s.Callouts[0], forward(s.Callouts[0]), Response{Headers: [][2]string{{":status", "200"}, {"x-tokens-used", "2"}}}); err != nil {
			t.Fatal(err)
		}
		if ticked, err := vm.Tick(); !ticked || err != nil {
			t.Fatalf("%s: tick %v %v", c.token, ticked, err)
		}
		if len(vm.Callouts) != 1 {
			t.Fatalf("%s: %d settles sent", c.token, len(vm.Callouts))
		}
		resp := forward(vm.Callouts[0])
		if err := vm.Answer(vm.Callouts[0], resp); err != nil {
			t.Fatal(err)
		}
		if n, _ := h.Metric("rl_filter.settles.chat." + c.result); n != 1 {
			t.Errorf("%s: answered %q %s: %s counted %d times", c.token, resp.Headers, resp.Body, c.result, n)
		}
		if c.result == "failed" && !strings.Contains(strings.Join(vm.Logs, "\n"), `answered the settle of estimate 5, actual 2 with status "403"`) {
			t.Errorf("%s: not logged: %q", c.token, vm.Logs)
		}
		s, err = vm.Request(req, nil, nil)
		if err != nil || len(s.Callouts) != 1 {
			t.Fatalf("%s: %v", c.token, err)
		}
		if err := vm.Respond(s, s.Callouts[0], forward(s.Callouts[0]), [][2]string{{":status", "200"}}); err != nil {
			t.Fatal(err)
		}
		if v, _ := field(s.ResponseHeaders, "x-ratelimit-remaining"); v != c.remaining {
			t.Errorf("%s: remaining %q, want %s", c.token, v, c.remaining)
		}
	}
}
