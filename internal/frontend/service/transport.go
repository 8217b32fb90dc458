package service

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"time"
)

// Transport is the default transport of proxied requests. What most
// proxied traffic is, a request without a body whose method may be
// repeated (GET, HEAD, OPTIONS, TRACE) to an http:// upstream, it sends
// itself over pooled keep-alive connections, on the caller's goroutine:
// write the request, read the response header, hand the body over, and
// put the connection back once the body has been read to its end.
// Everything else (a body, another method, an upgrade, https, a proxy
// from the environment) goes to Fallback.
//
// http.Transport runs two goroutines per connection and hands every
// request and response between them and the caller over channels, and
// peeks at every idle connection; on a proxy's hot path that was a
// quarter of its CPU. The requests this transport takes are the ones
// http.Transport also retries on a fresh connection when a kept-alive one
// turns out closed by the upstream, and so does this one, once.
type Transport struct {
	// Fallback carries the requests the direct path does not take.
	Fallback *http.Transport
	// MaxIdlePerHost bounds the idle connections kept per upstream.
	MaxIdlePerHost int
	// IdleTimeout is how long an idle connection is kept.
	IdleTimeout time.Duration
	// Dialer dials the upstream.
	Dialer net.Dialer

	mu   sync.Mutex
	idle map[string][]*upConn // by host:port, the most recently used last
}

// NewTransport returns the default transport of proxied requests: up to
// 512 idle connections per upstream (one per request in flight, so that a
// busy proxy reuses its connections instead of opening and closing them;
// http.Transport's default keeps 2), kept 90 s, and a Fallback cloned from
// http.DefaultTransport with the same bounds. Neither asks the upstream
// for gzip on its own: a request is forwarded with the Accept-Encoding its
// client sent. (A transport that adds "Accept-Encoding: gzip" makes the
// upstream compress a response that the transport then decompresses and
// the proxy streams chunked, without its length, to a client that never
// asked for gzip.)
func NewTransport() *Transport {
	fb := http.DefaultTransport.(*http.Transport).Clone()
	fb.MaxIdleConns = 1024
	fb.MaxIdleConnsPerHost = 512
	fb.IdleConnTimeout = 90 * time.Second
	fb.DisableCompression = true
	return &Transport{Fallback: fb, MaxIdlePerHost: 512, IdleTimeout: 90 * time.Second,
		Dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
}

// RoundTrip sends req and returns the response, whose body must be read
// and closed as with any RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.direct(req) {
		return t.Fallback.RoundTrip(req)
	}
	return t.roundTrip(req, 0)
}

// CloseIdleConnections closes the idle connections of both paths.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.nc.Close()
		}
	}
	t.Fallback.CloseIdleConnections()
}

// direct reports whether req takes the direct path.
func (t *Transport) direct(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.URL.Host == "" || req.ContentLength != 0 ||
		req.Body != nil && req.Body != http.NoBody || len(req.TransferEncoding) > 0 {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
	default:
		return false
	}
	if _, up := req.Header["Upgrade"]; up {
		return false
	}
	if t.Fallback.Proxy != nil {
		if u, err := t.Fallback.Proxy(req); err != nil || u != nil {
			return false
		}
	}
	return true
}

// roundTrip sends req, which takes the direct path, with a bound on the
// wait for the response header, from before the request is written (0:
// none): past it the request fails with errUpstreamTimeout.
func (t *Transport) roundTrip(req *http.Request, headerTimeout time.Duration) (*http.Response, error) {
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	var deadline time.Time
	if headerTimeout > 0 {
		deadline = time.Now().Add(headerTimeout)
	}
	for retried := false; ; retried = true {
		c, reused, err := t.get(req.Context(), addr, deadline)
		if err != nil {
			return nil, t.failed(req, err)
		}
		resp, err := t.exchange(c, req, deadline)
		if err == nil {
			return resp, nil
		}
		c.nc.Close()
		// A kept-alive connection the upstream closed while it was idle
		// fails on its first use: once, on a new one (the request may be
		// repeated, or it would not be here).
		var te interface{ Timeout() bool }
		if !reused || retried || req.Context().Err() != nil || errors.As(err, &te) && te.Timeout() {
			return nil, t.failed(req, err)
		}
	}
}

// failed is the error of a request that failed with err: the context's
// error when it is done, errUpstreamTimeout when the header timeout
// passed.
func (t *Transport) failed(req *http.Request, err error) error {
	if cerr := context.Cause(req.Context()); cerr != nil {
		return cerr
	}
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		return errUpstreamTimeout
	}
	return err
}

// upConn is a connection to an upstream.
type upConn struct {
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	addr   string
	idleAt time.Time
}

// get returns an idle connection to addr, or a new one.
func (t *Transport) get(ctx context.Context, addr string, deadline time.Time) (*upConn, bool, error) {
	now := time.Now()
	t.mu.Lock()
	if cs := t.idle[addr]; len(cs) > 0 {
		c := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		cs = cs[:len(cs)-1]
		if now.Sub(c.idleAt) < t.IdleTimeout {
			t.idle[addr] = cs
			t.mu.Unlock()
			return c, true, nil
		}
		// The most recently used is past the timeout: so are the others.
		c.nc.Close()
		for i, o := range cs {
			o.nc.Close()
			cs[i] = nil
		}
		t.idle[addr] = cs[:0]
	}
	t.mu.Unlock()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	nc, err := t.Dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	return &upConn{nc: nc, br: bufio.NewReaderSize(nc, 4<<10), bw: bufio.NewWriterSize(nc, 4<<10), addr: addr}, false, nil
}

// put keeps c for the next request to its upstream, or closes it when
// MaxIdlePerHost are kept already; connections idle past IdleTimeout are
// closed on the way.
func (t *Transport) put(c *upConn) {
	c.idleAt = time.Now()
	t.mu.Lock()
	if t.idle == nil {
		t.idle = make(map[string][]*upConn)
	}
	cs := t.idle[c.addr]
	n := 0 // the oldest first: drop those past the timeout
	for n < len(cs) && c.idleAt.Sub(cs[n].idleAt) >= t.IdleTimeout {
		cs[n].nc.Close()
		n++
	}
	if n > 0 {
		m := copy(cs, cs[n:])
		clear(cs[m:])
		cs = cs[:m]
	}
	if len(cs) >= t.MaxIdlePerHost {
		t.idle[c.addr] = cs
		t.mu.Unlock()
		c.nc.Close()
		return
	}
	t.idle[c.addr] = append(cs, c)
	t.mu.Unlock()
}

// aLongTimeAgo is a deadline that has passed: it makes a blocked read or
// write on the connection return at once.
var aLongTimeAgo = time.Unix(1, 0)

// exchange writes req on c and reads the response header. The response's
// body puts c back in the pool once read to its end.
func (t *Transport) exchange(c *upConn, req *http.Request, deadline time.Time) (*http.Response, error) {
	ctx := req.Context()
	if !deadline.IsZero() {
		c.nc.SetDeadline(deadline)
	}
	// A canceled request (the client went away) unblocks the connection.
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(aLongTimeAgo) })
	resp, err := t.readResponse(c, req)
	if err != nil {
		stop()
		return nil, err
	}
	if !deadline.IsZero() {
		c.nc.SetDeadline(time.Time{}) // the body may take as long as it takes
	}
	resp.Body = &upBody{rc: resp.Body, t: t, c: c, stop: stop, close: resp.Close}
	return resp, nil
}

// readResponse writes req on c and reads the final response's header,
// passing 1xx (interim) responses to the request's httptrace hook, as
// http.Transport does (httputil.ReverseProxy forwards them).
func (t *Transport) readResponse(c *upConn, req *http.Request) (*http.Response, error) {
	if err := req.Write(c.bw); err != nil {
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		return nil, err
	}
	for {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, err
		}
		code := resp.StatusCode
		if code < 100 || code > 199 {
			return resp, nil
		}
		if code == http.StatusSwitchingProtocols { // not asked for: upgrades take the fallback
			resp.Body.Close()
			return nil, errors.New("unexpected 101 Switching Protocols from the upstream")
		}
		if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				return nil, err
			}
		}
	}
}

// upBody is a response body from the direct path: read to its end, it
// puts its connection back in the pool; closed before, it closes it.
type upBody struct {
	rc    io.ReadCloser
	t     *Transport
	c     *upConn
	stop  func() bool // unregisters the cancellation hook
	close bool        // the upstream will close the connection (or the body ends with it)

	mu   sync.Mutex
	done bool
}

func (b *upBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		b.finish(err == io.EOF)
	}
	return n, err
}

func (b *upBody) Close() error {
	b.finish(false)
	return nil
}

// finish ends the exchange once: the connection goes back to the pool when
// the body was read to its end, nothing else is buffered, the upstream
// keeps it open and the request was not canceled; else it is closed.
func (b *upBody) finish(eof bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	if eof {
		b.rc.Close() // read to its end: nothing left to drain
	}
	// stop fails when the request was canceled: the deadline is then
	// in the past.
	if eof && b.stop() && !b.close && b.c.br.Buffered() == 0 {
		b.t.put(b.c)
		return
	}
	b.stop()
	b.c.nc.Close()
}
