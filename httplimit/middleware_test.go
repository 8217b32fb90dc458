package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/httplimit"
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
	h, _ := setup(t, httplimit.Config{Cost: func(r *http.Request) int64 {
		var n int64
		fmt.Sscan(r.URL.Query().Get("n"), &n)
		return n
	}}, p)
	require.Equal(t, 200, get(h, func(r *http.Request) { r.URL.RawQuery = "n=10" }).Code)
	w := get(h, func(r *http.Request) { r.URL.RawQuery = "n=11" })
	require.Equal(t, 429, w.Code)
	require.Empty(t, w.Header().Get("Retry-After"), "no retry can pass")
	require.Contains(t, w.Body.String(), "exceeds the limit")
}

type down struct{}

func (down) Decide(context.Context, store.Request, []core.Decision) (int, core.Decision, error) {
	return 0, core.Decision{}, fmt.Errorf("connect: %w", store.ErrUnavailable)
}
func (down) Reset(context.Context, string, string, []string) error { return store.ErrUnavailable }

func TestFailOpenAndClosed(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second})
	l, err := rl.New(rl.Config{Policy: p, Store: down{}})
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
		{"[2001:db8::1]:5", "", "2001:db8::1"},
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
	require.Equal(t, "tok123", got)
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
