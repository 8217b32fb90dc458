package outage

import (
	"context"
	"errors"

	rl "github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// Class is what a failed decision means. It is the one failure rule: the
// middleware (package httplimit), the service's proxy and decision API
// (internal/frontend/service), its gRPC RateLimitService (internal/frontend/rls) and the
// proxy-wasm filter (proxywasm) classify every error with Classify and
// answer by the class, each in its protocol:
//
//	class     meaning                                       HTTP                          gRPC (RLS)
//	Invalid   the request is at fault                       400, saying why               INVALID_ARGUMENT
//	Load      the store, or one key, is saturated or full   503 + Retry-After             OVER_LIMIT
//	Outage    the store is down                             the rule's fail policy        the rule's fail policy
//	Failed    a store failure that is not an outage (yet)   503 + Retry-After             OVER_LIMIT
//	Internal  neither: a corrupt state, a bug               500                           OVER_LIMIT
//
// Only an Outage is answered by a fail policy: load, a lone timeout or a
// corrupt state never turns into admissions (a flood of keys, a hot key or
// a poisoned state would otherwise buy a way around every limit).
type Class uint8

const (
	// Invalid: an invalid key (rl.ErrInvalidKey) or cost (core.ErrCost).
	Invalid Class = iota + 1
	// Load: store.ErrBusy (a saturated pool; store.ErrFull, a store full
	// of keys, matches it), or ErrOverloaded (a front end's own bound).
	Load
	// Outage: store.ErrUnavailable by the Detector's rule.
	Outage
	// Failed: any other store failure (rl.ErrStore, or store.ErrUnavailable
	// not (yet) an outage: a timeout below the Detector's count).
	Failed
	// Internal: anything else: a state the store returned that the core
	// refuses (core.ErrState), another core error (a bug).
	Internal
)

var classNames = [...]string{Invalid: "invalid", Load: "load", Outage: "outage", Failed: "failed", Internal: "internal"}

// String returns the class's name, for logs and metric labels.
func (c Class) String() string {
	if int(c) < len(classNames) && classNames[c] != "" {
		return classNames[c]
	}
	return "unknown"
}

// ErrOverloaded is a front end's own bound reached (decisions in flight on
// one key, say): load, classified with store.ErrBusy.
var ErrOverloaded = errors.New("overloaded")

// Classify tells what err, the error of a decision begun at begun (Begin),
// means, and records it in d (Outage). A nil d classifies without the
// timeout count: a timeout is Failed, another store.ErrUnavailable an
// Outage (for a front end whose answer to both is the same). An error that
// carries its class (Classified) keeps it and is not recorded again.
func (d *Detector) Classify(begun Token, err error) Class {
	var ce *Error
	switch {
	case errors.As(err, &ce):
		return ce.Class
	case errors.Is(err, rl.ErrInvalidKey), errors.Is(err, core.ErrCost):
		return Invalid
	case errors.Is(err, store.ErrBusy), errors.Is(err, ErrOverloaded):
		return Load
	case d != nil && d.Outage(begun, err):
		return Outage
	case d == nil && errors.Is(err, store.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded):
		return Outage
	case errors.Is(err, rl.ErrStore), errors.Is(err, store.ErrUnavailable):
		return Failed
	}
	return Internal
}

// Error is an error with its class, for a front end that classifies where
// the decision is made and answers elsewhere: Classify returns its Class.
type Error struct {
	Class Class
	Err   error
}

// Classified returns err with class c.
func Classified(c Class, err error) error { return &Error{c, err} }

// ClassOf returns the class err carries (Classified), or 0.
func ClassOf(err error) Class {
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Class
	}
	return 0
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Refusal is the HTTP answer to a request refused for class c, when the
// fail policy does not admit it: the status (net/http's numbers; the
// package stays free of net/http for the filter) and the plain-text body. A 503
// also carries "Retry-After: 1". (Invalid's body says what is wrong; this
// one is generic.)
func (c Class) Refusal() (status int, body string) {
	switch c {
	case Invalid:
		return 400, "Bad request"
	case Load:
		return 503, "Rate limiter overloaded; retry later"
	case Internal:
		return 500, "Rate limiter error"
	}
	return 503, "Rate limiter unavailable"
}
