package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/httplimit"
	"github.com/rlcore/rl/internal/testkit/hangup"
)

// bigUpstream answers every request with the actual cost 900 in
// X-Tokens-Used, then a body of size bytes.
func bigUpstream(t *testing.T, size int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", "900")
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		chunk := make([]byte, 64<<10)
		for n := size; n > 0; n -= int64(len(chunk)) {
			if _, err := w.Write(chunk[:min(n, int64(len(chunk)))]); err != nil {
				return // the proxy went away with its client
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// waitSettle waits for a settle reported on settles.
func waitSettle(t *testing.T, settles <-chan httplimit.Settlement) httplimit.Settlement {
	t.Helper()
	select {
	case s := <-settles:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no settle reported")
	}
	return httplimit.Settlement{}
}

// TestResponseCostClientHangsUp: a client of a reverse proxy
// (httputil.ReverseProxy) that resets its connection in the middle of a
// large body, after the upstream reported the actual cost in its header,
// is settled the actual cost all the same: the proxy panics with
// http.ErrAbortHandler, which used to skip the settle, so that hanging up
// paid the estimate (100 of a 1000-an-hour limit, not 900), again and
// again. The panic goes on to net/http as it was.
func TestResponseCostClientHangsUp(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Name: "hourly", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Hour})
	lim, err := rl.New(rl.Config{Policy: p, Clock: func() int64 { return t0 }})
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	settles := make(chan httplimit.Settlement, 1)
	mw, err := httplimit.New(httplimit.Config{
		Limiter:      lim,
		Key:          httplimit.Header("X-User"),
		Cost:         func(*http.Request) (int64, error) { return 100, nil },
		ResponseCost: httplimit.ResponseCost{Field: "X-Tokens-Used"},
		OnSettle:     func(r *http.Request, s httplimit.Settlement) { settles <- s },
	})
	require.NoError(t, err)
	up, err := url.Parse(bigUpstream(t, 20<<20).URL)
	require.NoError(t, err)
	proxy := mw(httputil.NewSingleHostReverseProxy(up))
	panics := make(chan any, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				panics <- v
				panic(v)
			}
		}()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	for i, read := range []int64{200 << 10, 10 << 20, 15 << 20} {
		user := "u" + strconv.Itoa(i)
		resp := hangup.Get(t, srv.Listener.Addr().String(), "/", read, "X-User", user)
		require.Equal(t, 200, resp.StatusCode)
		require.Empty(t, resp.Header.Values("X-Tokens-Used"), "the field never reaches the client")
		select {
		case v := <-panics:
			require.Equal(t, http.ErrAbortHandler, v, "the proxy's panic goes on as it was")
		case <-time.After(30 * time.Second):
			t.Fatalf("read %d: the proxy never noticed the client was gone", read)
		}
		s := waitSettle(t, settles)
		require.NoError(t, s.Err)
		require.Equal(t, user, s.Key)
		require.Equal(t, int64(100), s.Estimate)
		require.Equal(t, int64(900), s.Actual)
		state, err := lim.Peek(context.Background(), user, 0)
		require.NoError(t, err)
		require.Equal(t, int64(100), state.Remaining, "read %d bytes, then hung up: 900 used, not the estimate", read)
	}
}

// TestResponseCostHandlerPanics: a handler that panics after its
// response reported the actual cost (as a header written, or set in the
// header map) is settled, and the panic then goes on with the same value;
// one that panics before is reported as a settle that could not run
// (ErrAborted, to OnSettle and OnError), the estimate standing.
func TestResponseCostHandlerPanics(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Name: "hourly", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Hour})
	boom := &struct{ msg string }{"boom"}
	for _, c := range []struct {
		name      string
		handler   http.HandlerFunc
		actual    int64 // the settle's Actual
		aborted   bool  // reported as ErrAborted
		remaining int64
	}{
		{name: "after the header was written", actual: 900, remaining: 100, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Tokens-Used", "900")
			w.Write([]byte("part of the body"))
			panic(boom)
		}},
		{name: "after the field was set, before the header was written", actual: 400, remaining: 600, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Tokens-Used", "400")
			panic(boom)
		}},
		{name: "after the cost was reported equal to the estimate", actual: 100, remaining: 900, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Tokens-Used", "100")
			w.WriteHeader(200)
			panic(boom)
		}},
		{name: "after a trailer", actual: 30, remaining: 970, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("the body"))
			w.Header().Set(http.TrailerPrefix+"X-Tokens-Used", "30")
			panic(boom)
		}},
		{name: "before the cost was known", aborted: true, remaining: 900, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("part of the body"))
			panic(boom)
		}},
		{name: "the client went away before the cost was known", aborted: true, remaining: 900, handler: func(w http.ResponseWriter, r *http.Request) {
			panic(http.ErrAbortHandler)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			lim, err := rl.New(rl.Config{Policy: p, Clock: func() int64 { return t0 }})
			require.NoError(t, err)
			t.Cleanup(func() { lim.Close() })
			settles := make(chan httplimit.Settlement, 1)
			errs := make(chan error, 1)
			mw, err := httplimit.New(httplimit.Config{
				Limiter:      lim,
				Key:          httplimit.Header("X-User"),
				Cost:         func(*http.Request) (int64, error) { return 100, nil },
				ResponseCost: httplimit.ResponseCost{Field: "X-Tokens-Used"},
				OnSettle:     func(r *http.Request, s httplimit.Settlement) { settles <- s },
				OnError:      func(r *http.Request, err error) { errs <- err },
			})
			require.NoError(t, err)
			h := mw(c.handler)
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("X-User", "u")
			var got any
			func() {
				defer func() { got = recover() }()
				h.ServeHTTP(httptest.NewRecorder(), req)
			}()
			want := any(boom)
			if c.aborted && c.name != "before the cost was known" {
				want = http.ErrAbortHandler
			}
			require.Same(t, want, got, "the panic goes on with the same value")

			s := waitSettle(t, settles)
			require.Equal(t, "u", s.Key)
			require.Equal(t, int64(100), s.Estimate)
			if c.aborted {
				require.ErrorIs(t, s.Err, httplimit.ErrAborted)
				require.ErrorIs(t, <-errs, httplimit.ErrAborted)
				require.Zero(t, s.Result)
			} else {
				require.NoError(t, s.Err)
				require.Equal(t, c.actual, s.Actual)
				select {
				case err := <-errs:
					t.Fatalf("an error reported: %v", err)
				default:
				}
			}
			state, err := lim.Peek(context.Background(), "u", 0)
			require.NoError(t, err)
			require.Equal(t, c.remaining, state.Remaining)
		})
	}
}

// TestResponseCostPanicInOnSettle: a settle hook that panics once the
// handler has returned is not taken for the handler's panic: the request
// is settled once.
func TestResponseCostPanicInOnSettle(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Name: "hourly", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Hour})
	lim, err := rl.New(rl.Config{Policy: p, Clock: func() int64 { return t0 }})
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	var calls int
	hookErr := errors.New("hook")
	mw, err := httplimit.New(httplimit.Config{
		Limiter:      lim,
		Key:          httplimit.Header("X-User"),
		Cost:         func(*http.Request) (int64, error) { return 100, nil },
		ResponseCost: httplimit.ResponseCost{Field: "X-Tokens-Used"},
		OnSettle: func(r *http.Request, s httplimit.Settlement) {
			calls++
			panic(hookErr)
		},
	})
	require.NoError(t, err)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", "100") // the estimate: settled at once, in the handler's goroutine
		io.WriteString(w, "body")
	}))
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-User", "u")
	var got any
	func() {
		defer func() { got = recover() }()
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	require.Equal(t, hookErr, got)
	require.Equal(t, 1, calls, "one settle")
}
