package engine

import "github.com/rlcore/rl/internal/request/outage"

// Outcome is what became of one decision: the one vocabulary of every
// front end. The proxy and the decision API count it in
// rl_decisions_total, the middleware reports it (httplimit.Outcome is this
// type), the gRPC rate limit service answers each descriptor by it.
type Outcome uint8

// Outcomes.
const (
	// Allowed: decided and admitted.
	Allowed Outcome = iota + 1
	// Denied: decided and refused (HTTP 429, OVER_LIMIT).
	Denied
	// MissingKey: the request carries no key (HTTP 400).
	MissingKey
	// Unkeyed: no key, and the front end serves such requests unlimited,
	// without a decision.
	Unkeyed
	// InvalidKey: the limiter refused the key (rl.ErrInvalidKey; 400).
	InvalidKey
	// InvalidCost: the cost is invalid (a cost header, or core.ErrCost
	// from the limiter; 400).
	InvalidCost
	// FailOpen: the store is down (outage.Outage) and the target fails
	// open: admitted without a decision.
	FailOpen
	// FailClosed: the store failed and the request is refused (503):
	// an outage of a target that fails closed, or a store failure that
	// is not an outage (outage.Failed).
	FailClosed
	// Overloaded: refused for load (outage.Load: a busy or full store,
	// the per-key bound, too many requests in flight; 503 with
	// Retry-After), never admitted.
	Overloaded
	// Error: the decision failed for a reason other than the store's (a
	// corrupt state, a bug: outage.Internal; 500), never admitted.
	Error
)

var outcomeNames = [...]string{"", "allowed", "denied", "missing_key", "unkeyed", "invalid_key", "invalid_cost", "fail_open", "fail_closed", "overloaded", "error"}

// String returns the outcome's name in snake case ("fail_open"), fit for a
// metric label; "unknown" for a value that is none of the outcomes.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o != 0 {
		return outcomeNames[o]
	}
	return "unknown"
}

// Outcomes returns every outcome, in order.
func Outcomes() []Outcome {
	out := make([]Outcome, 0, len(outcomeNames)-1)
	for o := Allowed; int(o) < len(outcomeNames); o++ {
		out = append(out, o)
	}
	return out
}

// Status returns the HTTP status of the outcome: 200 for Allowed, Unkeyed
// and FailOpen (what the next handler writes), 429, 400, 503 or 500.
func (o Outcome) Status() int {
	// Numbers, not net/http's names: the proxy-wasm filter links this
	// package, and net/http would weigh on its WebAssembly module.
	switch o {
	case Allowed, Unkeyed, FailOpen:
		return 200
	case Denied:
		return 429
	case MissingKey, InvalidKey, InvalidCost:
		return 400
	case Error:
		return 500
	}
	return 503
}

// Failure reports whether the outcome is a failure of the decision itself
// (FailOpen, FailClosed, Overloaded, Error), not a verdict or a bad
// request.
func (o Outcome) Failure() bool {
	switch o {
	case FailOpen, FailClosed, Overloaded, Error:
		return true
	}
	return false
}

// OutcomeOf is the outcome of a failure of class c, by the one failure rule
// (outage.Class): load is Overloaded; an outage FailOpen when failOpen,
// else FailClosed; another store failure FailClosed; anything else Error.
// An Invalid class is a request error whose outcome depends on the error
// (InvalidCost for core.ErrCost): Classify tells them apart.
func OutcomeOf(c outage.Class, failOpen bool) Outcome {
	switch c {
	case outage.Invalid:
		return InvalidKey
	case outage.Load:
		return Overloaded
	case outage.Outage:
		if failOpen {
			return FailOpen
		}
	case outage.Internal:
		return Error
	}
	return FailClosed
}
