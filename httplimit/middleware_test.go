package httplimit_test

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/httplimit"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/testkit/fakestore"
	"github.com/rlcore/rl/store"
)

const t0 = int64(1_767_225_600_000_000)

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })

func setup(t *testing.T, cfg httplimit.Config, p *rl.Policy) (http.Handler, *atomic.Int64) {
	now := &atomic.Int64{}
	now.Store(t0 + 10_000_000) // 10 s into a minute
	if cfg.Limiter == nil {
		l, err := rl.New(rl.Config{Policy: p, Clock: now.Load})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		cfg.Limiter = l
	}
	if cfg.Key == nil {
		cfg.Key = httplimit.ClientIP()
	}
	mw, err := httplimit.New(cfg)
	require.NoError(t, err)
	return mw(ok), now
}

func get(h http.Handler, mod func(*http.Request)) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/x", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	if mod != nil {
		mod(r)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestHeadersAndDenial(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Name: "minute", Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute})
	h, now := setup(t, httplimit.Config{}, p)
	w := get(h, nil)
	require.Equal(t, 200, w.Code)
	require.Equal(t, `"minute";q=2;w=60`, w.Header().Get("RateLimit-Policy"))
	require.Equal(t, `"minute";r=1;t=50`, w.Header().Get("RateLimit"))
	require.Equal(t, "2", w.Header().Get("X-RateLimit-Limit"))
	require.Equal(t, "1", w.Header().Get("X-RateLimit-Remaining"))
	require.Equal(t, "50", w.Header().Get("X-RateLimit-Reset"))
	require.Empty(t, w.Header().Get("Retry-After"))
	get(h, nil)
	now.Add(300_000) // 0.3 s later: 49.7 s to the window's end
	w = get(h, nil)
	require.Equal(t, 429, w.Code)
	require.Equal(t, "Rate limit exceeded\n", w.Body.String())
	require.Equal(t, "50", w.Header().Get("Retry-After"), "rounded up, never early")
	require.Equal(t, `"minute";r=0;t=50`, w.Header().Get("RateLimit"))
	// Another client is unaffected.
	require.Equal(t, 200, get(h, func(r *http.Request) { r.RemoteAddr = "192.0.2.2:1" }).Code)
	// Retrying at Retry-After succeeds.
	now.Add(50_000_000)
	require.Equal(t, 200, get(h, nil).Code)
}

func TestDenialDescribesTheDenyingLimit(t *testing.T) {
	p := rl.MustPolicy(
		rl.Limit{Name: "burst", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second},
		rl.Limit{Name: "daily", Algorithm: core.FixedWindow, Limit: 3, Window: 24 * time.Hour},
	)
	h, _ := setup(t, httplimit.Config{}, p)
	for range 3 {
		require.Equal(t, 200, get(h, nil).Code)
	}
	w := get(h, nil)
	require.Equal(t, 429, w.Code)
	require.Contains(t, w.Header().Get("RateLimit-Policy"), `"daily";q=3;w=86400`)
	require.Equal(t, "3", w.Header().Get("X-RateLimit-Limit"))
}

func TestCostAndNever(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second})
	h, _ := setup(t, httplimit.Config{Cost: func(r *http.Request) (int64, error) {
		var n int64
		fmt.Sscan(r.URL.Query().Get("n"), &n)
		return n, nil
	}}, p)
	require.Equal(t, 200, get(h, func(r *http.Request) { r.URL.RawQuery = "n=10" }).Code)
	w := get(h, func(r *http.Request) { r.URL.RawQuery = "n=11" })
	require.Equal(t, 429, w.Code)
	require.Empty(t, w.Header().Get("Retry-After"), "no retry can pass")
	require.Contains(t, w.Body.String(), "exceeds the limit")
}

// down returns a store that is down.
func down(t testing.TB) store.Store {
	s := fakestore.New(t, fakestore.Config{})
	s.Fail(fmt.Errorf("connect: %w", store.ErrUnavailable))
	return s
}

func TestFailOpenAndClosed(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second})
	l, err := rl.New(rl.Config{Policy: p, Store: down(t)})
	require.NoError(t, err)
	var errs atomic.Int64
	hook := func(r *http.Request, err error) {
		if errors.Is(err, rl.ErrStore) {
			errs.Add(1)
		}
	}
	closed, _ := setup(t, httplimit.Config{Limiter: l, OnError: hook}, nil)
	require.Equal(t, 503, get(closed, nil).Code)
	open, _ := setup(t, httplimit.Config{Limiter: l, OnError: hook, FailOpen: true}, nil)
	require.Equal(t, 200, get(open, nil).Code)
	require.Equal(t, int64(2), errs.Load())
}

func TestKeys(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	key := httplimit.ClientIP(trusted...)
	for _, c := range []struct{ remote, xff, want string }{
		{"192.0.2.1:5", "", "192.0.2.1"},
		{"192.0.2.1:5", "203.0.113.9", "192.0.2.1"},                          // untrusted peer: XFF ignored
		{"10.0.0.1:5", "203.0.113.9", "203.0.113.9"},                         // trusted proxy
		{"10.0.0.1:5", "198.51.100.1, 203.0.113.9, 10.1.1.1", "203.0.113.9"}, // rightmost untrusted
		{"10.0.0.1:5", "garbage", "10.0.0.1"},
		{"[::ffff:192.0.2.3]:5", "", "192.0.2.3"},
		{"[2001:db8::1]:5", "", "2001:db8::/64"}, // IPv6 by /64
		{"[2001:db8::1:2:3:4]:5", "", "2001:db8::/64"},
		{"[2001:db8:0:1::1]:5", "", "2001:db8:0:1::/64"},
		{"[fe80::1%eth0]:5", "", "fe80::/64"},                    // the zone is dropped
		{"10.0.0.1:5", "2001:db8::9", "2001:db8::/64"},           // from X-Forwarded-For too
		{"10.0.0.1:5", "fe80::1%25x, 10.2.2.2", "fe80::/64"},     // a zone in X-Forwarded-For
		{"10.0.0.1:5", "::ffff:203.0.113.7", "203.0.113.7"},      // IPv4-mapped is IPv4
		{"[::ffff:10.0.0.1]:5", "203.0.113.9", "203.0.113.9"},    // a mapped trusted proxy is trusted
		{"[::ffff:10.0.0.1%z]:5", "::ffff:10.9.9.9", "10.9.9.9"}, // all trusted: the leftmost
		{"[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]:5", "", "2001:db8:ffff:ffff::/64"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		got, err := key(r)
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%+v", c)
	}
	r := httptest.NewRequest("GET", "/?k=q1", nil)
	r.Header.Set("Authorization", "Bearer tok123")
	r.Header.Set("X-Tenant", "acme")
	got, _ := httplimit.APIKey()(r)
	require.Equal(t, pipeline.APIKeyDigest("tok123"), got, "the token's digest, never the token")
	got, _ = httplimit.Header("X-Tenant")(r)
	require.Equal(t, "acme", got)
	got, _ = httplimit.Query("k")(r)
	require.Equal(t, "q1", got)
	_, err := httplimit.Header("X-None")(r)
	require.ErrorIs(t, err, httplimit.ErrNoKey)
}

func TestMissingAndInvalidKeys(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second})
	h, _ := setup(t, httplimit.Config{Key: httplimit.Header("X-User")}, p)
	require.Equal(t, 400, get(h, nil).Code)
	require.Equal(t, 400, get(h, func(r *http.Request) { r.Header.Set("X-User", "has space") }).Code)
	lenient, _ := setup(t, httplimit.Config{Key: httplimit.Header("X-User"), AllowMissingKey: true}, p)
	require.Equal(t, 200, get(lenient, nil).Code)
}

func TestPolicyPerRoute(t *testing.T) {
	strict := rl.MustPolicy(rl.Limit{Name: "login", Algorithm: core.SlidingLog, Limit: 1, Window: time.Minute})
	p := rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 100, Window: time.Second})
	h, _ := setup(t, httplimit.Config{Policy: func(r *http.Request) *rl.Policy {
		if r.URL.Path == "/login" {
			return strict
		}
		return nil
	}}, p)
	login := func(r *http.Request) { r.URL.Path = "/login" }
	require.Equal(t, 200, get(h, login).Code)
	require.Equal(t, 429, get(h, login).Code)
	require.Equal(t, 200, get(h, nil).Code)
}

func TestWaitShapes(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.LeakyBucket, Limit: 5, Window: 100 * time.Millisecond})
	l, err := rl.New(rl.Config{Policy: p, Clock: rl.SystemClock})
	require.NoError(t, err)
	defer l.Close()
	h, _ := setup(t, httplimit.Config{Limiter: l, Wait: true}, nil)
	start := time.Now()
	for range 3 {
		require.Equal(t, 200, get(h, nil).Code)
	}
	// The third request waited for two 20 ms leaks (timing only bounded below).
	require.GreaterOrEqual(t, time.Since(start), 35*time.Millisecond)
}

func TestClientIPPrefixes(t *testing.T) {
	key := func(cfg httplimit.IPKeyConfig, remote string) string {
		t.Helper()
		f, err := httplimit.ClientIPKey(cfg)
		require.NoError(t, err)
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		k, err := f(r)
		require.NoError(t, err)
		return k
	}
	for _, c := range []struct {
		v4, v6       int
		remote, want string
	}{
		{0, 0, "192.0.2.1:1", "192.0.2.1"},
		{32, 64, "192.0.2.1:1", "192.0.2.1"},
		{24, 0, "192.0.2.77:1", "192.0.2.0/24"},
		{1, 0, "192.0.2.77:1", "128.0.0.0/1"},
		{24, 0, "[::ffff:192.0.2.77]:1", "192.0.2.0/24"},
		{0, 128, "[2001:db8::1]:1", "2001:db8::1"},
		{0, 128, "[fe80::1%eth0]:1", "fe80::1"},
		{0, 48, "[2001:db8:1:2:3::1]:1", "2001:db8:1::/48"},
		{0, 56, "[2001:db8:1:2ff::1]:1", "2001:db8:1:200::/56"},
	} {
		require.Equal(t, c.want, key(httplimit.IPKeyConfig{IPv4Prefix: c.v4, IPv6Prefix: c.v6}, c.remote), "%+v", c)
	}
	for _, bad := range []httplimit.IPKeyConfig{{IPv4Prefix: -1}, {IPv4Prefix: 33}, {IPv6Prefix: -1}, {IPv6Prefix: 129}} {
		_, err := httplimit.ClientIPKey(bad)
		require.Error(t, err, "%+v", bad)
	}
}

// One IPv6 host holds a /64: every address in it is the same client, so a
// per-IP limit cannot be walked around by changing the low 64 bits.
func TestIPv6ClientsShareTheirSlash64(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute})
	h, _ := setup(t, httplimit.Config{}, p)
	from := func(a string) func(*http.Request) { return func(r *http.Request) { r.RemoteAddr = "[" + a + "]:443" } }
	require.Equal(t, 200, get(h, from("2001:db8:1:2::1")).Code)
	require.Equal(t, 200, get(h, from("2001:db8:1:2::2")).Code)
	for _, a := range []string{"2001:db8:1:2::3", "2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::1%eth1"} {
		require.Equal(t, 429, get(h, from(a)).Code, a)
	}
	require.Equal(t, 200, get(h, from("2001:db8:1:3::1")).Code, "the next /64 is another client")
	// Zones never make fresh keys.
	require.Equal(t, 200, get(h, from("fe80::1%eth0")).Code)
	require.Equal(t, 200, get(h, from("fe80::2%eth1")).Code)
	require.Equal(t, 429, get(h, from("fe80::3%x")).Code)
}

// Durations near the largest time.Duration saturate: the header fields
// never wrap to a negative number or fall back to an early "1".
func TestHeadersSaturate(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{math.MaxInt64, "9223372037"}, // ⌈math.MaxInt64 ns / 1 s⌉
		{math.MaxInt64 - 1, "9223372037"},
		{math.MaxInt64 - 500*time.Millisecond, "9223372037"},
		{math.MaxInt64 - time.Second + 2, "9223372036"}, // d + 1s - 1 overflows from here up
	} {
		h := http.Header{}
		httplimit.SetHeaders(h, rl.Result{LimitResult: rl.LimitResult{Name: "y", Limit: 1000, Window: 365 * 24 * time.Hour,
			ResetAfter: c.d, RetryAfter: c.d, NextAfter: c.d}})
		require.Equal(t, c.want, h.Get("Retry-After"), c.d)
		require.Equal(t, c.want, h.Get("X-RateLimit-Reset"), c.d)
		require.Equal(t, `"y";r=0;t=`+c.want, h.Get("RateLimit"), c.d)
		require.Equal(t, `"y";q=1000;w=31536000`, h.Get("RateLimit-Policy"))
	}
	// A whole number of seconds is not rounded up; a nanosecond more is.
	h := http.Header{}
	httplimit.SetHeaders(h, rl.Result{LimitResult: rl.LimitResult{RetryAfter: 3 * time.Second, ResetAfter: 3*time.Second + 1}})
	require.Equal(t, "3", h.Get("Retry-After"))
	require.Equal(t, "4", h.Get("X-RateLimit-Reset"))
}

// The limit of the issue: a burst of 1000 refilled at 1 per 365 days. A
// request for the whole burst after it is spent waits 1000 years, beyond
// what time.Duration holds: Retry-After must be huge and positive.
func TestRetryAfterOfAVerySlowLimit(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Name: "yearly", Algorithm: core.TokenBucket, Limit: 1000, Window: 365 * 24 * time.Hour, Rate: 1})
	h, _ := setup(t, httplimit.Config{Cost: func(*http.Request) (int64, error) { return 1000, nil }}, p)
	w := get(h, nil)
	require.Equal(t, 200, w.Code)
	reset, err := strconv.ParseInt(w.Header().Get("X-RateLimit-Reset"), 10, 64)
	require.NoError(t, err)
	require.Greater(t, reset, int64(250*365*24*3600), "1000 years, saturated at about 292")
	w = get(h, nil)
	require.Equal(t, 429, w.Code)
	retry, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
	require.NoError(t, err)
	require.Greater(t, retry, int64(250*365*24*3600), "Retry-After %q", w.Header().Get("Retry-After"))
}

// BenchmarkMiddleware measures an admitted request through the middleware,
// without and with OnDecision or FailOpen (compare them within one run).
func BenchmarkMiddleware(b *testing.B) {
	p := rl.MustPolicy(rl.Limit{Name: "s", Algorithm: core.TokenBucket, Limit: 1 << 40, Window: time.Second})
	for _, c := range []struct {
		name string
		cfg  httplimit.Config
	}{
		{"hooks=none", httplimit.Config{}},
		{"hooks=OnDecision", httplimit.Config{OnDecision: func(*http.Request, httplimit.Decision) {}}},
		{"FailOpen", httplimit.Config{FailOpen: true}}, // the outage detector's cost
	} {
		b.Run(c.name, func(b *testing.B) {
			l, err := rl.New(rl.Config{Policy: p})
			require.NoError(b, err)
			defer l.Close()
			c.cfg.Limiter, c.cfg.Key = l, httplimit.ClientIP()
			mw, err := httplimit.New(c.cfg)
			require.NoError(b, err)
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequest("GET", "/x", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			w := discard{http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}

// discard is a ResponseWriter that keeps only its header map.
type discard struct{ h http.Header }

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(p []byte) (int, error) { return len(p), nil }
func (d discard) WriteHeader(int)             {}
