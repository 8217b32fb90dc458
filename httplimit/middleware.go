// Package httplimit is net/http middleware over an rl.Limiter: it keys each
// request (client IP, a header, an API key, a query parameter or a function
// of yours), decides it, writes the rate-limit header fields on every
// response (every limit of the policy, SetFields) and answers 429 with
// Retry-After on denial.
//
// When the store fails, each middleware either fails open (serves the
// request) or closed (503), and reports the error to a hook. Only an
// outage opens: a store that is down (store.ErrUnavailable), and when it
// only times out, the 3rd timeout of decisions that began after the last
// decision completed, with none completed since: a store slow under load,
// or a hot key whose queued decisions time out together, times out some
// decisions while it completes others, and load must never turn into
// admissions. A busy or full store (store.ErrBusy) is load, answered 503
// with Retry-After and never served; a corrupt state, 500. This is the one
// failure rule of the project (internal/request/outage), which rl-wasm-host's
// proxy, decision API and gRPC service and the proxy-wasm filter follow
// too. Config.Fail chooses per request and per error instead, OnDecision
// observes every outcome (for metrics), and Denied and Refused write the
// responses.
//
// A cost known only once the handler has run (the tokens a model
// generated, the bytes sent) is settled: the request is charged an
// estimate when it arrives, the handler writes the actual cost in a
// response field (Config.ResponseCost), and the middleware settles the
// difference on the same key after the handler returns, putting the key
// in debt or refunding it: also when the handler panics once the field
// was written, as a reverse proxy does when its client goes away
// mid-body, so that hanging up never escapes a cost already known.
//
// A limit bounds each key, so it is only as strong as the key: ClientIP
// keys IPv4 clients per address and IPv6 clients per /64 (IPKeyConfig
// changes both), while Header, Query and APIKey key by whatever the client
// sends, which bounds nothing unless a component you trust sets or verifies
// that value. They read a request by rl-wasm-host's key rule
// (internal/request/pipeline's Key): one place, given once, never a fallback; an
// API key kept as its digest.
package httplimit

import (
	"context"
	"net/http"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/httpflow"
	"github.com/rlcore/rl/internal/request/pipeline"
)

// Limiter decides requests. *rl.Limiter is one; wrap one to add to every
// decision (a concurrency bound, tracing) or to choose a limiter per
// request.
type Limiter interface {
	Do(ctx context.Context, req rl.Request) (rl.Result, error)
}

// CostFunc returns the cost of a request (what it takes from every limit).
// An error means the request states an invalid cost: the middleware
// answers 400 (OutcomeInvalidCost).
type CostFunc func(r *http.Request) (int64, error)

// Config configures a middleware.
type Config struct {
	// Limiter decides; required (a nil *rl.Limiter is refused too).
	Limiter Limiter
	// Key keys the request; required (ClientIP() is the usual choice).
	Key KeyFunc
	// Policy chooses the policy per request (per route, per plan); nil or
	// a nil result means the Limiter's policy.
	Policy func(r *http.Request) *rl.Policy
	// Cost is the cost of a request; nil means 1.
	Cost CostFunc
	// FailOpen serves requests when the store is down (an outage);
	// otherwise they are answered 503 (fail closed). An outage is a store
	// failure that matches store.ErrUnavailable, and for a timeout
	// (context.DeadlineExceeded) only the third of decisions that began
	// after the last decision completed, none completing since (counted
	// per middleware, across every handler it wraps); every other store
	// failure is answered OutcomeFailClosed. A busy store (store.ErrBusy:
	// every connection in use) is load, not an outage: it is answered
	// OutcomeOverloaded even so. Either way OnError hears of it. Fail, if
	// set, decides instead; New refuses both.
	FailOpen bool
	// Fail, if set, chooses how to answer a request whose decision failed
	// for a reason that is not the request's (not an invalid key or
	// cost): OutcomeFailOpen, OutcomeFailClosed, OutcomeOverloaded or
	// OutcomeError. Any other result is a bug in Fail: the request is
	// answered OutcomeFailClosed, and the error OnError and OnDecision
	// see says so. Fail replaces FailOpen (New refuses both), so it can
	// choose per request (per route, fail open only for some) and per
	// error (fail open only on an outage, never on load).
	Fail func(r *http.Request, err error) Outcome
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
	// outcome of OutcomeMissingKey, OutcomeInvalidKey, OutcomeInvalidCost
	// (400), OutcomeFailClosed, OutcomeOverloaded (503) or OutcomeError
	// (500), with the status Outcome.Status gives. 503s already carry
	// "Retry-After: 1". Nil means WriteRefusedFor (plain text, or problem
	// details for a 503 as Problems chooses).
	Refused func(w http.ResponseWriter, r *http.Request, d Decision)
	// AllowMissingKey serves requests whose key function fails, unlimited
	// (OutcomeUnkeyed), instead of answering 400 (OutcomeMissingKey).
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

// Outcome is what a middleware did with a request: the one outcome
// vocabulary of the project's front ends (rl-wasm-host's proxy, decision
// API and gRPC service count the same outcomes). Its String is the name in
// snake case ("fail_open"), fit for a metric label; its Status the
// response status: 200 for OutcomeAllowed, OutcomeUnkeyed and
// OutcomeFailOpen (what the next handler writes), 429, 400, 503 or 500.
type Outcome = engine.Outcome

// Outcomes, as Decision reports them.
const (
	// OutcomeAllowed: decided and admitted.
	OutcomeAllowed = engine.Allowed
	// OutcomeDenied: decided and refused, 429.
	OutcomeDenied = engine.Denied
	// OutcomeMissingKey: the key function failed; 400.
	OutcomeMissingKey = engine.MissingKey
	// OutcomeUnkeyed: the key function failed and Config.AllowMissingKey
	// is set; served unlimited, without a decision.
	OutcomeUnkeyed = engine.Unkeyed
	// OutcomeInvalidKey: the limiter refused the key (rl.ErrInvalidKey);
	// 400.
	OutcomeInvalidKey = engine.InvalidKey
	// OutcomeInvalidCost: the cost function failed, or the limiter refused
	// the cost (core.ErrCost); 400.
	OutcomeInvalidCost = engine.InvalidCost
	// OutcomeFailOpen: the decision failed; served unlimited.
	OutcomeFailOpen = engine.FailOpen
	// OutcomeFailClosed: the decision failed; 503 "Rate limiter
	// unavailable".
	OutcomeFailClosed = engine.FailClosed
	// OutcomeOverloaded: the decision failed because of load
	// (store.ErrBusy by default); 503 "Rate limiter overloaded; retry
	// later", never served.
	OutcomeOverloaded = engine.Overloaded
	// OutcomeError: the decision failed for a reason other than the
	// store's; 500.
	OutcomeError = engine.Error
)

// Decision describes what a middleware did with one request.
type Decision struct {
	Outcome Outcome
	// Key is the request's key; empty for OutcomeMissingKey and
	// OutcomeUnkeyed.
	Key string
	// Cost is the cost asked for; 0 before the cost is known.
	Cost int64
	// Result is the limiter's decision, for OutcomeAllowed and
	// OutcomeDenied.
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
// or a Key, and one with both Fail and FailOpen.
//
// The middleware is rl-wasm-host's proxy flow (internal/request/httpflow:
// key, cost, decide, classify, answer, settle), which the proxy runs too:
// the same request gets the same answer from both.
func New(cfg Config) (func(http.Handler) http.Handler, error) {
	fc := httpflow.Config{Limiter: cfg.Limiter, Key: cfg.Key, Policy: cfg.Policy, Cost: cfg.Cost, FailOpen: cfg.FailOpen,
		Fail: cfg.Fail, OnError: cfg.OnError, Denied: cfg.Denied, AllowMissingKey: cfg.AllowMissingKey, Wait: cfg.Wait,
		Fields: httpflow.Fields(cfg.Fields), Problems: httpflow.Problems(cfg.Problems),
		ResponseCost: httpflow.ResponseCost(cfg.ResponseCost)}
	if f := cfg.OnDecision; f != nil {
		fc.OnDecision = func(r *http.Request, d httpflow.Decision) { f(r, Decision(d)) }
	}
	if f := cfg.Refused; f != nil {
		fc.Refused = func(w http.ResponseWriter, r *http.Request, d httpflow.Decision) { f(w, r, Decision(d)) }
	}
	if f := cfg.OnSettle; f != nil {
		fc.OnSettle = func(r *http.Request, s httpflow.Settlement) { f(r, Settlement(s)) }
	}
	return httpflow.New(fc)
}

// WriteRefusedFor answers r, refused for an error, as WriteRefused does,
// except that a 503 (OutcomeFailClosed, OutcomeOverloaded) is RFC 9457
// problem details when p says so for r: the temporary-reduced-capacity
// type, WriteRefused's words as its detail.
func WriteRefusedFor(w http.ResponseWriter, r *http.Request, d Decision, p Problems) {
	httpflow.WriteRefusedFor(w, r, httpflow.Decision(d), httpflow.Problems(p))
}

// WriteDeniedFor answers r, denied, as WriteDenied does, or with RFC 9457
// problem details when p says so for r: the quota-exceeded type, its
// violated-policies the limits that denied (each holds every limit's
// result, as SetFields takes it; res alone when it is shorter). Call
// SetFields first.
func WriteDeniedFor(w http.ResponseWriter, r *http.Request, res rl.Result, each []rl.LimitResult, p Problems) {
	httpflow.WriteDeniedFor(w, r, res, each, httpflow.Problems(p))
}

// WriteRefused answers a request refused for an error with the status
// d.Outcome.Status gives and a plain-text body that says why without
// echoing the key:
//
//	400 Missing or invalid rate-limit key                  (OutcomeMissingKey)
//	400 Invalid rate-limit key: 300 bytes, longer than 256 (OutcomeInvalidKey, the rl.KeyError's Reason)
//	400 Invalid rate-limit cost                            (OutcomeInvalidCost)
//	503 Rate limiter unavailable                           (OutcomeFailClosed)
//	503 Rate limiter overloaded; retry later               (OutcomeOverloaded)
//	500 Rate limiter error                                 (OutcomeError)
func WriteRefused(w http.ResponseWriter, d Decision) { httpflow.WriteRefused(w, httpflow.Decision(d)) }

// KeyReason says why the limiter refused a key (the Reason of an
// *rl.KeyError in err's chain), without the key; "" when err has none.
func KeyReason(err error) string { return httpflow.KeyReason(err) }

// WriteDenied answers a denied request: status 429 and the plain-text body
// "Rate limit exceeded" (saying so when the cost can never fit). Call
// SetFields first.
func WriteDenied(w http.ResponseWriter, res rl.Result) { httpflow.WriteDenied(w, res) }
