package service

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"
)

// DefaultUpstreamTimeout is the default of Config.UpstreamTimeout.
const DefaultUpstreamTimeout = 30 * time.Second

// errUpstreamTimeout is an upstream that sent no response header within
// the upstream timeout; the proxy answers 504.
var errUpstreamTimeout = errors.New("no response header from the upstream within the upstream timeout")

// headerTimeout bounds the wait for an upstream's response header: the
// request is canceled when d passes without one. The body is not bounded
// (a download may stream for long); the server's write timeout is.
type headerTimeout struct {
	rt http.RoundTripper
	d  time.Duration
}

func (t *headerTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	if dt, ok := t.rt.(*Transport); ok && dt.direct(req) {
		return dt.roundTrip(req, t.d)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(t.d, func() { cancel(errUpstreamTimeout) })
	resp, err := t.rt.RoundTrip(req.WithContext(ctx))
	if !timer.Stop() { // fired: the request is (being) canceled
		if err == nil {
			resp.Body.Close()
		}
		cancel(nil)
		return nil, errUpstreamTimeout
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	// The request's context must live as long as its body is read.
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok { // 101 Switching Protocols
		resp.Body = &cancelRWBody{rwc, cancel}
	} else {
		resp.Body = &cancelBody{resp.Body, cancel}
	}
	return resp, nil
}

// interimWriter drops the hop-by-hop fields of 1xx responses (103 Early
// Hints), which httputil.ReverseProxy copies from the upstream as they are
// (it drops those of the final response itself). The proxy reaches the
// underlying writer's Flush and Hijack through Unwrap.
type interimWriter struct{ http.ResponseWriter }

func (w interimWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		removeHopByHop(w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w interimWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// hopByHop are the hop-by-hop fields of RFC 9110 §7.6.1 (and the
// non-standard Proxy-Connection), as httputil.ReverseProxy drops them.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHopByHop deletes from h the fields its Connection field names and
// the standard hop-by-hop fields.
func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, f := range hopByHop {
		h.Del(f)
	}
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

type cancelRWBody struct {
	io.ReadWriteCloser
	cancel context.CancelCauseFunc
}

func (b *cancelRWBody) Close() error {
	err := b.ReadWriteCloser.Close()
	b.cancel(nil)
	return err
}

// upstreamTransport is the service's transport with cfg's header timeout.
func (s *Service) upstreamTransport(cfg *Config) *headerTimeout {
	d := cfg.UpstreamTimeout
	if d <= 0 {
		d = DefaultUpstreamTimeout
	}
	return &headerTimeout{rt: s.transport, d: d}
}

// upstreamError answers a proxied request the upstream failed: 504 when it
// sent no response header in time, 413 for a body over the proxy's bound,
// else 502.
func (s *Service) upstreamError(u *url.URL, timeout time.Duration) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			s.metrics.rejected.WithLabelValues("body_too_large").Inc()
			http.Error(w, "Request body too large", http.StatusRequestEntityTooLarge)
		case errors.Is(err, errUpstreamTimeout):
			s.metrics.rejected.WithLabelValues("upstream_timeout").Inc()
			s.log.Warn("upstream timed out", "upstream", u.Redacted(), "method", r.Method, "path", r.URL.Path, "timeout", timeout)
			http.Error(w, "Gateway timeout: the upstream did not answer in time", http.StatusGatewayTimeout)
		default:
			s.log.Warn("upstream failed", "upstream", u.Redacted(), "method", r.Method, "path", r.URL.Path, "err", err)
			http.Error(w, "Bad gateway: the upstream failed", http.StatusBadGateway)
		}
	}
}
