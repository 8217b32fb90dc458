// Package httplimit is net/http middleware over an rl.Limiter: it keys each
// request (client IP, a header, an API key, a query parameter or a function
// of yours), decides it, writes the rate-limit header fields on every
// response and answers 429 with Retry-After on denial.
//
// When the store fails, each middleware either fails open (serves the
// request) or closed (503), and reports the error to a hook; a busy store
// is load, answered 503 with Retry-After and never served. Config.Fail
// chooses per request and per error instead, OnDecision observes every
// outcome (for metrics), and Denied and Refused write the responses.
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
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// Limiter decides requests. *rl.Limiter is one; wrap one to add to every
// decision (a concurrency bound, tracing) or to choose a limiter per
// request.
type Limiter interface {
	Do(ctx context.Context, req rl.Request) (rl.Result, error)
}

// CostFunc returns the cost of a request (what it takes from every limit).
// An error means the request states an invalid cost: the middleware
// answers 400 (outcome InvalidCost).
type CostFunc func(r *http.Request) (int64, error)

// Config configures a middleware.
type Config struct {
	// Limiter decides; required.
	Limiter Limiter
	// Key keys the request; required (ClientIP() is the usual choice).
	Key KeyFunc
	// Policy chooses the policy per request (per route, per plan); nil or
	// a nil result means the Limiter's policy.
	Policy func(r *http.Request) *rl.Policy
	// Cost is the cost of a request; nil means 1.
	Cost CostFunc
	// FailOpen serves requests when the store fails; otherwise they are
	// answered 503 (fail closed). A busy store (store.ErrBusy: every
	// connection in use) is load, not an outage: it is answered
	// Overloaded even so. Either way OnError hears of it. Fail, if set,
	// decides instead.
	FailOpen bool
	// Fail, if set, chooses how to answer a request whose decision failed
	// for a reason that is not the request's (not an invalid key or
	// cost): FailOpen, FailClosed, Overloaded or Error (any other value
	// is taken as FailClosed). It replaces FailOpen, so it can choose per
	// request (per route, fail open only for some) and per error (fail
	// open only on an outage, never on load).
	Fail func(r *http.Request, err error) Outcome
	// OnError, if set, is called with every error: store failures (match
	// rl.ErrStore), invalid keys (rl.ErrInvalidKey, ErrNoKey), invalid
	// costs and others.
	OnError func(r *http.Request, err error)
	// OnDecision, if set, is called once for every request, with its
	// outcome, before the request is answered or served (and before a
	// shaping wait). It is the place for metrics and access logs.
	OnDecision func(r *http.Request, d Decision)
	// Denied writes the response to a denied request, after the headers
	// are set and the status is decided; nil writes 429 with the body
	// "Rate limit exceeded".
	Denied http.Handler
	// Refused writes the response to a request refused for an error: an
	// outcome of MissingKey, InvalidKey, InvalidCost, FailClosed,
	// Overloaded or Error, with the status Outcome.Status gives. 503s
	// already carry "Retry-After: 1". Nil means WriteRefused.
	Refused func(w http.ResponseWriter, r *http.Request, d Decision)
	// AllowMissingKey serves requests whose key function fails, unlimited,
	// instead of answering 400.
	AllowMissingKey bool
	// Wait makes LeakyBucket limits shape traffic: an admitted request
	// waits out its Delay (or until the request is canceled) before it is
	// served.
	Wait bool
}

// Outcome is what a middleware did with a request.
type Outcome uint8

// Outcomes, as Decision reports them.
const (
	// Allowed: decided and admitted.
	Allowed Outcome = iota + 1
	// Denied: decided and refused, 429.
	Denied
	// MissingKey: the key function failed; 400, or served unlimited with
	// AllowMissingKey.
	MissingKey
	// InvalidKey: the limiter refused the key (rl.ErrInvalidKey); 400.
	InvalidKey
	// InvalidCost: the cost function failed, or the limiter refused the
	// cost (core.ErrCost); 400.
	InvalidCost
	// FailOpen: the decision failed; served unlimited.
	FailOpen
	// FailClosed: the decision failed; 503 "Rate limiter unavailable".
	FailClosed
	// Overloaded: the decision failed because of load (store.ErrBusy by
	// default); 503 "Rate limiter overloaded; retry later", never served.
	Overloaded
	// Error: the decision failed for a reason other than the store's; 500.
	Error
)

var outcomeNames = [...]string{"", "allowed", "denied", "missing_key", "invalid_key", "invalid_cost", "fail_open", "fail_closed", "overloaded", "error"}

// String returns the outcome's name in snake case ("fail_open"), fit for a
// metric label.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o != 0 {
		return outcomeNames[o]
	}
	return "unknown"
}

// Status returns the response status of the outcome: 200 for Allowed and
// FailOpen (what the next handler writes), 429, 400, 503 or 500.
func (o Outcome) Status() int {
	switch o {
	case Allowed, FailOpen:
		return http.StatusOK
	case Denied:
		return http.StatusTooManyRequests
	case MissingKey, InvalidKey, InvalidCost:
		return http.StatusBadRequest
	case Error:
		return http.StatusInternalServerError
	}
	return http.StatusServiceUnavailable
}

// Decision describes what a middleware did with one request.
type Decision struct {
	Outcome Outcome
	// Key is the request's key; empty for MissingKey.
	Key string
	// Cost is the cost asked for; 0 before the cost is known.
	Cost int64
	// Result is the limiter's decision, for Allowed and Denied.
	Result rl.Result
	// Err is the error of every other outcome.
	Err error
	// Latency is the time the middleware took to reach the outcome:
	// keying, costing and the Limiter's decision, not the shaping wait or
	// the response.
	Latency time.Duration
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
	var start time.Time
	if c.OnDecision != nil {
		start = time.Now()
	}
	key, err := c.Key(r)
	if err != nil {
		d := Decision{Outcome: MissingKey, Err: err}
		h.report(r, &d, start)
		if c.AllowMissingKey {
			h.next.ServeHTTP(w, r)
			return
		}
		h.refuse(w, r, d)
		return
	}
	req := rl.Request{Key: key, Cost: 1}
	if c.Policy != nil {
		req.Policy = c.Policy(r)
	}
	if c.Cost != nil {
		if req.Cost, err = c.Cost(r); err != nil {
			d := Decision{Outcome: InvalidCost, Key: key, Err: err}
			h.report(r, &d, start)
			h.refuse(w, r, d)
			return
		}
	}
	res, err := c.Limiter.Do(r.Context(), req)
	d := Decision{Key: key, Cost: req.Cost, Err: err}
	switch {
	case err == nil && res.Allowed:
		d.Outcome, d.Result = Allowed, res
	case err == nil:
		d.Outcome, d.Result = Denied, res
	case errors.Is(err, rl.ErrInvalidKey):
		d.Outcome = InvalidKey
	case isCostError(err):
		d.Outcome = InvalidCost
	case c.Fail != nil:
		d.Outcome = c.Fail(r, err)
		if d.Outcome < FailOpen || d.Outcome > Error {
			d.Outcome = FailClosed
		}
	default:
		d.Outcome = failure(err, c.FailOpen)
	}
	h.report(r, &d, start)
	switch d.Outcome {
	case Allowed:
		SetHeaders(w.Header(), res)
		if c.Wait && res.Delay > 0 && !wait(r.Context(), res.Delay) {
			return // the client went away
		}
		h.next.ServeHTTP(w, r)
	case Denied:
		SetHeaders(w.Header(), res)
		if c.Denied != nil {
			c.Denied.ServeHTTP(w, r)
			return
		}
		WriteDenied(w, res)
	case FailOpen:
		h.next.ServeHTTP(w, r)
	default:
		h.refuse(w, r, d)
	}
}

// isCostError reports whether the limiter refused the cost. (Its variable
// escapes to errors.As: a function of its own keeps it off the heap of
// every request.)
func isCostError(err error) bool {
	var ce core.Error
	return errors.As(err, &ce) && ce == core.ErrCost
}

// failure is the answer to a failed decision without Config.Fail: load
// (store.ErrBusy) is Overloaded, another store failure FailOpen or
// FailClosed as configured, anything else Error.
func failure(err error, failOpen bool) Outcome {
	switch {
	case errors.Is(err, store.ErrBusy):
		return Overloaded
	case errors.Is(err, rl.ErrStore) && failOpen:
		return FailOpen
	case errors.Is(err, rl.ErrStore):
		return FailClosed
	}
	return Error
}

func (h *handler) refuse(w http.ResponseWriter, r *http.Request, d Decision) {
	if d.Outcome.Status() == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if h.cfg.Refused != nil {
		h.cfg.Refused(w, r, d)
		return
	}
	WriteRefused(w, d)
}

// WriteRefused answers a request refused for an error with the status
// d.Outcome.Status gives and a plain-text body that says why without
// echoing the key:
//
//	400 Missing or invalid rate-limit key               (MissingKey)
//	400 Invalid rate-limit key: longer than 256 bytes   (InvalidKey, the rl.KeyError's reason)
//	400 Invalid rate-limit cost                         (InvalidCost)
//	503 Rate limiter unavailable                        (FailClosed)
//	503 Rate limiter overloaded; retry later            (Overloaded)
//	500 Rate limiter error                              (Error)
func WriteRefused(w http.ResponseWriter, d Decision) {
	var msg string
	switch d.Outcome {
	case MissingKey:
		msg = "Missing or invalid rate-limit key"
	case InvalidKey:
		msg = "Invalid rate-limit key"
		if reason := KeyReason(d.Err); reason != "" {
			msg += ": " + reason
		}
	case InvalidCost:
		msg = "Invalid rate-limit cost"
	case Overloaded:
		msg = "Rate limiter overloaded; retry later"
	case Error:
		msg = "Rate limiter error"
	default:
		msg = "Rate limiter unavailable"
	}
	http.Error(w, msg, d.Outcome.Status())
}

// KeyReason says why the limiter refused a key (the Reason of an
// *rl.KeyError in err's chain), without the key; "" when err has none.
func KeyReason(err error) string {
	var ke *rl.KeyError
	if errors.As(err, &ke) {
		return ke.Reason
	}
	return ""
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

// report tells OnError and OnDecision of d, reached in the time since
// start.
func (h *handler) report(r *http.Request, d *Decision, start time.Time) {
	if d.Err != nil && h.cfg.OnError != nil {
		h.cfg.OnError(r, d.Err)
	}
	if h.cfg.OnDecision != nil {
		d.Latency = time.Since(start)
		h.cfg.OnDecision(r, *d)
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
