package service

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/memstore"
)

// fakeRLQS answers every report with, for each bucket reported, a
// token_bucket of tokens (0: nothing) refilled with as many an hour, and
// sums the units reported.
type fakeRLQS struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	tokens           atomic.Uint32
	mu               sync.Mutex
	allowed, denied  map[string]uint64 // by bucket name
	reportsWithUsage atomic.Int64
	srv              *grpc.Server
}

func (f *fakeRLQS) StreamRateLimitQuotas(st grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	for {
		r, err := st.Recv()
		if err != nil {
			return nil
		}
		resp := &rlqsv3.RateLimitQuotaResponse{}
		f.mu.Lock()
		for _, u := range r.GetBucketQuotaUsages() {
			name := u.GetBucketId().GetBucket()["name"]
			f.allowed[name] += u.GetNumRequestsAllowed()
			f.denied[name] += u.GetNumRequestsDenied()
			if n := f.tokens.Load(); n > 0 {
				resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{
					BucketId: u.GetBucketId(),
					BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
						AssignmentTimeToLive: durationpb.New(time.Hour),
						RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
							MaxTokens: n, TokensPerFill: wrapperspb.UInt32(n), FillInterval: durationpb.New(time.Hour)}}},
					}},
				})
			}
		}
		f.mu.Unlock()
		if len(resp.BucketAction) > 0 {
			if err := st.Send(resp); err != nil {
				return err
			}
		}
	}
}

func (f *fakeRLQS) usage(name string) (allowed, denied uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.allowed[name], f.denied[name]
}

func startFakeRLQS(t testing.TB) (*fakeRLQS, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRLQS{allowed: map[string]uint64{}, denied: map[string]uint64{}}
	g := grpc.NewServer()
	f.srv = g
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, f)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return f, ln.Addr().String()
}

// globalService is a service with a global rule for the decision API
// (api) and one for the proxy (/g), both on the fake server.
func globalService(t testing.TB, addr string) (*Service, http.Handler) {
	t.Helper()
	cfg, err := ParseConfig("g.yaml", "yaml", []byte(fmt.Sprintf(`
upstream: demo
rules:
  - {name: api, key_by: global, strategy: token, limit: 1000000, rate: 1000000, window: 1s,
     global: {rlqs: %q, bucket: {name: api}, report_interval: 100ms}}
  - {name: g, endpoint: /g, key_by: global, strategy: token, limit: 1000000, rate: 1000000, window: 1s,
     global: {rlqs: %q, bucket: {name: g}, report_interval: 100ms}}
  - {name: local, strategy: token, limit: 1000000, rate: 1000000, window: 1s}
`, addr, addr)))
	if err != nil {
		t.Fatal(err)
	}
	mem := memstore.New(nil)
	t.Cleanup(func() { mem.Close() })
	svc, err := New(cfg, Options{Store: mem, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc, testHandler(svc)
}

func serve(h http.Handler, method, path, body string) int {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
	return w.Code
}

// TestGlobalRule: the decision API and the proxy decide a global rule on
// the RLQS assignment, denying before one arrives (no fallback), and the
// usage reported counts units of cost.
func TestGlobalRule(t *testing.T) {
	f, addr := startFakeRLQS(t)
	_, h := globalService(t, addr)
	check := func(cost int) int {
		return serve(h, "POST", APIPrefix+"check", fmt.Sprintf(`{"rule":"api","key":"k","cost":%d}`, cost))
	}
	if c := check(1); c != http.StatusTooManyRequests {
		t.Fatalf("check before any assignment: %d, want 429 (no fallback: deny)", c)
	}
	if c := serve(h, "GET", "/g", ""); c != http.StatusTooManyRequests {
		t.Fatalf("proxy before any assignment: %d, want 429", c)
	}
	f.tokens.Store(5)
	await.Until(t, "the assignment", func() bool { return check(2) == http.StatusOK })
	if c := check(3); c != http.StatusOK {
		t.Fatalf("second check of cost 3: %d, want 200 (5 tokens, 2 taken)", c)
	}
	if c := check(1); c != http.StatusTooManyRequests {
		t.Fatalf("check past the assignment's 5 tokens: %d, want 429", c)
	}
	await.Until(t, "the proxy's assignment", func() bool { return serve(h, "GET", "/g", "") == http.StatusOK })
	// Reported: units, not requests: 2 + 3 allowed, 1 + 1 + 1 and the
	// denied checks' costs before the assignment.
	await.Until(t, "the usage reported", func() bool { a, _ := f.usage("api"); return a == 5 })
	if _, d := f.usage("api"); d < 3 {
		t.Fatalf("denied units reported %d, want at least 3", d)
	}
	if c := serve(h, "POST", APIPrefix+"reset", `{"rule":"api","key":"k"}`); c < 400 {
		t.Fatalf("reset of a global rule: %d, want an error (a replica cannot reset a global limit)", c)
	}
}

// BenchmarkGlobalRule compares a decision on a global rule (decided on the
// RLQS assignment, in memory) with the same decision on the memory store,
// through the decision API handler. The lead runs it; tests only compile
// it.
func BenchmarkGlobalRule(b *testing.B) {
	f, addr := startFakeRLQS(b)
	f.tokens.Store(1 << 31)
	_, h := globalService(b, addr)
	await.Until(b, "the assignment", func() bool { return serve(h, "POST", APIPrefix+"check", `{"rule":"api","key":"k"}`) == http.StatusOK })
	for _, rule := range []string{"local", "api"} {
		store := map[string]string{"local": "memory", "api": "rlqs"}[rule]
		body := []byte(fmt.Sprintf(`{"rule":%q,"key":"k"}`, rule))
		b.Run("store="+store+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, httptest.NewRequest("POST", APIPrefix+"check", bytes.NewReader(body)))
					if w.Code != http.StatusOK {
						b.Fatal(w.Code, w.Body.String())
					}
				}
			})
		})
	}
}
