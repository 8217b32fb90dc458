package httpflow

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/outage"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// Limiter decides requests. *rl.Limiter is one; wrap one to add to every
// decision (a concurrency bound, tracing) or to choose a limiter per
// request.
type Limiter = engine.Limiter

// Config configures a middleware.
type Config struct {
	// Limiter decides; required (a nil *rl.Limiter is refused too).
	Limiter Limiter
	// Key keys the request; required (ClientIP() is the usual choice).
	Key func(r *http.Request) (string, error)
	// Policy chooses the policy per request (per route, per plan); nil or
	// a nil result means the Limiter's policy.
	Policy func(r *http.Request) *rl.Policy
	// Cost is the cost of a request; nil means 1.
	Cost func(r *http.Request) (int64, error)
	// FailOpen serves requests when the store is down (an outage);
	// otherwise they are answered 503 (fail closed). An outage is a store
	// failure that matches store.ErrUnavailable, and for a timeout
	// (context.DeadlineExceeded) only the third of decisions that began
	// after the last decision completed, none completing since (counted
	// per middleware, across every handler it wraps); every other store
	// failure is answered engine.FailClosed. A busy store (store.ErrBusy:
	// every connection in use) is load, not an outage: it is answered
	// engine.Overloaded even so. Either way OnError hears of it. Fail, if
	// set, decides instead; New refuses both.
	FailOpen bool
	// Fail, if set, chooses how to answer a request whose decision failed
	// for a reason that is not the request's (not an invalid key or
	// cost): engine.FailOpen, engine.FailClosed, engine.Overloaded or
	// engine.Error. Any other result is a bug in Fail: the request is
	// answered engine.FailClosed, and the error OnError and OnDecision
	// see says so. Fail replaces FailOpen (New refuses both), so it can
	// choose per request (per route, fail open only for some) and per
	// error (fail open only on an outage, never on load).
	Fail func(r *http.Request, err error) engine.Outcome
	// OnError, if set, is called with every error: store failures (match
	// rl.ErrStore), invalid keys (rl.ErrInvalidKey, ErrNoKey), invalid
	// costs, invalid response costs (ErrResponseCost) and failed settles
	// (ResponseCost: from the goroutine that settled; ErrAborted) and
	// others.
	OnError func(r *http.Request, err error)
	// OnDecision, if set, is called once for every request, with its
	// outcome, before the request is answered or served (and before a
	// shaping wait). It is the place for metrics and access logs.
	OnDecision func(r *http.Request, d Decision)
	// Denied writes the response to a denied request, after the headers
	// are set and the status is decided; nil writes 429 with the body
	// "Rate limit exceeded", or problem details (WriteDeniedFor, as
	// Problems chooses).
	Denied http.Handler
	// Refused writes the response to a request refused for an error: an
	// outcome of engine.MissingKey, engine.InvalidKey, engine.InvalidCost
	// (400), engine.FailClosed, engine.Overloaded (503) or engine.Error
	// (500), with the status engine.Outcome.Status gives. 503s already carry
	// "Retry-After: 1". Nil means WriteRefusedFor (plain text, or problem
	// details for a 503 as Problems chooses).
	Refused func(w http.ResponseWriter, r *http.Request, d Decision)
	// AllowMissingKey serves requests whose key function fails, unlimited
	// (engine.Unkeyed), instead of answering 400 (engine.MissingKey).
	AllowMissingKey bool
	// Wait makes LeakyBucket limits shape traffic: an admitted request
	// waits out its Delay (or until the request is canceled) before it is
	// served.
	Wait bool
	// Fields chooses what the rate-limit header fields say beyond every
	// limit's state (SetFields): only the closest limit, the quota unit,
	// a partition key.
	Fields Fields
	// Problems chooses the body of a 429 (without Denied) and of a 503
	// (without Refused): RFC 9457 problem details when the request
	// accepts JSON (ProblemsAuto, the default), always (ProblemsJSON) or
	// never (ProblemsText: plain text).
	Problems Problems
	// ResponseCost, if its Field is set, settles the cost of each
	// admitted request against what its response reports: the request is
	// charged its cost (Cost, the estimate) when it arrives and, once the
	// handler has returned, the difference between the actual cost the
	// handler wrote in that field (a header or a trailer) and the
	// estimate is settled on the same key and policy, in one Limiter call
	// (rl.Request.Settle) that never holds the response, and is not
	// cancelled with the request. A handler that panics (a reverse proxy
	// whose client went away: http.ErrAbortHandler) is settled by the
	// field it wrote, or set, before, and its panic then goes on
	// unchanged; without the field, that is reported (ErrAborted). A
	// response without the field settles nothing; an invalid one settles
	// nothing and is reported (ErrResponseCost). The field never reaches
	// the client. Errors go to OnError; OnSettle sees each settle.
	ResponseCost ResponseCost
	// OnSettle, if set, is called once for every admitted request whose
	// response carried the ResponseCost field, and for every one whose
	// handler panicked before it did (Err matching ErrAborted: nothing
	// settled), after its settle (from the goroutine that made it) or,
	// when no store call was needed (an invalid field, a cost equal to
	// the estimate, an abort), before the handler's ServeHTTP returns or
	// its panic goes on. It is the place for metrics.
	OnSettle func(r *http.Request, s Settlement)

	// Engine and Rule, if both are set, decide in place of Limiter, Key,
	// Cost, Policy, FailOpen and AllowMissingKey: the rule reads each
	// request's key and cost (engine.Reading), chooses the key's policy
	// (its overrides) and is decided in Engine (its per-key bound and
	// outage detector, shared with the host's other front ends).
	// rl-wasm-host's proxy sets them; httplimit does not, and New gives
	// the middleware an engine of its own over Limiter.
	Engine *engine.Engine
	Rule   *engine.Rule
	// OnResult, if set, is called with the engine's result of every
	// decision and of every settle's store call, before OnDecision or
	// OnSettle (rl-wasm-host's proxy counts and logs failures by it).
	OnResult func(r *http.Request, res engine.Result)
}

// Problems chooses between plain text and RFC 9457 problem details
// (application/problem+json, the problem types of
// draft-ietf-httpapi-ratelimit-headers) for the bodies of 429 and 503
// answers; see WriteDeniedFor and WriteRefusedFor.
type Problems uint8

// The choices.
const (
	// ProblemsAuto: problem details when the request's Accept field
	// prefers JSON to plain text (application/json,
	// application/problem+json or application/*, not */* alone), else
	// plain text.
	ProblemsAuto Problems = Problems(pipeline.ProblemAuto)
	// ProblemsJSON: problem details always.
	ProblemsJSON Problems = Problems(pipeline.ProblemJSON)
	// ProblemsText: plain text always.
	ProblemsText Problems = Problems(pipeline.ProblemText)
)

// Decision describes what a middleware did with one request.
type Decision struct {
	Outcome engine.Outcome
	// Key is the request's key; empty for engine.MissingKey and
	// engine.Unkeyed.
	Key string
	// Cost is the cost asked for; 0 before the cost is known.
	Cost int64
	// Result is the limiter's decision, for engine.Allowed and
	// engine.Denied.
	Result rl.Result
	// Err is the error of every other outcome.
	Err error
	// Latency is the time the middleware took to reach the outcome:
	// keying, costing and the Limiter's decision, not the shaping wait or
	// the response.
	Latency time.Duration
}

// New returns the middleware. It refuses a Config without a Limiter (nil,
// or a nil *rl.Limiter: a nil pointer of another type is yours to avoid)
// or a Key, and one with both Fail and FailOpen; or, with Engine and Rule,
// neither of those is needed.
func New(cfg Config) (func(http.Handler) http.Handler, error) {
	if rc := cfg.ResponseCost; rc.Field != "" && !ruleconfig.IsToken(rc.Field) || rc.Min < 0 || rc.Min > core.MaxCost {
		return nil, fmt.Errorf("httplimit: Config.ResponseCost: want a header name and a Min in [0, %d], got %q and %d", core.MaxCost, rc.Field, rc.Min)
	}
	if cfg.Engine != nil && cfg.Rule != nil {
		return func(next http.Handler) http.Handler {
			return &handler{cfg: cfg, next: next, eng: cfg.Engine, rule: cfg.Rule, read: true}
		}, nil
	}
	if l, ok := cfg.Limiter.(*rl.Limiter); cfg.Limiter == nil || ok && l == nil {
		return nil, errors.New("httplimit: Config.Limiter is nil")
	}
	if cfg.Key == nil {
		return nil, errors.New("httplimit: Config.Key is nil")
	}
	if cfg.Fail != nil && cfg.FailOpen {
		return nil, errors.New("httplimit: Config.Fail and Config.FailOpen are both set: Fail decides alone (return engine.FailOpen from it)")
	}
	// One engine for the middleware, shared by every handler it wraps:
	// its outage detector counts the decisions of all of them (the
	// store's health is the same for all), with no per-key bound.
	eng, err := engine.New(engine.Options{})
	if err != nil {
		return nil, err
	}
	rule := &engine.Rule{Limiter: cfg.Limiter, FailOpen: cfg.FailOpen, AllowMissingKey: cfg.AllowMissingKey}
	return func(next http.Handler) http.Handler {
		return &handler{cfg: cfg, next: next, eng: eng, rule: rule}
	}, nil
}

type handler struct {
	cfg    Config
	next   http.Handler
	eng    *engine.Engine
	rule   *engine.Rule
	read   bool // the rule reads the key and cost (Config.Rule)
	policy atomic.Pointer[policyField]
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &h.cfg
	var start time.Time
	if c.OnDecision != nil {
		start = time.Now()
	}
	var in engine.Input
	h.input(r, &in)
	res := h.eng.Run(r.Context(), h.rule, &in)
	if c.OnResult != nil {
		c.OnResult(r, res)
	}
	d := Decision{Outcome: res.Outcome, Key: res.Key, Cost: res.Cost, Result: res.Result, Err: res.Err}
	switch res.Outcome {
	case engine.MissingKey, engine.Unkeyed, engine.InvalidCost:
		d.Cost = 0 // not known, or not valid
	}
	if ce, ok := d.Err.(*outage.Error); ok {
		d.Err = ce.Err // the limiter's error, as it returned it (the class is the outcome's)
	}
	h.report(r, &d, start)
	switch d.Outcome {
	case engine.Allowed:
		setFields(w.Header(), res.Key, res.Result, res.Each, c.Fields, res.Policy, &h.policy)
		if c.Wait && res.Result.Delay > 0 && !wait(r.Context(), res.Result.Delay) {
			return // the client went away
		}
		if c.ResponseCost.Field != "" {
			h.serveAndSettle(w, r, &res)
			return
		}
		h.next.ServeHTTP(w, r)
	case engine.Denied:
		setFields(w.Header(), res.Key, res.Result, res.Each, c.Fields, res.Policy, &h.policy)
		if c.Denied != nil {
			c.Denied.ServeHTTP(w, r)
			return
		}
		WriteDeniedFor(w, r, res.Result, res.Each, c.Problems)
	case engine.FailOpen, engine.Unkeyed:
		h.serve(w, r)
	default:
		h.refuse(w, r, d)
	}
}

// input reads r into in for the engine: through the rule's Reading
// (Config.Rule), or by the Config's Key, Cost, Policy and Fail.
func (h *handler) input(r *http.Request, in *engine.Input) {
	in.Results = true
	if h.read {
		path := r.URL.EscapedPath()
		in.Request, in.Match = Request(r, path), pipeline.MatchPath(path)
		return
	}
	c := &h.cfg
	if in.Key, in.KeyErr = c.Key(r); in.KeyErr != nil {
		return
	}
	in.Cost = 1
	if c.Cost != nil {
		in.Cost, in.CostErr = c.Cost(r)
	}
	if c.Policy != nil {
		in.Policy = c.Policy(r)
	}
	if c.Fail != nil {
		in.Fail = func(err error) (engine.Outcome, error) {
			switch o := c.Fail(r, err); o {
			case engine.FailOpen, engine.FailClosed, engine.Overloaded, engine.Error:
				return o, err
			default:
				return engine.FailClosed, fmt.Errorf("httplimit: Config.Fail answered %v, not a failure outcome; answering fail_closed: %w", o, err)
			}
		}
	}
}

// Request reads r into the pipeline's form; path is its escaped path (the
// canonical path, once a proxy has cleaned it).
func Request(r *http.Request, path string) *pipeline.Request {
	return &pipeline.Request{Method: r.Method, Host: r.Host, Path: path, Query: r.URL.RawQuery,
		Header: r.Header, Peer: r.RemoteAddr}
}

// serve serves a request that was not decided (unkeyed, failed open):
// nothing was taken, so nothing is settled, but the ResponseCost field is
// kept from the client all the same.
func (h *handler) serve(w http.ResponseWriter, r *http.Request) {
	if h.cfg.ResponseCost.Field == "" {
		h.next.ServeHTTP(w, r)
		return
	}
	cw := &costWriter{ResponseWriter: w, field: textproto.CanonicalMIMEHeaderKey(h.cfg.ResponseCost.Field)}
	h.next.ServeHTTP(cw, r)
	cw.finish()
}

func (h *handler) refuse(w http.ResponseWriter, r *http.Request, d Decision) {
	if d.Outcome.Status() == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if h.cfg.Refused != nil {
		h.cfg.Refused(w, r, d)
		return
	}
	WriteRefusedFor(w, r, d, h.cfg.Problems)
}

// WriteRefusedFor answers r, refused for an error, as WriteRefused does,
// except that a 503 (engine.FailClosed, engine.Overloaded) is RFC 9457
// problem details when p says so for r: the temporary-reduced-capacity
// type, WriteRefused's words as its detail.
func WriteRefusedFor(w http.ResponseWriter, r *http.Request, d Decision, p Problems) {
	if d.Outcome.Status() != http.StatusServiceUnavailable || !pipeline.ProblemMode(p).Wants(r.Header.Values("Accept")) {
		WriteRefused(w, d)
		return
	}
	msg := "Rate limiter unavailable"
	if d.Outcome == engine.Overloaded {
		msg = "Rate limiter overloaded; retry later"
	}
	pr := pipeline.ReducedCapacity(msg)
	writeProblem(w, &pr)
}

// WriteDeniedFor answers r, denied, as WriteDenied does, or with RFC 9457
// problem details when p says so for r: the quota-exceeded type, its
// violated-policies the limits that denied (each holds every limit's
// result, as SetFields takes it; res alone when it is shorter). Call
// SetFields first.
func WriteDeniedFor(w http.ResponseWriter, r *http.Request, res rl.Result, each []rl.LimitResult, p Problems) {
	if !pipeline.ProblemMode(p).Wants(r.Header.Values("Accept")) {
		WriteDenied(w, res)
		return
	}
	v := verdict(res, each)
	pr := pipeline.QuotaExceeded(&v)
	writeProblem(w, &pr)
}

// writeProblem writes pr's status and body.
func writeProblem(w http.ResponseWriter, pr *pipeline.Problem) {
	b := pr.JSON()
	h := w.Header()
	h.Set("Content-Type", pipeline.ProblemContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(pr.Status)
	w.Write(b)
}

// WriteRefused answers a request refused for an error with the status
// d.Outcome.Status gives and a plain-text body that says why without
// echoing the key:
//
//	400 Missing or invalid rate-limit key                  (engine.MissingKey)
//	400 Invalid rate-limit key: 300 bytes, longer than 256 (engine.InvalidKey, the rl.KeyError's Reason)
//	400 Invalid rate-limit cost                            (engine.InvalidCost)
//	503 Rate limiter unavailable                           (engine.FailClosed)
//	503 Rate limiter overloaded; retry later               (engine.Overloaded)
//	500 Rate limiter error                                 (engine.Error)
func WriteRefused(w http.ResponseWriter, d Decision) {
	var msg string
	switch d.Outcome {
	case engine.MissingKey:
		msg = "Missing or invalid rate-limit key"
	case engine.InvalidKey:
		msg = "Invalid rate-limit key"
		if reason := KeyReason(d.Err); reason != "" {
			msg += ": " + reason
		}
	case engine.InvalidCost:
		msg = "Invalid rate-limit cost"
	case engine.Overloaded:
		msg = "Rate limiter overloaded; retry later"
	case engine.Error:
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
// SetFields first.
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
