package service

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/await"
)

// countingUpstream is an upstream that counts the connections it accepted.
type countingUpstream struct {
	*httptest.Server
	conns, closed atomic.Int64
}

func newCountingUpstream(t *testing.T, h http.HandlerFunc) *countingUpstream {
	u := &countingUpstream{}
	u.Server = httptest.NewUnstartedServer(h)
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			u.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			u.closed.Add(1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

func get(t *testing.T, rt http.RoundTripper, method, url string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp, string(b)
}

// TestTransportReuse: sequential requests share one connection, whatever
// the framing of the response (length, chunked, none for HEAD and 204).
func TestTransportReuse(t *testing.T) {
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			w.Write([]byte("a"))
			w.(http.Flusher).Flush()
			w.Write([]byte("b"))
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Content-Length", "2")
			w.Write([]byte("ok"))
		}
	})
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	for range 3 {
		_, body := get(t, tr, "GET", up.URL+"/")
		require.Equal(t, "ok", body)
		resp, body := get(t, tr, "GET", up.URL+"/chunked")
		require.Equal(t, "ab", body)
		require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
		resp, body = get(t, tr, "HEAD", up.URL+"/")
		require.Equal(t, "", body)
		require.Equal(t, int64(2), resp.ContentLength)
		resp, _ = get(t, tr, "OPTIONS", up.URL+"/empty")
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
	}
	require.Equal(t, int64(1), up.conns.Load())

	// A body, or a method that may not be repeated, takes the fallback.
	require.False(t, tr.direct(httptest.NewRequest("POST", up.URL+"/", nil)))
	require.False(t, tr.direct(httptest.NewRequest("GET", up.URL+"/", strings.NewReader("x"))))
	up2 := httptest.NewRequest("GET", up.URL+"/", nil)
	up2.Header.Set("Upgrade", "websocket")
	require.False(t, tr.direct(up2))
	resp, err := tr.RoundTrip(httptest.NewRequest("POST", up.URL+"/", strings.NewReader("x")))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestTransportStaleConnection: a kept-alive connection the upstream
// closed while it was idle is replaced on its first use, unseen.
func TestTransportStaleConnection(t *testing.T) {
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	get(t, tr, "GET", up.URL)
	up.CloseClientConnections()
	await.Until(t, "the upstream to close its connection", func() bool { return up.closed.Load() == 1 })
	_, body := get(t, tr, "GET", up.URL)
	require.Equal(t, "ok", body)
	require.Equal(t, int64(2), up.conns.Load())
}

// TestTransportNotReused: a connection is never reused after a body closed
// before its end, nor after the upstream said it will close it; the next
// request gets a new one and its answer whole.
func TestTransportNotReused(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write([]byte(big))
		case "/close":
			w.Header().Set("Connection", "close")
			w.Write([]byte("bye"))
		default:
			w.Write([]byte("ok"))
		}
	})
	tr := NewTransport()
	defer tr.CloseIdleConnections()

	req, _ := http.NewRequest("GET", up.URL+"/big", nil)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	buf := make([]byte, 10)
	_, err = io.ReadFull(resp.Body, buf)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close()) // early: the rest is never drained
	_, body := get(t, tr, "GET", up.URL+"/")
	require.Equal(t, "ok", body)
	require.Equal(t, int64(2), up.conns.Load())

	_, body = get(t, tr, "GET", up.URL+"/close")
	require.Equal(t, "bye", body)
	_, body = get(t, tr, "GET", up.URL+"/")
	require.Equal(t, "ok", body)
	require.Equal(t, int64(3), up.conns.Load())
}

// TestTransportTimeoutAndCancel: the header timeout fails a request with
// errUpstreamTimeout, a canceled request fails with its context's error,
// and neither connection is reused.
//
// The upstream never answers /slow (until the test ends), so the header
// timeout must fire; the cancel comes once /slow has reached the upstream,
// an event, so that its connection exists whatever the machine's speed.
func TestTransportTimeoutAndCancel(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	arrived := make(chan struct{}, 2)
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.Write([]byte("ok"))
	})
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	ht := &headerTimeout{rt: tr, d: 50 * time.Millisecond}
	// A kept-alive connection first, which the timed-out request reuses:
	// it is there before the timeout can fire. The requests that must be
	// answered go through tr, with no timeout.
	_, body := get(t, tr, "GET", up.URL+"/")
	require.Equal(t, "ok", body)
	req, _ := http.NewRequest("GET", up.URL+"/slow", nil)
	_, err := ht.RoundTrip(req)
	require.ErrorIs(t, err, errUpstreamTimeout)

	ctx, cancel := context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, "GET", up.URL+"/slow", nil)
	go func() {
		for range 2 { // the timed-out request's arrival may be the first
			select {
			case <-arrived:
			case <-ctx.Done():
				return
			}
			if up.conns.Load() == 2 {
				cancel()
				return
			}
		}
	}()
	_, err = tr.RoundTrip(req)
	require.True(t, errors.Is(err, context.Canceled), "%v", err)

	once.Do(func() { close(release) })
	_, body = get(t, tr, "GET", up.URL+"/")
	require.Equal(t, "ok", body)
	require.Equal(t, int64(3), up.conns.Load())
}

// TestTransportIdleBounds: at most MaxIdlePerHost connections are kept,
// and none past IdleTimeout.
func TestTransportIdleBounds(t *testing.T) {
	up := newCountingUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	tr := NewTransport()
	tr.MaxIdlePerHost = 2
	defer tr.CloseIdleConnections()
	var bodies []io.ReadCloser
	for range 4 { // four at once: four connections
		req, _ := http.NewRequest("GET", up.URL, nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		bodies = append(bodies, resp.Body)
	}
	for _, b := range bodies {
		io.Copy(io.Discard, b)
		b.Close()
	}
	addr := strings.TrimPrefix(up.URL, "http://")
	tr.mu.Lock()
	require.Len(t, tr.idle[addr], 2)
	tr.mu.Unlock()

	tr.IdleTimeout = time.Nanosecond
	get(t, tr, "GET", up.URL) // the idle ones are past it: a new connection
	require.Equal(t, int64(5), up.conns.Load())
}
