package service

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/httplimit"
)

// serveProxy is the reverse proxy filter: it matches the request to the
// most specific rule, keys and decides it, and forwards it to the upstream
// or answers 429 "Rate limit exceeded". Requests no rule matches are
// forwarded unlimited.
func (s *Service) serveProxy(w http.ResponseWriter, r *http.Request) {
	rs := s.rules.Load()
	if rs.upstream == nil {
		http.Error(w, "Not found: no upstream configured (set \"upstream\" in the configuration)", http.StatusNotFound)
		return
	}
	if s.proxyBody > 0 && r.ContentLength > s.proxyBody {
		s.metrics.rejected.WithLabelValues("body_too_large").Inc()
		http.Error(w, "Request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	esc := r.URL.EscapedPath()
	path, err := canonicalPath(esc)
	if err != nil {
		s.metrics.rejected.WithLabelValues("invalid_path").Inc()
		http.Error(w, "Bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	// From here on r carries the canonical path: the one matched is the
	// one forwarded.
	if path != esc {
		r = withPath(r, path)
	}
	ru := rs.match(r, path)
	if ru == nil {
		s.forward(rs.upstream, w, r)
		return
	}
	start := time.Now()
	key, err := ru.key(r)
	if err != nil {
		s.metrics.rejected.WithLabelValues("missing_key").Inc()
		http.Error(w, "Missing rate-limit key: "+keyHint(ru.spec.KeyBy), http.StatusBadRequest)
		return
	}
	cost, err := ru.cost(r)
	if err != nil {
		s.metrics.rejected.WithLabelValues("invalid_cost").Inc()
		http.Error(w, "Invalid rate-limit cost: "+err.Error(), http.StatusBadRequest)
		return
	}
	t := ru.target()
	res, out, err := s.decide(r.Context(), &t, key, cost, false, nil)
	s.metrics.proxyLatency.Observe(time.Since(start).Seconds())
	if out == "" {
		var ce *errClient
		if errors.As(err, &ce) {
			s.metrics.rejected.WithLabelValues(ce.code).Inc()
		}
		http.Error(w, "Invalid rate-limit key ("+ru.spec.KeyBy+"): "+keyReason(err), http.StatusBadRequest)
		return
	}
	t.m.record(out)
	switch out {
	case outFailClosed:
		w.Header().Set("Retry-After", "1")
		if errors.Is(err, errOverloaded) {
			http.Error(w, "Rate limiter overloaded; retry later", http.StatusServiceUnavailable)
			return
		}
		http.Error(w, "Rate limiter unavailable", http.StatusServiceUnavailable)
		return
	case outFailOpen:
		s.forward(rs.upstream, w, r)
		return
	}
	httplimit.SetHeaders(w.Header(), res)
	if !res.Allowed {
		httplimit.WriteDenied(w, res)
		return
	}
	if ru.spec.Shape && res.Delay > 0 && !wait(r, res.Delay) {
		return // the client went away while its request was held
	}
	s.forward(rs.decided, w, r)
}

func (s *Service) forward(upstream http.Handler, w http.ResponseWriter, r *http.Request) {
	if s.proxyBody > 0 && r.Body != nil {
		r2 := *r // never edit the caller's request
		r2.Body = http.MaxBytesReader(w, r.Body, s.proxyBody)
		r = &r2
	}
	upstream.ServeHTTP(w, r)
}

// withPath returns r with its URL's path set to p, a canonical escaped
// path; r itself is never edited.
func withPath(r *http.Request, p string) *http.Request {
	dec, err := url.PathUnescape(p)
	if err != nil { // not reached: canonicalPath checked every escape
		dec = p
	}
	r2 := *r
	u := *r.URL
	u.Path, u.RawPath = dec, p
	r2.URL = &u
	return &r2
}

func wait(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// keyReason says why a key was refused, without echoing the key.
func keyReason(err error) string {
	var ke *rl.KeyError
	if errors.As(err, &ke) {
		return ke.Reason
	}
	var ce *errClient
	if errors.As(err, &ce) && ce.code == "invalid_cost" {
		return "invalid cost"
	}
	return "refused"
}

func keyHint(keyBy string) string {
	switch {
	case keyBy == "api_key":
		return "send \"Authorization: Bearer <key>\" or \"X-API-Key: <key>\""
	case keyBy == "ip":
		return "the client address could not be read"
	case len(keyBy) > 7 && keyBy[:7] == "header:":
		return "send the " + keyBy[7:] + " header"
	case len(keyBy) > 6 && keyBy[:6] == "query:":
		return "send the " + keyBy[6:] + " query parameter"
	}
	return keyBy
}

// demoUpstream is the built-in upstream of "upstream: demo": it answers
// every request with a small JSON echo, so the sample configuration runs
// with nothing else.
func demoUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{
			"upstream": "demo",
			"method":   r.Method,
			"path":     r.URL.Path,
			"message":  "hello from the built-in demo upstream",
		})
	})
}
