package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/outage"
	"github.com/rlcore/rl/store"
)

// Options configures an Engine. Zero fields take the documented defaults.
type Options struct {
	// Store keeps the state and decides; required.
	Store store.Store
	// Clock is the decision clock. Default rl.CoarseClock.
	Clock rl.Clock
	// MaxKeyLength bounds the keys the store sees ("<base>:<key>"), in
	// bytes. Default rl.DefaultMaxKeyLength.
	MaxKeyLength int
	// MaxInFlightPerKey bounds the decisions on one key (of one target)
	// waiting for the store at once; beyond it they are refused for load
	// (Overloaded), so one hot key cannot take every connection of a
	// database pool from the other keys. Keys share 4096 counters by
	// hash, so a bound may occasionally cover two keys. 0: no bound.
	MaxInFlightPerKey int
	// ShadowUnsupported, if set, says that Store cannot decide shadow
	// limits, and why: Compile refuses a policy with one, wrapping it.
	ShadowUnsupported error
	// OnOverload, if set, is called for every decision refused for load
	// before or by the store, with the reason: "key_in_flight" (the
	// per-key bound) or "store_busy" (store.ErrBusy). It is the place for
	// a metric (rl_overload_rejected_total{reason}).
	OnOverload func(reason string)
	// OnDecision, if set, is called after every decision Decide makes,
	// whatever its outcome, with the target, the request, the decision
	// and how long the store took (0 for a decision refused before it:
	// the per-key bound). It is the place for a log of decisions
	// (internal/request/decisionlog); unset, Decide reads no clock for it.
	OnDecision func(ctx context.Context, t *Target, req rl.Request, d Decision, took time.Duration)
}

// Engine decides requests over one store: the per-key gate, the store
// call, the outage detector and the failure rule, once for every front
// end. It is safe for concurrent use.
type Engine struct {
	store      store.Store
	clock      rl.Clock
	maxKey     int
	gate       *keyGate // nil: no per-key bound
	outage     outage.Detector
	noShadow   error
	onOverload func(string)
	onDecision func(context.Context, *Target, rl.Request, Decision, time.Duration)
}

// New returns an Engine over opts.Store.
func New(opts Options) (*Engine, error) {
	if opts.Store == nil {
		return nil, errors.New("engine: Options.Store is nil")
	}
	e := &Engine{store: opts.Store, clock: opts.Clock, maxKey: opts.MaxKeyLength, noShadow: opts.ShadowUnsupported,
		onOverload: opts.OnOverload, onDecision: opts.OnDecision}
	if e.clock == nil {
		e.clock = rl.CoarseClock
	}
	if e.maxKey <= 0 {
		e.maxKey = rl.DefaultMaxKeyLength
	}
	if opts.MaxInFlightPerKey > 0 {
		e.gate = newKeyGate(opts.MaxInFlightPerKey)
	}
	if e.onOverload == nil {
		e.onOverload = func(string) {}
	}
	return e, nil
}

// Store returns the store the Engine decides over.
func (e *Engine) Store() store.Store { return e.store }

// Clock returns the decision clock.
func (e *Engine) Clock() rl.Clock { return e.clock }

// MaxKeyLength returns the longest key the store sees, in bytes.
func (e *Engine) MaxKeyLength() int { return e.maxKey }

// ShadowUnsupported returns Options.ShadowUnsupported: nil when the store
// decides shadow limits, else why it cannot.
func (e *Engine) ShadowUnsupported() error { return e.noShadow }

// Limiter returns a limiter over the Engine's store and clock whose keys
// are "<base>:<key>", deciding p unless a request names its own policy.
func (e *Engine) Limiter(base string, p *rl.Policy) (*rl.Limiter, error) {
	return rl.New(rl.Config{Store: e.store, Policy: p, BaseKey: base, Clock: e.clock, MaxKeyLength: e.maxKey})
}

// Compile turns validated limits into the policy that decides them, in
// one step: rl.NewPolicy, and the store's ability to decide a shadow limit
// (Options.ShadowUnsupported). what names the limits in an error.
func (e *Engine) Compile(what string, limits []rl.Limit) (*rl.Policy, error) {
	p, err := rl.NewPolicy(limits...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if p.Shadowed() && e.noShadow != nil {
		return nil, fmt.Errorf("%s has a shadow limit, which this store cannot decide: %w", what, e.noShadow)
	}
	return p, nil
}

// Target is what a decision is made against: a limiter (a rule's, a
// domain's, inline limits') and the policy of the key.
type Target struct {
	// Name is the limiter's base key: the per-key gate's namespace.
	Name string
	// Limiter decides.
	Limiter *rl.Limiter
	// Policy is the key's policy (a rule's, or an override's); nil: the
	// limiter's.
	Policy *rl.Policy
	// FailOpen admits requests when the store is down (an outage, never
	// load).
	FailOpen bool
}

// Gate is how a decision takes its place in the per-key bound
// (Options.MaxInFlightPerKey).
type Gate uint8

const (
	// GateCheck: refused at the bound (Overloaded): a check, a peek.
	GateCheck Gate = iota
	// GateSettle: never refused, taking its place over the bound if it
	// must, so the key's checks meet the bound sooner while it runs. A
	// settle refused would leave the estimate, so load on a key would
	// turn its debts into admissions; a proxy's settles need no bound
	// of their own, being bounded by admissions (one per admitted
	// request, each of which passed the bound).
	GateSettle
	// GateSettleBounded: a settle that follows no admission the bound
	// counted (a decision API caller may send any number on one key):
	// refused beyond the bound's number of settles in flight on the key,
	// counting among its decisions too. Only settles count toward it:
	// the key's checks, which its own client may drive, never refuse its
	// settles, while a flood of settles on one key cannot take every
	// store connection from the other keys.
	GateSettleBounded
)

// Decision is what Decide made of one request.
type Decision struct {
	// Outcome: Allowed or Denied when decided; else InvalidKey,
	// InvalidCost, FailOpen, FailClosed, Overloaded or Error.
	Outcome Outcome
	// Result is the limiter's, for Allowed and Denied.
	Result rl.Result
	// Class is the failure's (outage.Class); 0 when decided.
	Class outage.Class
	// Err is nil when decided; the limiter's error for InvalidKey and
	// InvalidCost; otherwise that error classified (outage.Classified),
	// for FailOpen too.
	Err error
}

// ErrOverloaded is a decision refused because too many are in flight on
// its key (the per-key bound): load.
var ErrOverloaded = fmt.Errorf("too many decisions in flight on the key: %w", outage.ErrOverloaded)

// Decide decides req against t: takes the key's place in the per-key bound
// as g says, calls the store, records the decision in the outage detector
// and, when it fails, classifies the failure by the one failure rule
// (Classify) into the Decision's Outcome. req.Policy defaults to t.Policy.
// It then reports the decision to Options.OnDecision, if set.
func (e *Engine) Decide(ctx context.Context, t *Target, req rl.Request, g Gate) Decision {
	if e.onDecision == nil {
		return e.decide(ctx, t, req, g, nil)
	}
	return e.decideReported(ctx, t, req, g)
}

// decideReported is Decide with Options.OnDecision, apart from it so that
// Decide stays as lean as it was when no one listens.
func (e *Engine) decideReported(ctx context.Context, t *Target, req rl.Request, g Gate) Decision {
	var took time.Duration
	d := e.decide(ctx, t, req, g, &took)
	e.onDecision(ctx, t, req, d, took)
	return d
}

// decide is Decide, writing the store's time to *took when took is set.
func (e *Engine) decide(ctx context.Context, t *Target, req rl.Request, g Gate, took *time.Duration) Decision {
	if req.Policy == nil {
		req.Policy = t.Policy
	}
	if e.gate != nil {
		switch g {
		case GateCheck:
			slot, ok := e.gate.enter(t.Name, req.Key)
			if !ok {
				e.onOverload("key_in_flight")
				return Decision{Outcome: Overloaded, Class: outage.Load, Err: outage.Classified(outage.Load, ErrOverloaded)}
			}
			defer slot.Add(-1)
		case GateSettle:
			defer e.gate.settle(t.Name, req.Key).Add(-1)
		case GateSettleBounded:
			slot, ok := e.gate.enterSettle(t.Name, req.Key)
			if !ok {
				e.onOverload("key_in_flight")
				return Decision{Outcome: Overloaded, Class: outage.Load, Err: outage.Classified(outage.Load, ErrOverloaded)}
			}
			defer slot.leaveSettle()
		}
	}
	begun := e.outage.Begin()
	var start time.Time
	if took != nil {
		start = time.Now()
	}
	res, err := t.Limiter.Do(ctx, req)
	if took != nil {
		*took = time.Since(start)
	}
	if err == nil {
		e.outage.Success()
		if res.Allowed {
			return Decision{Outcome: Allowed, Result: res}
		}
		return Decision{Outcome: Denied, Result: res}
	}
	return e.fail(begun, err, t.FailOpen)
}

// fail is the Decision of a failed decision begun at begun.
func (e *Engine) fail(begun outage.Token, err error, failOpen bool) Decision {
	class := e.Classify(begun, err)
	if class == outage.Invalid {
		if errors.Is(err, core.ErrCost) {
			return Decision{Outcome: InvalidCost, Class: class, Err: err}
		}
		return Decision{Outcome: InvalidKey, Class: class, Err: err}
	}
	return Decision{Outcome: OutcomeOf(class, failOpen), Class: class, Err: outage.Classified(class, err)}
}

// Classify tells what err, the error of a decision begun at begun (an
// outage.Token of Begin), means by the one failure rule (outage.Class), in
// the Engine's one outage detector: only a store that is down is an
// Outage. Load from the store (store.ErrBusy) is reported to
// Options.OnOverload.
func (e *Engine) Classify(begun outage.Token, err error) outage.Class {
	c := e.outage.Classify(begun, err)
	if c == outage.Load && errors.Is(err, store.ErrBusy) {
		e.onOverload("store_busy")
	}
	return c
}

// Begin returns the outage token of a decision about to be made outside
// Decide, for Classify; Success records one the store completed.
func (e *Engine) Begin() outage.Token { return e.outage.Begin() }

// Success records a decision the store completed: no timeout of a
// decision begun before it counts toward an outage.
func (e *Engine) Success() { e.outage.Success() }

// Slot is a place in the per-key bound, taken by Enter; Leave gives it
// back.
type Slot struct{ c *atomic.Int32 }

// Leave gives the place back; a zero Slot (no bound) does nothing.
func (s Slot) Leave() {
	if s.c != nil {
		s.c.Add(-1)
	}
}

// Enter takes a place among the decisions in flight on key of namespace
// ns, for a front end that calls the store itself (a reset). It reports
// false at the bound (reported to Options.OnOverload: answer as load).
func (e *Engine) Enter(ns, key string) (Slot, bool) {
	if e.gate == nil {
		return Slot{}, true
	}
	c, ok := e.gate.enter(ns, key)
	if !ok {
		e.onOverload("key_in_flight")
		return Slot{}, false
	}
	return Slot{c}, true
}
