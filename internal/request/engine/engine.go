package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/outage"
	"github.com/rlcore/rl/internal/request/ruleconfig"
	"github.com/rlcore/rl/store"
)

// Options configures an Engine. Zero fields take the documented defaults.
type Options struct {
	// Store keeps the state and decides: the store of the limiters that
	// Limiter returns. Nil: an Engine that decides only through the
	// limiters its rules bring (httplimit's), whose Limiter fails.
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
}

// New returns an Engine over opts.Store.
func New(opts Options) (*Engine, error) {
	e := &Engine{store: opts.Store, clock: opts.Clock, maxKey: opts.MaxKeyLength, noShadow: opts.ShadowUnsupported,
		onOverload: opts.OnOverload}
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
	if e.store == nil {
		return nil, errors.New("engine: no store (Options.Store) to decide " + base + "'s limits")
	}
	return rl.New(rl.Config{Store: e.store, Policy: p, BaseKey: base, Clock: e.clock, MaxKeyLength: e.maxKey})
}

// Policy turns limits that ruleconfig validated (CheckLimits, Check) into
// the policy that decides them, in one step: ruleconfig.Compile and
// rl.PolicyOf, nothing checked again. It is the one step every front end's
// configured limits take (rl-wasm-host's rules, overrides and inline
// limits, the gRPC service's descriptors).
func Policy(limits []ruleconfig.NamedLimit) (*rl.Policy, error) {
	sp, err := ruleconfig.Compile(limits)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", rl.ErrPolicy, err)
	}
	return rl.PolicyOf(sp)
}

// Compile is Policy, refusing a shadow limit when the store cannot decide
// one (Options.ShadowUnsupported). what names the limits in an error.
func (e *Engine) Compile(what string, limits []ruleconfig.NamedLimit) (*rl.Policy, error) {
	p, err := Policy(limits)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if p.Shadowed() && e.noShadow != nil {
		return nil, fmt.Errorf("%s has a shadow limit, which this store cannot decide: %w", what, e.noShadow)
	}
	return p, nil
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

// ErrOverloaded is a decision refused because too many are in flight on
// its key (the per-key bound): load.
var ErrOverloaded = fmt.Errorf("too many decisions in flight on the key: %w", outage.ErrOverloaded)

// decide is the per-key gate, decide and classify steps of Run: it takes
// the key's place in the per-key bound as g says, calls r's limiter,
// records the decision in the outage detector and, when it fails,
// classifies the failure by the one failure rule (classify) into res's
// Outcome (fail, when set, answering a failure that is not the request's
// in its place).
func (e *Engine) decide(ctx context.Context, r *Rule, req rl.Request, g Gate, fail func(error) (Outcome, error), res *Result) {
	if e.gate != nil {
		switch g {
		case GateCheck:
			slot, ok := e.gate.enter(r.Name, req.Key)
			if !ok {
				e.onOverload("key_in_flight")
				res.Outcome, res.Class, res.Err = Overloaded, outage.Load, outage.Classified(outage.Load, ErrOverloaded)
				return
			}
			defer slot.Add(-1)
		case GateSettle:
			defer e.gate.settle(r.Name, req.Key).Add(-1)
		case GateSettleBounded:
			slot, ok := e.gate.enterSettle(r.Name, req.Key)
			if !ok {
				e.onOverload("key_in_flight")
				res.Outcome, res.Class, res.Err = Overloaded, outage.Load, outage.Classified(outage.Load, ErrOverloaded)
				return
			}
			defer slot.leaveSettle()
		}
	}
	begun := e.outage.Begin()
	lr, err := r.Limiter.Do(ctx, req)
	if err == nil {
		e.outage.Success()
		res.Result, res.Outcome = lr, Denied
		if lr.Allowed {
			res.Outcome = Allowed
		}
		return
	}
	e.fail(begun, err, r.FailOpen, fail, res)
}

// fail classifies err, the error of a decision begun at begun, into res.
func (e *Engine) fail(begun outage.Token, err error, failOpen bool, hook func(error) (Outcome, error), res *Result) {
	class := e.classify(begun, err)
	res.Class = class
	switch {
	case class == outage.Invalid && errors.Is(err, core.ErrCost):
		res.Outcome, res.Err = InvalidCost, err
		return
	case class == outage.Invalid:
		res.Outcome, res.Err = InvalidKey, err
		return
	}
	res.Outcome, res.Err = OutcomeOf(class, failOpen), outage.Classified(class, err)
	if hook == nil {
		return
	}
	o, herr := hook(err)
	if !o.Failure() {
		o = FailClosed // a hook's bug: never admitted
	}
	res.Outcome, res.Err = o, herr
}

// classify tells what err, the error of a decision begun at begun, means
// by the one failure rule (outage.Class), in the Engine's one outage
// detector: only a store that is down is an Outage. Load from the store
// (store.ErrBusy) is reported to Options.OnOverload.
func (e *Engine) classify(begun outage.Token, err error) outage.Class {
	c := e.outage.Classify(begun, err)
	if c == outage.Load && errors.Is(err, store.ErrBusy) {
		e.onOverload("store_busy")
	}
	return c
}
