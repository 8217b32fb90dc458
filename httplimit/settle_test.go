package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/httplimit"
	"github.com/rlcore/rl/internal/testkit/await"
)

// costHandler answers as a handler reporting its actual cost does: in
// the field as a header, as a declared trailer, as a trailer written with
// http.TrailerPrefix, or in several of them.
func costHandler(how, value string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		switch how {
		case "header":
			h.Set("X-Cost-Actual", value)
		case "header, nothing written":
			h.Set("X-Cost-Actual", value)
			return
		case "trailer":
			h.Set("Trailer", "X-Other, x-cost-actual")
		case "header and trailer":
			h.Set("X-Cost-Actual", value)
			h.Set("Trailer", "X-Cost-Actual")
		case "interim, then header":
			h.Set("X-Cost-Actual", value)
			h.Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		}
		w.Write([]byte("partial "))
		http.NewResponseController(w).Flush() // a streamed body
		w.Write([]byte("body"))
		switch how {
		case "trailer", "header and trailer":
			h.Set("X-Cost-Actual", value)
			h.Set("X-Other", "kept")
		case "trailer prefix":
			h.Set(http.TrailerPrefix+"X-Cost-Actual", value)
		}
	})
}

// TestResponseCost: an admitted request is charged its estimate, and the
// actual cost its response reports, in a header or a trailer, is settled
// after the handler: a debt denies the next request for exactly as long as
// it takes to pay off, a refund gives units back; a response without the
// field, or with an invalid one, settles nothing. The field never reaches
// the client.
func TestResponseCost(t *testing.T) {
	// A token bucket of 3, one token back a second: a fresh key has 3.
	p := rl.MustPolicy(rl.Limit{Name: "tokens", Algorithm: core.TokenBucket, Limit: 3, Window: time.Second, Rate: 1})
	for _, c := range []struct {
		name, how, value string
		estimate         int64 // the request's cost (X-Cost), 1 by default
		min              int64
		settled          bool   // a store call settled actual − estimate
		invalid          bool   // reported as ErrResponseCost, nothing settled
		remaining        int64  // after the request and its settle
		retryAfter       string // of the next request of cost 1, if denied
	}{
		{name: "debt from a header", how: "header", value: "6", settled: true, retryAfter: "4"},
		{name: "a header of a handler that wrote nothing", how: "header, nothing written", value: "6", settled: true, retryAfter: "4"},
		{name: "debt from a declared trailer", how: "trailer", value: "6", settled: true, retryAfter: "4"},
		{name: "debt from a TrailerPrefix trailer", how: "trailer prefix", value: "6", settled: true, retryAfter: "4"},
		{name: "after an interim response", how: "interim, then header", value: "4", settled: true, retryAfter: "2"},
		{name: "exactly at the limit", how: "trailer", value: "3", settled: true, retryAfter: "1"},
		{name: "a refund", how: "header", value: "1", estimate: 3, settled: true, remaining: 2},
		{name: "a refund of everything", how: "trailer", value: "0", estimate: 3, settled: true, remaining: 3},
		{name: "a refund stops at Min", how: "header", value: "0", estimate: 3, min: 1, settled: true, remaining: 2},
		{name: "Min is the estimate: no store call", how: "header", value: "0", min: 1, remaining: 2},
		{name: "the estimate was right: no store call", how: "trailer", value: "1", remaining: 2},
		{name: "no field: the estimate stands", how: "none", remaining: 2},
		{name: "a fraction is invalid", how: "header", value: "1.5", invalid: true, remaining: 2},
		{name: "a sign is invalid", how: "trailer", value: "-1", invalid: true, remaining: 2},
		{name: "an exponent is invalid", how: "header", value: "1e3", invalid: true, remaining: 2},
		{name: "a header and a trailer are given twice", how: "header and trailer", value: "5", invalid: true, remaining: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := &atomic.Int64{}
			now.Store(t0)
			lim, err := rl.New(rl.Config{Policy: p, Clock: now.Load})
			require.NoError(t, err)
			t.Cleanup(func() { lim.Close() })
			settles := make(chan httplimit.Settlement, 1)
			var errs []error
			mw, err := httplimit.New(httplimit.Config{
				Limiter: lim,
				Key:     httplimit.Header("X-User"),
				Cost: func(r *http.Request) (int64, error) {
					return strconv.ParseInt(cmpOr(r.Header.Get("X-Cost"), "1"), 10, 64)
				},
				ResponseCost: httplimit.ResponseCost{Field: "X-Cost-Actual", Min: c.min},
				OnSettle:     func(r *http.Request, s httplimit.Settlement) { settles <- s },
				OnError:      func(r *http.Request, err error) { errs = append(errs, err) },
			})
			require.NoError(t, err)
			srv := httptest.NewServer(mw(costHandler(c.how, c.value)))
			t.Cleanup(srv.Close)
			var interim []textproto.MIMEHeader
			trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				interim = append(interim, h)
				return nil
			}}
			send := func(cost int64) (*http.Response, string) {
				req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", srv.URL, nil)
				require.NoError(t, err)
				req.Header.Set("X-User", "u")
				req.Header.Set("X-Cost", strconv.FormatInt(cost, 10))
				resp, err := srv.Client().Do(req)
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body) // the trailers too
				require.NoError(t, err)
				resp.Body.Close()
				return resp, string(body)
			}
			estimate := max(c.estimate, 1)
			resp, body := send(estimate)
			require.Equal(t, 200, resp.StatusCode)
			if c.how != "header, nothing written" {
				require.Equal(t, "partial body", body)
			}
			require.Empty(t, resp.Header.Values("X-Cost-Actual"), "the field is the handler's message to the middleware")
			require.Empty(t, resp.Trailer.Values("X-Cost-Actual"))
			require.NotContains(t, resp.Header.Values("Trailer"), "X-Cost-Actual")
			if c.how == "interim, then header" {
				require.Len(t, interim, 1)
				require.Equal(t, "</a.css>; rel=preload", interim[0].Get("Link"))
				require.Empty(t, interim[0].Values("X-Cost-Actual"), "nor an interim response")
			}
			if c.how == "trailer" {
				require.Equal(t, "kept", resp.Trailer.Get("X-Other"), "other trailers are sent")
			}

			var s httplimit.Settlement
			if c.how != "none" {
				s = await.Recv(t, "the settle to be reported", settles)
			}
			require.Equal(t, "u", cmpOr(s.Key, "u"))
			switch {
			case c.invalid:
				require.ErrorIs(t, s.Err, httplimit.ErrResponseCost)
				require.Equal(t, []error{s.Err}, errs, "reported to OnError")
				require.Zero(t, s.Result)
			case c.settled:
				require.NoError(t, s.Err)
				require.True(t, s.Result.Allowed, "a settle never denies")
				require.Equal(t, estimate, s.Estimate)
				require.Empty(t, errs)
			case c.how != "none":
				require.NoError(t, s.Err)
				require.Zero(t, s.Result, "no store call")
			}
			select {
			case s := <-settles:
				t.Fatalf("a second settle: %+v", s)
			default:
			}

			// The key after the settle, as the next request of cost 1
			// finds it.
			state, err := lim.Peek(context.Background(), "u", 0)
			require.NoError(t, err)
			require.Equal(t, c.remaining, state.Remaining)
			peek, err := lim.Peek(context.Background(), "u", 1)
			require.NoError(t, err)
			if c.retryAfter == "" {
				require.True(t, peek.Allowed)
				return
			}
			resp, _ = send(1)
			require.Equal(t, 429, resp.StatusCode)
			require.Equal(t, c.retryAfter, resp.Header.Get("Retry-After"))
			n, _ := strconv.ParseInt(c.retryAfter, 10, 64)
			require.Equal(t, time.Duration(n)*time.Second, peek.RetryAfter, "exact: the debt is paid off at the token rate")
			now.Add(n*1_000_000 - 1)
			require.Equal(t, 429, func() int { r, _ := send(1); return r.StatusCode }(), "1 µs early")
			now.Add(1)
			require.Equal(t, 200, func() int { r, _ := send(1); return r.StatusCode }(), "at Retry-After")
		})
	}
}

// settleFailing fails every settle; decisions go to the limiter.
type settleFailing struct{ l *rl.Limiter }

func (f settleFailing) Do(ctx context.Context, req rl.Request) (rl.Result, error) {
	if req.Settle {
		return rl.Result{}, errStore
	}
	return f.l.Do(ctx, req)
}

// A settle that fails is reported to OnError and OnSettle; the response
// was served all the same. A denied request is not served, so nothing is
// settled for it.
func TestResponseCostFailures(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Name: "m", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute})
	lim, err := rl.New(rl.Config{Policy: p, Clock: func() int64 { return t0 }})
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	settles := make(chan httplimit.Settlement, 2)
	errs := make(chan error, 2)
	mw, err := httplimit.New(httplimit.Config{
		Limiter:      settleFailing{lim},
		Key:          httplimit.Header("X-User"),
		ResponseCost: httplimit.ResponseCost{Field: "X-Cost-Actual"},
		OnSettle:     func(r *http.Request, s httplimit.Settlement) { settles <- s },
		OnError:      func(r *http.Request, err error) { errs <- err },
	})
	require.NoError(t, err)
	h := mw(costHandler("header", "5"))
	w := get(h, func(r *http.Request) { r.Header.Set("X-User", "u") })
	require.Equal(t, 200, w.Code)
	require.Empty(t, w.Header().Values("X-Cost-Actual"))
	s := <-settles
	require.ErrorIs(t, s.Err, rl.ErrStore)
	require.Equal(t, int64(5), s.Actual)
	require.ErrorIs(t, <-errs, rl.ErrStore)

	w = get(h, func(r *http.Request) { r.Header.Set("X-User", "u") })
	require.Equal(t, 429, w.Code)
	// A negative check: load can only hide a settle that comes late,
	// never fail this one.
	select {
	case s := <-settles:
		t.Fatalf("a denied request settled: %+v", s)
	case <-time.After(50 * time.Millisecond):
	}
}

// A request served without a decision (the store down, FailOpen; no key,
// AllowMissingKey) took nothing and settles nothing, but the field is
// kept from the client all the same.
func TestResponseCostUndecided(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  httplimit.Config
		user string
	}{
		{"failed open", httplimit.Config{Limiter: failing{errDown}, FailOpen: true}, "u"},
		{"unkeyed", httplimit.Config{Limiter: failing{errDown}, AllowMissingKey: true}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			settled := false
			c.cfg.Key = httplimit.Header("X-User")
			c.cfg.ResponseCost = httplimit.ResponseCost{Field: "X-Cost-Actual"}
			c.cfg.OnSettle = func(*http.Request, httplimit.Settlement) { settled = true }
			mw, err := httplimit.New(c.cfg)
			require.NoError(t, err)
			w := get(mw(costHandler("header", "5")), func(r *http.Request) {
				if c.user != "" {
					r.Header.Set("X-User", c.user)
				}
			})
			require.Equal(t, 200, w.Code)
			require.Empty(t, w.Header().Values("X-Cost-Actual"))
			require.False(t, settled)
		})
	}
}

func TestResponseCostRefusedConfig(t *testing.T) {
	lim, err := rl.New(rl.Config{Policy: rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: time.Second})})
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	for _, rc := range []httplimit.ResponseCost{{Field: "X Cost"}, {Field: "X-Cost:"}, {Field: "X-Cost", Min: -1}, {Field: "X-Cost", Min: core.MaxCost + 1}} {
		_, err := httplimit.New(httplimit.Config{Limiter: lim, Key: httplimit.ClientIP(), ResponseCost: rc})
		require.Error(t, err, "%+v", rc)
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestResponseCostAboveMaxCost: an actual cost above 2^40, however long,
// is settled as 2^40 (pipeline.SettleDelta), never refused: refused, it
// would leave the estimate, and the largest costs would be the cheapest.
// Before, both were ErrResponseCost and the estimate stood.
func TestResponseCostAboveMaxCost(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Name: "bytes", Algorithm: core.FixedWindow, Limit: 1_000_000, Window: time.Hour})
	for _, value := range []string{"1099511627777", "99999999999999999999999999"} {
		lim, get := settleServer(t, p, costHandler("header", value))
		s := get()
		require.NoError(t, s.Err, value)
		require.Equal(t, int64(1), s.Estimate)
		require.Equal(t, core.MaxCost, s.Actual, value)
		peek, err := lim.Peek(context.Background(), "u", 1)
		require.NoError(t, err)
		require.False(t, peek.Allowed, "%s: settled as 2^40 of a million", value)
	}
}

// settleServer serves handler behind a middleware of p (key X-User,
// response cost X-Cost-Actual, min 1) that reports each settle on the
// channel it returns; get requests as user u and waits for the settle.
func settleServer(t *testing.T, p *rl.Policy, handler http.Handler) (lim *rl.Limiter, get func() httplimit.Settlement) {
	t.Helper()
	now := &atomic.Int64{}
	now.Store(t0)
	lim, err := rl.New(rl.Config{Policy: p, Clock: now.Load})
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	settles := make(chan httplimit.Settlement, 1)
	mw, err := httplimit.New(httplimit.Config{
		Limiter:      lim,
		Key:          httplimit.Header("X-User"),
		ResponseCost: httplimit.ResponseCost{Field: "X-Cost-Actual", Min: 1},
		OnSettle:     func(r *http.Request, s httplimit.Settlement) { settles <- s },
	})
	require.NoError(t, err)
	srv := httptest.NewServer(mw(handler))
	t.Cleanup(srv.Close)
	return lim, func() httplimit.Settlement {
		t.Helper()
		req, err := http.NewRequest("GET", srv.URL, nil)
		require.NoError(t, err)
		req.Header.Set("X-User", "u")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		return await.Recv(t, "the settle to be reported", settles)
	}
}

// TestResponseCostShadowCharged: the settle corrects the limits the take
// charged: a shadow limit that would have denied the request (and so was
// not charged) is not charged its actual cost either, while one that
// admitted it is settled with the enforced limit.
func TestResponseCostShadowCharged(t *testing.T) {
	p := rl.MustPolicy(
		rl.Limit{Name: "enforced", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Hour},
		rl.Limit{Name: "small", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour, Shadow: true},
		rl.Limit{Name: "large", Algorithm: core.FixedWindow, Limit: 500, Window: time.Hour, Shadow: true},
	)
	lim, get := settleServer(t, p, costHandler("header", "100"))
	for range 2 { // the second: small would deny
		require.NoError(t, get().Err)
	}
	each := make([]rl.LimitResult, 3)
	_, err := lim.Do(context.Background(), rl.Request{Key: "u", Cost: 0, Each: each})
	require.NoError(t, err)
	require.Equal(t, int64(1000-200), each[0].Remaining, "enforced: two requests of 100")
	require.Equal(t, int64(0), each[1].Remaining)
	require.Equal(t, int64(500-200), each[2].Remaining, "large: charged both times")
	peekSmall := rl.MustPolicy(rl.Limit{Name: "small", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Hour})
	r, err := lim.Do(context.Background(), rl.Request{Key: "u", Cost: 0, Policy: peekSmall})
	require.NoError(t, err)
	require.Equal(t, int64(1000-100), r.Remaining, "small: its first request's 100, not the second's, which it would have denied")
}
