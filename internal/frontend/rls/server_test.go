package rls

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/fakestore"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/pgstore"
	"github.com/rlcore/rl/store"
)

const hitsYAML = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: j
    rate_limit: {unit: minute, requests_per_unit: 10}
`

func TestHitsAddend(t *testing.T) {
	e := newEnv(t, hitsYAML, envOpts{})
	ctx := context.Background()
	call := func(hits uint32, desc ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		r, err := e.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: desc, HitsAddend: hits})
		require.NoError(t, err)
		return r
	}
	// hits_addend 0 means 1.
	require.Equal(t, uint32(9), call(0, d("k", "a")).Statuses[0].LimitRemaining)
	require.Equal(t, uint32(6), call(3, d("k", "a")).Statuses[0].LimitRemaining)
	// A descriptor's own hits_addend overrides the request's; 0 checks
	// without charging.
	check := d("k", "a")
	check.HitsAddend = wrapperspb.UInt64(0)
	r := call(5, check)
	require.Equal(t, OK, r.OverallCode)
	require.Equal(t, uint32(6), r.Statuses[0].LimitRemaining)
	two := d("k", "a")
	two.HitsAddend = wrapperspb.UInt64(2)
	require.Equal(t, uint32(4), call(5, two).Statuses[0].LimitRemaining)
	// Too much at once is denied and charges nothing.
	r = call(5, d("k", "a"))
	require.Equal(t, OVER, r.OverallCode)
	require.Equal(t, uint32(4), call(0, check).Statuses[0].LimitRemaining)
	// The same descriptor twice in one request: one decision of both costs.
	r = call(2, d("k", "a"), d("k", "a"))
	require.Equal(t, OK, r.OverallCode)
	require.Equal(t, uint32(0), r.Statuses[0].LimitRemaining)
	require.Equal(t, uint32(0), r.Statuses[1].LimitRemaining)
	// Issue 19, 2: an explicit hits_addend 0 on an exhausted limit is a
	// peek of one unit: OVER_LIMIT, charging nothing (it answered OK).
	r = call(0, check)
	require.Equal(t, OVER, r.OverallCode, "a check on an exhausted limit")
	require.Equal(t, OVER, r.Statuses[0].Code)
}

func TestHeaders(t *testing.T) {
	e := newEnv(t, hitsYAML, envOpts{})
	hdr := func(r *rlsv3.RateLimitResponse) map[string]string {
		m := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			m[h.Key] = h.Value
		}
		return m
	}
	e.now.Add(17_000_000) // 43 s to the end of the minute
	r := e.call(t, "d", d("k", "a"), d("j", "b"))
	e.call(t, "d", d("j", "b"))
	r = e.call(t, "d", d("k", "a"), d("j", "b"))
	// Every enforced descriptor is one item of both fields, named by its
	// descriptor in the configuration; X-RateLimit-* is the one with the
	// fewest remaining.
	require.Equal(t, map[string]string{
		"ratelimit-policy":      `"k";q=10;w=60, "j";q=10;w=60`,
		"ratelimit":             `"k";r=8;t=43, "j";r=7;t=43`,
		"x-ratelimit-limit":     "10",
		"x-ratelimit-remaining": "7",
		"x-ratelimit-reset":     "43",
	}, hdr(r), "the descriptor with the fewest remaining")
	for range 7 {
		e.call(t, "d", d("j", "b"))
	}
	r = e.call(t, "d", d("k", "a"), d("j", "b"))
	require.Equal(t, OVER, r.OverallCode)
	require.Equal(t, "43", hdr(r)["retry-after"])
	// The denying one first; k, checked and not charged, says what it has
	// and not when more comes back (its check decided a state with the
	// cost taken).
	require.Equal(t, `"j";r=0;t=43, "k";r=8`, hdr(r)["ratelimit"])
	require.Equal(t, `"k";q=10;w=60, "j";q=10;w=60`, hdr(r)["ratelimit-policy"])
	require.Equal(t, []rlsv3.RateLimitResponse_Code{OK, OVER}, []rlsv3.RateLimitResponse_Code{r.Statuses[0].Code, r.Statuses[1].Code})
	require.Equal(t, uint32(8), r.Statuses[0].LimitRemaining, "k was not charged")
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t, hitsYAML, envOpts{})
	neg := d("k", "a")
	neg.IsNegativeHits = true
	over := d("k", "a")
	over.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5}
	many := make([]*commonv3.RateLimitDescriptor, DefaultMaxDescriptors+1)
	for i := range many {
		many[i] = d("k", "a")
	}
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"no domain":      {Descriptors: []*commonv3.RateLimitDescriptor{d("k", "a")}},
		"no descriptors": {Domain: "d"},
		"no entries":     {Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{{}}},
		"negative hits":  {Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{neg}},
		"limit override": {Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{over}},
		"too many":       {Domain: "d", Descriptors: many},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.client.ShouldRateLimit(context.Background(), req)
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		})
	}
	// An unknown domain limits nothing, as in envoyproxy/ratelimit.
	r := e.call(t, "nope", d("k", "a"))
	require.Equal(t, OK, r.OverallCode)
	// Values of any bytes are keys of their own.
	require.Equal(t, 10, e.admitted(t, 11, "d", d("k", "a b|c=d%\x00é")))
	require.Equal(t, 10, e.admitted(t, 11, "d", d("k", "a b|c=d%\x00")))
}

func TestDescriptorKey(t *testing.T) {
	k := func(kv ...string) string { return descriptorKey(d(kv...).Entries, nil, 256) }
	require.Equal(t, "a=1|b=2", k("a", "1", "b", "2"))
	require.NotEqual(t, k("a", "1|b=2"), k("a", "1", "b", "2"))
	require.Equal(t, "a=x%20y%25%7C%3D", k("a", "x y%|="))
	long := k("a", string(make([]byte, 300)))
	require.Len(t, long, len("sha256:")+64)
}

func TestAuth(t *testing.T) {
	const token = "0123456789abcdef0123"
	// sha256 of the token.
	e := newEnv(t, hitsYAML, envOpts{opts: Options{Trusted: false},
		mainYAML: `{api_tokens: [{name: envoy, role: check, sha256: 1bd8fd47297046f993e608e398d5905b00a33e163c6b1172dd38887fed05ed6a}], rules: [{name: api, strategy: fixed, limit: 1, window: 1s}]}`})
	_, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{d("k", "a")}})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer wrong-token-0000000")
	_, err = e.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{d("k", "a")}})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	ctx = metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	r, err := e.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{d("k", "a")}})
	require.NoError(t, err)
	require.Equal(t, OK, r.OverallCode)

	_, err = CheckListen("0.0.0.0:8082", false)
	require.ErrorContains(t, err, "api_tokens")
	trusted, err := CheckListen("127.0.0.1:8082", false)
	require.NoError(t, err)
	require.True(t, trusted)
	trusted, err = CheckListen("10.0.0.1:8082", true)
	require.NoError(t, err)
	require.False(t, trusted)
}

func TestStoreFailure(t *testing.T) {
	f := fakestore.New(t, fakestore.Config{})
	e := newEnv(t, `
domain: d
descriptors:
  - key: open
    rate_limit: {unit: minute, requests_per_unit: 10, fail_open: true}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 10}
`, envOpts{store: f})
	set := f.Fail
	ctx := context.Background()
	req := func(k string) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{d(k, "x")}}
	}

	set(fmt.Errorf("connection refused: %w", store.ErrUnavailable))
	r, err := e.client.ShouldRateLimit(ctx, req("open"))
	require.NoError(t, err)
	require.Equal(t, OK, r.OverallCode, "an outage, fail_open")
	_, err = e.client.ShouldRateLimit(ctx, req("closed"))
	require.Equal(t, codes.Unavailable, status.Code(err), "an outage, fail closed: Envoy's failure_mode_deny decides")

	set(fmt.Errorf("pool exhausted: %w", store.ErrBusy))
	for _, k := range []string{"open", "closed"} {
		r, err = e.client.ShouldRateLimit(ctx, req(k))
		require.NoError(t, err)
		require.Equal(t, OVER, r.OverallCode, "load is never admitted, fail_open or not")
		require.Equal(t, []*corev3.HeaderValue{{Key: "retry-after", Value: "1"}}, r.ResponseHeadersToAdd)
	}
	set(errors.New("some failure that is not an outage"))
	r, err = e.client.ShouldRateLimit(ctx, req("open"))
	require.NoError(t, err)
	require.Equal(t, OVER, r.OverallCode)
	// A corrupt state is no outage either (the one failure rule,
	// outage.Class): before, the service's copy of the rule answered it
	// by the fail policy, admitting on a fail_open limit.
	set(fmt.Errorf("rl: %q: %w", "k", core.ErrState))
	r, err = e.client.ShouldRateLimit(ctx, req("open"))
	require.NoError(t, err)
	require.Equal(t, OVER, r.OverallCode, "a corrupt state is never admitted, fail_open or not")

	f.Fail(nil)
	require.Equal(t, 10, e.admitted(t, 11, "d", d("open", "x")), "nothing was charged while the store failed")
}

// 64 concurrent streams on one connection, one hot descriptor: exactly the
// limit is admitted, for every algorithm, over memory and PostgreSQL.
func TestExactHotDescriptor(t *testing.T) {
	stores := map[string]func(t *testing.T) store.Store{
		"memory": func(t *testing.T) store.Store {
			m := memstore.New(nil)
			t.Cleanup(func() { m.Close() })
			return m
		},
		"postgres": func(t *testing.T) store.Store {
			url := pgtest.NewMigrated(t)
			s, err := pgstore.New(pgtest.Pool(t, url), pgstore.Config{})
			require.NoError(t, err)
			return s
		},
		"postgres_batched": func(t *testing.T) store.Store {
			url := pgtest.NewMigrated(t)
			s, err := pgstore.NewBatched(pgtest.Pool(t, url), pgstore.Config{}, pgstore.BatchConfig{})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	for _, sname := range []string{"memory", "postgres", "postgres_batched"} {
		t.Run("store="+sname, func(t *testing.T) {
			st := stores[sname](t)
			for _, alg := range []string{"fixed", "sliding", "sliding_log", "token", "leaky", "gcra"} {
				t.Run("alg="+alg, func(t *testing.T) {
					const limit, streams, each = 300, 64, 8
					e := newEnv(t, fmt.Sprintf(`
domain: hot_%s
descriptors:
  - key: k
    rate_limit: {unit: day, requests_per_unit: %d, algorithm: %s}
  - key: j
    rate_limit: {unit: day, requests_per_unit: 100000}
`, alg, limit, alg), envOpts{store: st})
					var ok atomic.Int64
					var wg sync.WaitGroup
					for g := range streams {
						wg.Go(func() {
							for range each {
								// Two descriptors, all or nothing: the cold
								// one is charged exactly when the hot one is.
								r, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "hot_" + alg,
									Descriptors: []*commonv3.RateLimitDescriptor{d("k", "hot"), d("j", fmt.Sprint(g%4))}})
								if err != nil {
									t.Error(err)
									return
								}
								if r.OverallCode == OK {
									ok.Add(1)
								}
							}
						})
					}
					wg.Wait()
					require.Equal(t, int64(limit), ok.Load())
					var cold int64
					for g := range 4 {
						cold += 100000 - int64(e.call(t, "hot_"+alg, withCheck(d("j", fmt.Sprint(g)))).Statuses[0].LimitRemaining)
					}
					// The race of the two-phase step may only spend more
					// of the cold descriptors than was admitted, never less
					// (and no partial step happened unless counted).
					require.GreaterOrEqual(t, cold, int64(limit))
				})
			}
		})
	}
}

func withCheck(x *commonv3.RateLimitDescriptor) *commonv3.RateLimitDescriptor {
	x.HitsAddend = wrapperspb.UInt64(0)
	return x
}

// The documented race: a descriptor drained between the check and the take
// denies the request after an earlier descriptor was charged. It
// under-admits (that charge stays), never over-admits, and is counted.
func TestPartialRace(t *testing.T) {
	// Once armed, it spends b=1's whole quota from under the request
	// between its check and its take: the race of the two-phase step.
	var armed atomic.Bool
	dr := fakestore.New(t, fakestore.Config{Before: func(ctx context.Context, inner store.Store, req store.Request) error {
		if req.Op == store.Take && req.Key == "b=1" && armed.CompareAndSwap(true, false) {
			drain := req
			drain.Cost = req.Policy.Limits()[0].Limit
			_, _, err := inner.Decide(ctx, drain, nil)
			return err
		}
		return nil
	}})
	e := newEnv(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 10}
`, envOpts{store: dr})
	armed.Store(true)
	r := e.call(t, "d", d("a", "1"), d("b", "1"))
	require.Equal(t, OVER, r.OverallCode)
	require.Equal(t, OK, r.Statuses[0].Code)
	require.Equal(t, uint32(9), r.Statuses[0].LimitRemaining, "a was charged before b's take was denied")
	require.Equal(t, OVER, r.Statuses[1].Code)
	require.Equal(t, uint32(9), e.call(t, "d", withCheck(d("a", "1"))).Statuses[0].LimitRemaining)
	var pm dto.Metric
	require.NoError(t, e.srv.m.partial.WithLabelValues("d").Write(&pm))
	require.Equal(t, float64(1), pm.GetCounter().GetValue())
}
