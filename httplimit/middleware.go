// Package httplimit is net/http middleware over an rl.Limiter: it keys each
// request (client IP, a header, an API key, a query parameter or a function
// of yours), decides it, writes the rate-limit header fields on every
// response and answers 429 with Retry-After on denial.
//
// When the store fails, each middleware either fails open (serves the
// request) or closed (503), and reports the error to a hook.
//
// A limit bounds each key, so it is only as strong as the key: ClientIP
// keys IPv4 clients per address and IPv6 clients per /64 (IPKeyConfig
// changes both), while Header, Query and APIKey key by whatever the client
// sends, which bounds nothing unless a component you trust sets or verifies
// that value.
package httplimit

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/rlcore/rl"
)

// Config configures a middleware.
type Config struct {
	// Limiter decides; required.
	Limiter *rl.Limiter
	// Key keys the request; required (ClientIP() is the usual choice).
	Key KeyFunc
	// Policy chooses the policy per request (per route, per plan); nil or
	// a nil result means the Limiter's policy.
	Policy func(r *http.Request) *rl.Policy
	// Cost is the cost of a request; nil means 1.
	Cost func(r *http.Request) int64
	// FailOpen serves requests when the store fails; otherwise they are
	// answered 503 (fail closed). Either way OnError hears of it.
	FailOpen bool
	// OnError, if set, is called with every error: store failures (match
	// rl.ErrStore), invalid keys (rl.ErrInvalidKey, ErrNoKey) and others.
	OnError func(r *http.Request, err error)
	// Denied writes the response to a denied request, after the headers
	// are set and the status is decided; nil writes 429 with the body
	// "Rate limit exceeded".
	Denied http.Handler
	// AllowMissingKey serves requests whose key function fails, unlimited,
	// instead of answering 400.
	AllowMissingKey bool
	// Wait makes LeakyBucket limits shape traffic: an admitted request
	// waits out its Delay (or until the request is canceled) before it is
	// served.
	Wait bool
}

// New returns the middleware.
func New(cfg Config) (func(http.Handler) http.Handler, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("httplimit: Config.Limiter is nil")
	}
	if cfg.Key == nil {
		return nil, errors.New("httplimit: Config.Key is nil")
	}
	return func(next http.Handler) http.Handler {
		return &handler{cfg: cfg, next: next}
	}, nil
}

type handler struct {
	cfg  Config
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &h.cfg
	key, err := c.Key(r)
	if err != nil {
		h.report(r, err)
		if c.AllowMissingKey {
			h.next.ServeHTTP(w, r)
			return
		}
		http.Error(w, "Missing or invalid rate-limit key", http.StatusBadRequest)
		return
	}
	req := rl.Request{Key: key, Cost: 1}
	if c.Policy != nil {
		req.Policy = c.Policy(r)
	}
	if c.Cost != nil {
		req.Cost = c.Cost(r)
	}
	res, err := c.Limiter.Do(r.Context(), req)
	if err != nil {
		h.report(r, err)
		switch {
		case errors.Is(err, rl.ErrStore) && c.FailOpen:
			h.next.ServeHTTP(w, r)
		case errors.Is(err, rl.ErrStore):
			http.Error(w, "Rate limiter unavailable", http.StatusServiceUnavailable)
		case errors.Is(err, rl.ErrInvalidKey):
			http.Error(w, "Invalid rate-limit key", http.StatusBadRequest)
		default:
			http.Error(w, "Rate limiter error", http.StatusInternalServerError)
		}
		return
	}
	SetHeaders(w.Header(), res)
	if !res.Allowed {
		if c.Denied != nil {
			c.Denied.ServeHTTP(w, r)
			return
		}
		WriteDenied(w, res)
		return
	}
	if c.Wait && res.Delay > 0 && !wait(r.Context(), res.Delay) {
		return // the client went away
	}
	h.next.ServeHTTP(w, r)
}

// WriteDenied answers a denied request: status 429 and the plain-text body
// "Rate limit exceeded" (saying so when the cost can never fit). Call
// SetHeaders first.
func WriteDenied(w http.ResponseWriter, res rl.Result) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusTooManyRequests)
	if res.Never {
		w.Write([]byte("Rate limit exceeded: the request's cost exceeds the limit\n"))
	} else {
		w.Write([]byte("Rate limit exceeded\n"))
	}
}

func (h *handler) report(r *http.Request, err error) {
	if h.cfg.OnError != nil {
		h.cfg.OnError(r, err)
	}
}

func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
