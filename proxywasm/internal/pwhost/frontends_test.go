package pwhost

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rlcore/rl/tests/frontends"
)

// TestFrontends runs the front-end conformance table (tests/frontends)
// through the committed rl-filter.wasm, as Envoy would run it: the key in
// the x-user header, the cost in x-cost, the request's pseudo-headers as
// sent.
func TestFrontends(t *testing.T) {
	h := newHost(t)
	for _, c := range frontends.Cases {
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
			if !can(s, frontends.Filter) {
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
			st, err := vm.Exchange(hs, map[string]string{"source.address": "192.0.2.9:1000"}, up)
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range append(st.ResponseHeaders, st.ResponseTrailers...) {
				if kv[0] == "x-cost-actual" || kv[0] == "trailer" {
					t.Errorf("filter: case %d step %d: the client got %s: %s", c.ID, i, kv[0], kv[1])
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
				t.Errorf("filter: case %d %q step %d (%+v): %v, want %v (%s)", c.ID, c.Name, i, s, got, s.Want, detail)
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
					t.Errorf("filter: case %d %q step %d (%+v): %s", c.ID, c.Name, i, s, p)
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
						t.Errorf("filter: case %d step %d: %s: %q: a shadow limit is in no field", c.ID, i, kv[0], kv[1])
					}
				}
			}
		}
		if r.Shadow != 0 {
			if n, _ := hc.Metric("rl_filter.shadow_denied.r.candidate"); n != int64(c.WouldDeny) {
				t.Errorf("filter: case %d %q: %d would-denies counted, want %d", c.ID, c.Name, n, c.WouldDeny)
			}
		}
	}
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
