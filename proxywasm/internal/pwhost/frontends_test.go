package pwhost

import (
	"context"
	"encoding/json"
	"maps"
	"net/netip"
	"strings"
	"testing"

	"github.com/rlcore/rl/tests/frontends"
)

// TestFrontends runs the front-end conformance table (tests/frontends)
// through the committed rl-filter.wasm, as Envoy would run it: the key in
// the x-user header (or the client's address in source.address), the cost
// in x-cost, the request's pseudo-headers as sent.
func TestFrontends(t *testing.T) {
	runFrontends(t, frontends.Filter)
}

// TestFrontendsGlobal runs the table through the committed rl-filter.wasm
// in global mode: its rule names rl-wasm-host's rule "r" (global.rule),
// the case's rule with its overrides, in a real rl-wasm-host (built and
// started by the test, one per case for a fresh state) to which the
// callouts, settles included, are sent.
func TestFrontendsGlobal(t *testing.T) {
	runFrontends(t, frontends.FilterGlobal)
}

func runFrontends(t *testing.T, front frontends.Front) {
	h := newHost(t)
	for _, c := range frontends.Cases {
		if !c.On(front) {
			continue
		}
		r := c.Rule
		rule := map[string]any{"name": "r", "endpoint": or(r.Endpoint, "/"), "key_by": or(r.KeyBy, "header:X-User"), "cost_header": "X-Cost",
			"response_cost_header": "X-Cost-Actual"}
		for k, v := range ruleLimits(r) {
			rule[k] = v
		}
		if r.Host != "" {
			rule["host"] = r.Host
		}
		if len(r.Methods) > 0 {
			rule["methods"] = r.Methods
		}
		if os := r.OverridesJSON(); os != nil {
			rule["overrides"] = os
		}
		var forward func(*Callout) CalloutResponse
		if front == frontends.FilterGlobal {
			// rl-wasm-host holds the rule, overrides included; the
			// filter's rule names it.
			svc, _ := json.Marshal(map[string]any{"upstream": "demo", "rules": []any{rule}})
			forward = forwarder(t, startRLWasmHost(t, string(svc)))
			g := maps.Clone(rule)
			delete(g, "overrides")
			g["global"] = map[string]any{"cluster": "rl", "rule": "r", "timeout": "10s"}
			rule = g
		}
		conf, _ := json.Marshal(map[string]any{"slots": 64, "rules": []any{rule}})
		// Each case starts on fresh shared data: a host of its own.
		hc := h
		if c.ID > 1 {
			hc = newHost(t)
		}
		vm, err := hc.NewVM(context.Background(), conf)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range c.Steps {
			if !can(s, front) {
				continue
			}
			hs := [][2]string{{":method", or(s.Method, "GET")}, {":authority", or(s.Host, "api.example.com")}, {":path", or(s.Path, "/")}}
			if s.Key != "" {
				hs = append(hs, [2]string{"x-user", s.Key})
			}
			if s.Cost != "" {
				hs = append(hs, [2]string{"x-cost", s.Cost})
			}
			for _, kv := range s.Header {
				hs = append(hs, [2]string{strings.ToLower(kv[0]), kv[1]})
			}
			// The upstream's response: its actual cost, if the step has
			// one, in a header or a trailer.
			up := Response{Headers: [][2]string{{":status", "200"}}}
			switch {
			case s.ResponseCost != "" && s.Trailer:
				up.Headers = append(up.Headers, [2]string{"trailer", "x-cost-actual"})
				up.Trailers = [][2]string{{"x-cost-actual", s.ResponseCost}}
			case s.ResponseCost != "":
				up.Headers = append(up.Headers, [2]string{"x-cost-actual", s.ResponseCost})
			}
			peer := "192.0.2.9:1000"
			if s.Peer != "" {
				peer = netip.AddrPortFrom(netip.MustParseAddr(s.Peer), 1000).String() // Envoy's source.address
			}
			st, err := vm.Exchange(hs, map[string]string{"source.address": peer}, up)
			if err != nil {
				t.Fatal(err)
			}
			if front == frontends.FilterGlobal {
				st = exchangeGlobal(t, vm, st, forward, up)
			}
			for _, kv := range append(st.ResponseHeaders, st.ResponseTrailers...) {
				if kv[0] == "x-cost-actual" || kv[0] == "trailer" {
					t.Errorf("%s: case %d step %d: the client got %s: %s", front, c.ID, i, kv[0], kv[1])
				}
			}
			got, detail := frontends.Admit, "forwarded"
			if st.Local != nil {
				detail = string(st.Local.Body)
				switch st.Local.Status {
				case 429:
					got = frontends.Deny
				case 400:
					got = frontends.Refuse
				default:
					got = 0
				}
			}
			ok := got == s.Want || s.Want == frontends.Block && (got == frontends.Deny || got == frontends.Refuse)
			if !ok {
				t.Errorf("%s: case %d %q step %d (%+v): %v, want %v (%s)", front, c.ID, c.Name, i, s, got, s.Want, detail)
			}
			if got == frontends.Admit {
				var path string
				var names []string
				for _, kv := range st.RequestHeaders {
					if kv[0] == ":path" {
						path = kv[1]
					}
					names = append(names, kv[0])
				}
				if p := s.CheckForwarded(path, names); p != "" {
					t.Errorf("%s: case %d %q step %d (%+v): %s", front, c.ID, c.Name, i, s, p)
				}
			}
			fields := st.ResponseHeaders
			if st.Local != nil {
				fields = st.Local.Headers
			}
			for _, kv := range fields {
				field := strings.HasPrefix(kv[0], "ratelimit") || strings.HasPrefix(kv[0], "x-ratelimit") || kv[0] == "retry-after"
				if r.Shadow != 0 && field {
					if strings.Contains(kv[1], "candidate") || r.Limit == 0 {
						t.Errorf("%s: case %d step %d: %s: %q: a shadow limit is in no field", front, c.ID, i, kv[0], kv[1])
					}
				}
			}
		}
		if r.Shadow != 0 {
			if n, _ := hc.Metric("rl_filter.shadow_denied.r.candidate"); n != int64(c.WouldDeny) {
				t.Errorf("%s: case %d %q: %d would-denies counted, want %d", front, c.ID, c.Name, n, c.WouldDeny)
			}
		}
	}
}

// exchangeGlobal completes a stream of the filter in global mode: its
// check callout answered by rl-wasm-host (forward), the upstream's
// response up, and the settle the response may have sent, answered too.
func exchangeGlobal(t *testing.T, vm *VM, st *Stream, forward func(*Callout) CalloutResponse, up Response) *Stream {
	t.Helper()
	if st.Local != nil || len(st.Callouts) == 0 {
		return st // answered without a callout (a 400) or let through
	}
	if len(st.Callouts) != 1 {
		t.Fatalf("%d callouts before the answer", len(st.Callouts))
	}
	if err := vm.RespondWith(st, st.Callouts[0], forward(st.Callouts[0]), up); err != nil {
		t.Fatal(err)
	}
	if len(st.Callouts) != 1 {
		t.Fatalf("%d callouts of the stream: a settle is sent by the plugin, on its tick", len(st.Callouts))
	}
	// A settle, queued when the response is done, is sent on the
	// plugin's next tick, and answered.
	sent := len(vm.Callouts)
	for n := 0; vm.TickPeriod() != 0; n++ {
		if n == 10 {
			t.Fatalf("the plugin still ticks after %d ticks", n)
		}
		if _, err := vm.Tick(); err != nil {
			t.Fatal(err)
		}
		for _, c := range vm.Callouts[sent:] {
			resp := forward(c)
			if code, _ := field(resp.Headers, ":status"); code != "200" {
				t.Fatalf("the service answered the settle %s %s: %s", code, c.Body, resp.Body)
			}
			if err := vm.Answer(c, resp); err != nil {
				t.Fatal(err)
			}
		}
		sent = len(vm.Callouts)
	}
	return st
}

// ruleLimits are the rule's limit fields (tests/frontends' runners write
// the same).
func ruleLimits(r frontends.Rule) map[string]any {
	if r.Shadow == 0 {
		return map[string]any{"strategy": "fixed", "limit": r.Limit, "window": "1h"}
	}
	shadow := map[string]any{"name": "candidate", "strategy": "fixed", "limit": r.Shadow, "window": "1h", "shadow": true}
	if r.Limit == 0 {
		return map[string]any{"limits": []any{shadow}}
	}
	return map[string]any{"limits": []any{map[string]any{"name": "default", "strategy": "fixed", "limit": r.Limit, "window": "1h"}, shadow}}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func can(s frontends.Step, f frontends.Front) bool {
	if len(s.Only) == 0 {
		return true
	}
	for _, o := range s.Only {
		if o == f {
			return true
		}
	}
	return false
}
