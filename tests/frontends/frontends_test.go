package frontends_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlcore/rl/internal/frontend/rls"
	"github.com/rlcore/rl/internal/frontend/service"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/tests/frontends"
)

const t0 = int64(1_700_000_000_000_000)

// serviceYAML is the case's rule in rl-wasm-host's configuration, with
// the built-in demo upstream.
func serviceYAML(c frontends.Case) string { return serviceYAMLTo(c, "demo") }

// serviceYAMLTo is serviceYAML with the upstream given.
func serviceYAMLTo(c frontends.Case, upstream string) string {
	r := c.Rule
	rule := map[string]any{"name": "r", "endpoint": cmpOr(r.Endpoint, "/"), "key_by": cmpOr(r.KeyBy, "header:X-User"), "cost_header": "X-Cost",
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
	// The proxy's clients come from the loopback: a step's Peer is its
	// X-Forwarded-For.
	b, _ := json.Marshal(map[string]any{"upstream": upstream, "trusted_proxies": []string{"127.0.0.1", "::1"}, "rules": []any{rule}})
	return string(b)
}

// ruleLimits are the rule's limit fields in the service's and the
// filter's shape: the shorthand, or with a shadow limit a list.
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

// rlsDomain is the case's rule in the rate limit service's configuration:
// the descriptor user, its shadow limit as shadow_limits, or, alone, the
// descriptor's limit in shadow_mode.
func rlsDomain(r frontends.Rule) []byte {
	switch {
	case r.Shadow == 0:
		return []byte("domain: d\ndescriptors:\n" + r.Descriptors())
	case r.Limit == 0:
		return fmt.Appendf(nil, "domain: d\ndescriptors:\n  - key: user\n    shadow_mode: true\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", r.Shadow)
	}
	return fmt.Appendf(nil, "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: %d, shadow_limits: [{name: candidate, unit: hour, requests_per_unit: %d}]}\n",
		r.Limit, r.Shadow)
}

// checkShadowFields fails t when a rate-limit field of a case with a
// shadow limit names it, or, for a rule of only a shadow limit, when there
// is any.
func checkShadowFields(t *testing.T, f frontends.Front, c frontends.Case, i int, get func(string) string) {
	t.Helper()
	if c.Rule.Shadow == 0 {
		return
	}
	for _, n := range fieldNames {
		v := get(n)
		if strings.Contains(v, "candidate") || c.Rule.Limit == 0 && v != "" {
			t.Errorf("%s: case %d step %d: %s: %q: a shadow limit is in no field", f, c.ID, i, n, v)
		}
	}
}

// metricValue is the value of the sample line of /metrics starting with
// series (its name and labels), 0 if there is none.
func metricValue(t *testing.T, svc *service.Service, series string) float64 {
	t.Helper()
	w := httptest.NewRecorder()
	svc.APIHandler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

// checkWouldDeny fails t unless the front end counted the case's
// would-denies (n).
func checkWouldDeny(t *testing.T, f frontends.Front, c frontends.Case, n float64) {
	t.Helper()
	if n != float64(c.WouldDeny) {
		t.Errorf("%s: case %d %q: %v would-denies counted, want %d", f, c.ID, c.Name, n, c.WouldDeny)
	}
}

// serviceWouldDeny is the would-denies the proxy or the decision API
// counted.
func serviceWouldDeny(t *testing.T, svc *service.Service) float64 {
	return metricValue(t, svc, `rl_shadow_denials_total{limit="candidate",rule="r"}`)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func newService(t *testing.T, c frontends.Case) *service.Service {
	t.Helper()
	return newServiceTo(t, c, "demo")
}

func newServiceTo(t *testing.T, c frontends.Case, upstream string) *service.Service {
	t.Helper()
	cfg, err := service.ParseConfig("case.json", "json", []byte(serviceYAMLTo(c, upstream)))
	if err != nil {
		t.Fatal(err)
	}
	now := func() int64 { return t0 }
	mem := memstore.New(&memstore.Config{Clock: now, SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	svc, err := service.New(cfg, service.Options{Store: mem, Clock: now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return svc
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

func check(t *testing.T, f frontends.Front, c frontends.Case, i int, s frontends.Step, got frontends.Want, detail string) {
	t.Helper()
	ok := got == s.Want || s.Want == frontends.Block && (got == frontends.Deny || got == frontends.Refuse)
	if !ok {
		t.Errorf("%s: case %d %q step %d (%+v): %v, want %v (%s)", f, c.ID, c.Name, i, s, got, s.Want, detail)
	}
}

func fromStatus(code int) frontends.Want {
	switch code {
	case 200:
		return frontends.Admit
	case 429:
		return frontends.Deny
	case 400:
		return frontends.Refuse
	}
	return 0
}

// TestProxy runs the table through rl-wasm-host's reverse proxy, to an
// upstream that records what it was sent and reports a step's response
// cost (asked in X-Reply-Cost, as a trailer with X-Reply-Trailer).
func TestProxy(t *testing.T) {
	var (
		mu     sync.Mutex
		target string
		names  []string
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		target, names = r.RequestURI, nil
		for n := range r.Header {
			names = append(names, n)
		}
		mu.Unlock()
		cost, trailer := r.Header.Get("X-Reply-Cost"), r.Header.Get("X-Reply-Trailer") != ""
		switch {
		case cost != "" && trailer:
			w.Header().Set("Trailer", "X-Cost-Actual")
			w.Write([]byte("body"))
			w.Header().Set("X-Cost-Actual", cost)
		case cost != "":
			w.Header().Set("X-Cost-Actual", cost)
		}
	}))
	t.Cleanup(up.Close)
	for _, c := range frontends.Cases {
		svc := newServiceTo(t, c, up.URL)
		srv := httptest.NewServer(svc.ProxyHandler())
		t.Cleanup(srv.Close)
		settles := 0.0
		for i, s := range c.Steps {
			if !can(s, frontends.Proxy) {
				continue
			}
			code, h, body := rawRequest(t, srv.Listener.Addr().String(), s)
			check(t, frontends.Proxy, c, i, s, fromStatus(code), strconv.Itoa(code)+" "+body)
			if s.ResponseCost != "" && code == 200 {
				// The settle lands after the response: wait for it.
				settles++
				waitSettles(t, svc, settles)
			}
			if code == 200 {
				mu.Lock()
				if p := s.CheckForwarded(target, names); p != "" {
					t.Errorf("proxy: case %d %q step %d (%+v): %s", c.ID, c.Name, i, s, p)
				}
				mu.Unlock()
			}
			checkShadowFields(t, frontends.Proxy, c, i, h.Get)
		}
		checkWouldDeny(t, frontends.Proxy, c, serviceWouldDeny(t, svc))
	}
}

// waitSettles waits until the service has counted n settles of rule r
// (settled or invalid): the proxy settles after the response.
func waitSettles(t *testing.T, svc *service.Service, n float64) {
	t.Helper()
	await.Until(t, fmt.Sprintf("%v settles counted", n), func() bool {
		got := metricValue(t, svc, `rl_settles_total{result="settled",rule="r"}`) + metricValue(t, svc, `rl_settles_total{result="invalid",rule="r"}`)
		return got == n
	})
}

// rawRequest sends s as written (methods, hosts and paths a client library
// would clean up) and returns the status, header and body. A step with a
// response cost asks the upstream for it; the response, trailers
// included, must not carry it.
func rawRequest(t *testing.T, addr string, s frontends.Step) (int, http.Header, string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", cmpOr(s.Method, "GET"), cmpOr(s.Path, "/"), cmpOr(s.Host, "api.example.com"))
	if s.Key != "" {
		fmt.Fprintf(&b, "X-User: %s\r\n", s.Key)
	}
	if s.Peer != "" {
		fmt.Fprintf(&b, "X-Forwarded-For: %s\r\n", s.Peer)
	}
	if s.Cost != "" {
		fmt.Fprintf(&b, "X-Cost: %s\r\n", s.Cost)
	}
	for _, kv := range s.Header {
		fmt.Fprintf(&b, "%s: %s\r\n", kv[0], kv[1])
	}
	if s.ResponseCost != "" {
		fmt.Fprintf(&b, "X-Reply-Cost: %s\r\n", s.ResponseCost)
		if s.Trailer {
			b.WriteString("X-Reply-Trailer: 1\r\n")
		}
	}
	b.WriteString("\r\n")
	resp, err := roundTripRaw(addr, b.String(), s.Method == "HEAD" || s.Method == "head")
	if err != nil {
		t.Fatal(err)
	}
	if v := append(resp.header.Values("X-Cost-Actual"), resp.trailer.Values("X-Cost-Actual")...); len(v) > 0 {
		t.Errorf("proxy: step %+v: the client got X-Cost-Actual %q", s, v)
	}
	return resp.code, resp.header, resp.body
}

// TestAPI runs the table through the decision API: the key and cost as the
// request body's "key" and "cost".
func TestAPI(t *testing.T) {
	for _, c := range frontends.Cases {
		svc := newService(t, c)
		srv := httptest.NewServer(svc.APIHandler())
		t.Cleanup(srv.Close)
		for i, s := range c.Steps {
			if !can(s, frontends.API) {
				continue
			}
			key := s.Key
			if s.Peer != "" {
				key, _ = pipeline.IPKey{}.Key(s.Peer, nil) // the key the proxy derives
			}
			body := `{"rule":"r","key":` + strconv.Quote(key)
			if s.Cost != "" {
				body += `,"cost":` + s.Cost
			}
			body += "}"
			resp, err := http.Post(srv.URL+service.APIPrefix+"check", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			rb, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			check(t, frontends.API, c, i, s, fromStatus(resp.StatusCode), body+" → "+strconv.Itoa(resp.StatusCode)+" "+string(rb))
			checkShadowFields(t, frontends.API, c, i, resp.Header.Get)
			if s.ResponseCost != "" && resp.StatusCode == 200 {
				settleAPI(t, srv.URL, s)
			}
		}
		checkWouldDeny(t, frontends.API, c, serviceWouldDeny(t, svc))
	}
}

// settleAPI settles what a step's response cost says over the decision
// API, as a client that learns the actual cost does: the step's cost (the
// estimate its check took) and the actual cost as the response gave it,
// when it is one (pipeline.ParseResponseCost); nothing otherwise. The API
// settles them by the rule every front end does (pipeline.SettleDelta:
// min_cost, MaxCost), so the runner applies none itself. The API's
// listener is trusted (no tokens): an admin may settle refunds.
func settleAPI(t *testing.T, base string, s frontends.Step) {
	t.Helper()
	if _, ok, err := pipeline.ParseResponseCost([]string{s.ResponseCost}); err != nil || !ok {
		return
	}
	body := fmt.Sprintf(`{"rule":"r","key":%q,"estimate":%s,"actual":%s}`, s.Key, cmpOr(s.Cost, "1"), s.ResponseCost)
	resp, err := http.Post(base+service.APIPrefix+"settle", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("api: settle %s: %d %s", body, resp.StatusCode, rb)
	}
}

// TestGRPC runs the table through the Envoy rate limit service: the key as
// the descriptor entry user=<key>, the cost as the descriptor's
// hits_addend. Envoy's protocol has no settle: cases with a response cost
// are not run (docs/envoy.md: the gRPC service has no settle), nor are
// cases keyed by ip (Case.On).
func TestGRPC(t *testing.T) {
	for _, c := range frontends.Cases {
		if !c.On(frontends.GRPC) {
			continue
		}
		svc := newService(t, c)
		d, err := rls.ParseDomain("d.yaml", rlsDomain(c.Rule))
		if err != nil {
			t.Fatal(err)
		}
		srv, err := rls.New(svc, &rls.Config{Path: "d.yaml", Domains: map[string]*rls.Domain{"d": d}}, rls.Options{Trusted: true})
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range c.Steps {
			if !can(s, frontends.GRPC) {
				continue
			}
			desc := &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: s.Key}}}
			if s.Cost != "" {
				n, err := strconv.ParseUint(s.Cost, 10, 64)
				if err != nil {
					t.Fatalf("case %d step %d: cost %q cannot be a hits_addend: mark the step Only without grpc", c.ID, i, s.Cost)
				}
				desc.HitsAddend = wrapperspb.UInt64(n)
			}
			resp, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc}})
			var got frontends.Want
			switch {
			case status.Code(err) == codes.InvalidArgument && s.Want == frontends.Block:
				got = frontends.Admit // by Envoy's default failure_mode_deny: false
			case status.Code(err) == codes.InvalidArgument:
				got = frontends.Refuse
			case err != nil:
				t.Fatalf("case %d step %d: %v", c.ID, i, err)
			case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
				got = frontends.Admit
			case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
				got = frontends.Deny
			}
			check(t, frontends.GRPC, c, i, s, got, fmt.Sprint(resp, err))
			h := http.Header{}
			for _, kv := range resp.GetResponseHeadersToAdd() {
				h.Add(kv.Key, kv.Value)
			}
			checkShadowFields(t, frontends.GRPC, c, i, h.Get)
		}
		// shadow_limits' would-denies, or shadow_mode's when the
		// shadow limit is the descriptor's only one.
		n := metricValue(t, svc, `rl_rls_shadow_denials_total{descriptor="user",domain="d",limit="candidate"}`)
		if c.Rule.Limit == 0 {
			n = metricValue(t, svc, `rl_rls_descriptor_decisions_total{descriptor="user",domain="d",outcome="shadow_denied"}`)
		}
		checkWouldDeny(t, frontends.GRPC, c, n)
	}
}
