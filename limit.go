package rl

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// MaxLimits is the most limits one Policy holds.
const MaxLimits = core.MaxLimits

// Limit is one rate limit of a Policy.
type Limit struct {
	// Name identifies the limit's state within a key and appears in
	// results and headers. Empty means "default" for a single limit, and
	// "<algorithm>_<window>" (e.g. "fixed_window_1m") among several: see
	// DefaultLimitName.
	Name string
	// Algorithm selects the algorithm; see package core.
	Algorithm core.Algorithm
	// Limit is the quota per Window, the bucket capacity, or GCRA's burst:
	// how many units pass at once from a fresh state.
	Limit int64
	// Window is the window, or the period over which Rate units are
	// restored for the bucket algorithms and GCRA. Whole microseconds; a
	// fraction is truncated.
	Window time.Duration
	// Rate is the units restored per Window (TokenBucket, LeakyBucket,
	// GCRA); 0 means Limit. Must be 0 for the window algorithms.
	Rate int64
	// Shadow makes the limit a shadow limit: a candidate decided with the
	// policy's enforced limits, on the same key and in the same atomic
	// step of the store, that never denies. Its state evolves as if it
	// were enforced on its own: it is charged exactly when the call is
	// admitted (by the enforced limits) and it would admit the cost
	// itself; when it would deny, its result says so (a would-deny:
	// LimitResult.Allowed false) and it is not charged; when the enforced
	// limits deny, nothing is charged anywhere and its result is a peek of
	// the cost. A policy of only shadow limits admits every call. Its
	// state is kept under its name like any limit's, so clearing Shadow
	// later enforces it with the count it has. Every store decides shadow
	// limits (pgstore's ModeSQL since migration 18).
	Shadow bool
}

func (l Limit) core() core.Limit {
	return core.Limit{Algorithm: l.Algorithm, Limit: l.Limit, Window: int64(l.Window / time.Microsecond), Rate: l.Rate}
}

// Policy is a validated, immutable set of limits decided together, all or
// nothing (its shadow limits aside: see Limit.Shadow). Build policies once
// and choose one per call: a free plan and a paid plan are two policies
// over one Limiter. NewPolicy compiles the
// limits (core.Compile) into the store.Policy every call of the policy
// hands its store, so no call checks or copies them again.
type Policy struct {
	src []Limit
	sp  *store.Policy
	// charged caches Charged's policies, by their store.Policy, up to
	// store.Policy's own bound (nCharged counts them).
	charged  sync.Map // *store.Policy → *Policy
	nCharged atomic.Int32
}

// maxCharged bounds the policies Charged keeps, as store.Policy.Charged
// bounds its own.
const maxCharged = 64

// ErrPolicy is matched by every error of NewPolicy.
var ErrPolicy = errors.New("rl: invalid policy")

// NewPolicy validates limits and returns them as a Policy. Errors match
// ErrPolicy and, for a bad parameter, the core.Error naming it.
func NewPolicy(limits ...Limit) (*Policy, error) {
	if len(limits) == 0 || len(limits) > MaxLimits {
		return nil, fmt.Errorf("%w: %d limits, want 1 to %d", ErrPolicy, len(limits), MaxLimits)
	}
	p := &Policy{src: make([]Limit, len(limits))}
	cls, names := make([]core.Limit, len(limits)), make([]string, len(limits))
	var shadows []string
	seen := make(map[string]bool, len(limits))
	for i, l := range limits {
		if l.Name == "" {
			l.Name = DefaultLimitName(l, len(limits))
		}
		if seen[l.Name] {
			return nil, fmt.Errorf("%w: two limits named %q", ErrPolicy, l.Name)
		}
		seen[l.Name] = true
		c := l.core()
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("%w: limit %q: %w", ErrPolicy, l.Name, err)
		}
		p.src[i], cls[i], names[i] = l, c, l.Name
		if l.Shadow {
			shadows = append(shadows, l.Name)
		}
	}
	sp, err := store.NewPolicy(names, cls)
	if err == nil && shadows != nil {
		sp, err = sp.WithShadow(shadows...)
	}
	if err != nil { // not reached: the limits were checked above
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	p.sp = sp
	return p, nil
}

// PolicyOf returns sp, limits already checked and compiled (store.NewPolicy:
// named, core.Compile'd, shadow limits marked with WithShadow), as a Policy,
// without checking them again: the one step from a validated configuration
// to the policy that decides it (rl-wasm-host's rules compile through it).
// Errors match ErrPolicy: a nil sp, or an unnamed limit. Build policies of
// your own with NewPolicy.
func PolicyOf(sp *store.Policy) (*Policy, error) {
	if sp == nil || sp.Len() == 0 {
		return nil, fmt.Errorf("%w: no limits", ErrPolicy)
	}
	p := &Policy{src: make([]Limit, sp.Len()), sp: sp}
	for i, l := range sp.Limits() {
		name := sp.Names()[i]
		if name == "" {
			return nil, fmt.Errorf("%w: limit %d has no name", ErrPolicy, i)
		}
		p.src[i] = Limit{Name: name, Algorithm: l.Algorithm, Limit: l.Limit, Window: time.Duration(l.Window) * time.Microsecond,
			Rate: l.Rate, Shadow: sp.Shadow(i)}
	}
	return p, nil
}

// DefaultLimitName is the name NewPolicy gives an unnamed limit of a policy
// of n limits: "default" when it is alone, else its algorithm and window,
// as in "fixed_window_1m" or "token_bucket_1s" (see FormatWindow). State is
// kept per limit name, so every front end (a Go app, rl-wasm-host's rules
// and decision API, the proxy-wasm filter, the ratelimit service) names
// limits this way, from one source, and decides the same rows.
func DefaultLimitName(l Limit, n int) string {
	return core.DefaultLimitName(l.Algorithm, int64(l.Window/time.Microsecond), n)
}

// FormatWindow writes a window compactly: whole days as "1d", whole hours
// as "2h", whole minutes as "1m", anything else as time.Duration.String
// ("1s", "1.5s", "500ms"): core.FormatWindow, for a time.Duration.
func FormatWindow(d time.Duration) string {
	if d%time.Microsecond != 0 {
		return d.String() // finer than core's µs: no window
	}
	return core.FormatWindow(int64(d / time.Microsecond))
}

// MustPolicy is NewPolicy for limits known to be valid, such as package-level
// variables; it panics on an error.
func MustPolicy(limits ...Limit) *Policy {
	p, err := NewPolicy(limits...)
	if err != nil {
		panic(err)
	}
	return p
}

// Limits returns a copy of the policy's limits, names filled in.
func (p *Policy) Limits() []Limit { return append([]Limit(nil), p.src...) }

// Len returns the number of limits.
func (p *Policy) Len() int { return len(p.src) }

// Shadowed reports whether the policy has a shadow limit (Limit.Shadow).
func (p *Policy) Shadowed() bool { return p.sp.Shadowed() }

// Charged returns the policy to settle a call under (Request.Settle),
// given each, the call's per-limit results (Request.Each of the Take that
// admitted it): p without the shadow limits that did not charge the call,
// their would-denies. Enforced, such a limit would have denied the call,
// which then had nothing to settle: settled under p, it would be corrected
// for units it never took. Charged returns p when p has no shadow limits
// or every one was charged, and nil when none of p's limits remains (shadow
// limits only, each a would-deny): there is nothing to settle. It
// allocates only the first time it leaves out a given set of limits (see
// store.Policy.Charged).
func (p *Policy) Charged(each []LimitResult) *Policy {
	if !p.sp.Shadowed() {
		return p
	}
	var ds [MaxLimits]core.Decision
	n := min(len(each), len(p.src))
	for i := range n {
		ds[i].Allowed = each[i].Allowed
	}
	for i := n; i < len(p.src); i++ {
		ds[i].Allowed = true // no result: charged, as if not told otherwise
	}
	sq := p.sp.Charged(ds[:len(p.src)])
	switch sq {
	case p.sp:
		return p
	case nil:
		return nil
	}
	if q, ok := p.charged.Load(sq); ok {
		return q.(*Policy)
	}
	q := &Policy{sp: sq}
	for _, l := range p.src {
		if slices.Contains(sq.Names(), l.Name) {
			q.src = append(q.src, l)
		}
	}
	if p.nCharged.Load() >= maxCharged {
		return q // built for this call, not kept
	}
	v, loaded := p.charged.LoadOrStore(sq, q)
	if !loaded {
		p.nCharged.Add(1)
	}
	return v.(*Policy)
}

// Store returns the compiled policy that p's calls hand their store, for a
// caller that drives a store.Store directly with p's limits.
func (p *Policy) Store() *store.Policy { return p.sp }

// LimitResult is one limit's part of a decision.
type LimitResult struct {
	// Name and Window identify the limit.
	Name   string
	Window time.Duration
	// Allowed reports whether this limit admitted the cost. For a shadow
	// limit, whether it would have: false is a would-deny (the call was
	// not denied for it).
	Allowed bool
	// Shadow reports that the limit is a shadow limit (Limit.Shadow): it
	// never denies. When the call was admitted, it was charged exactly
	// when Allowed; when the call was denied, its result is a peek and
	// nothing was charged. In a Result, Shadow is set only for a policy of
	// shadow limits alone, whose calls are all admitted: the Result is
	// then the shadow limit closest to exhaustion with Allowed set and no
	// RetryAfter, whatever it would have decided (its own result, in
	// Request.Each, says).
	Shadow bool
	// Limit is the limit's quota, capacity or burst.
	Limit int64
	// Remaining is how many units would still pass now, never negative.
	Remaining int64
	// ResetAfter is how long until the limit is fully restored.
	ResetAfter time.Duration
	// RetryAfter is how long until a call of the same cost would pass; 0
	// when allowed, and 0 with Never set when it never will.
	RetryAfter time.Duration
	// Never reports that the cost exceeds the limit: no retry can pass.
	Never bool
	// Delay is the LeakyBucket shaping delay of an admitted call.
	Delay time.Duration
	// NextAfter is how long until more quota is made available
	// (Remaining grows) if nothing more is taken; 0 when Remaining is the
	// whole Limit. It is the RateLimit header field's "t"; see
	// core.Decision.NextAfter for its meaning per algorithm.
	NextAfter time.Duration
}

// Result is the outcome of a decision: the deciding limit's LimitResult
// (when denied, the denying limit with the latest RetryAfter; when allowed,
// the one with the fewest Remaining) and its index in the policy. The
// deciding limit is always an enforced one, except in a policy of only
// shadow limits (see LimitResult.Shadow).
type Result struct {
	LimitResult
	Index int
}

// fromCore writes d, a decision of l, to *r.
//
// Field by field: a composite literal is built on the stack and copied in
// 16-byte moves that stall on the 8-byte stores just made (store-to-load
// forwarding), 10% of an Allow. A RetryAfter of core.Never converts to 0
// (micros of a negative span).
func fromCore(l *Limit, d *core.Decision, r *LimitResult) {
	r.Name = l.Name
	r.Window = l.Window
	r.Shadow = l.Shadow
	r.Allowed = d.Allowed
	r.Limit = d.Limit
	r.Remaining = d.Remaining
	r.ResetAfter = micros(d.ResetAfter)
	r.Delay = micros(d.Delay)
	r.Never = d.RetryAfter == core.Never
	r.RetryAfter = micros(d.RetryAfter)
	r.NextAfter = micros(d.NextAfter)
}

// micros is Micros with one comparison on the common path: a span from 0
// to maxMicros.
func micros(us int64) time.Duration {
	if uint64(us) <= uint64(maxMicros) {
		return time.Duration(us) * time.Microsecond
	}
	return Micros(us)
}

// maxMicros is the longest time.Duration in whole microseconds.
const maxMicros = math.MaxInt64 / int64(time.Microsecond)

// Micros converts a span in µs, as the core reports it, to a
// time.Duration, saturating rather than wrapping: a span beyond what a
// Duration holds (about 292 years; a valid limit such as a burst of 1000 at
// 1 per 365 days reaches 1000 years) becomes math.MaxInt64 nanoseconds, and
// a negative one (none is produced) becomes 0. Every Duration in a Result
// comes through it.
func Micros(us int64) time.Duration {
	switch {
	case us > maxMicros:
		return math.MaxInt64
	case us < 0:
		return 0
	}
	return time.Duration(us) * time.Microsecond
}
