// Package outage tells an outage of a store, which fail-open policies may
// answer by admitting, from load, which they must never admit. It is the
// one rule the middleware (package httplimit), the service
// (internal/frontend/service, and its RLS front end) and the proxy-wasm filter
// follow: Classify for errors, ClassifyHTTP for an HTTP answer of the
// decision API that carries no decision.
package outage

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/rlcore/rl/store"
)

// Timeouts is how many qualifying store timeouts (see Detector) make an
// outage.
const Timeouts = 3

// countBits is the width of the timeout count in Detector.state; the
// generation is the rest (2^56 completed decisions do not wrap).
const countBits = 8

// Detector records the decisions of one limiter front end and tells which
// store failures are an outage. Its zero value is ready; it is safe for
// concurrent use. Use it as:
//
//	begun := d.Begin()
//	res, err := lim.Do(ctx, req)
//	if err == nil {
//		d.Success()
//	} else if d.Outage(begun, err) { ... the fail policy answers ... }
//
// The rule: a store failure err of a decision begun at token begun is an
// outage when
//
//   - err matches store.ErrUnavailable and not context.DeadlineExceeded
//     (a refused or broken connection, an open breaker): at once; or
//   - err matches store.ErrUnavailable and context.DeadlineExceeded (a
//     timeout), no decision completed (Success) since begun was taken, and
//     it is at least the Timeouts-th such timeout since the last decision
//     completed.
//
// Anything else is not an outage: store.ErrBusy (load: a saturated pool,
// or a store full of keys, store.ErrFull) never, a timeout
// of a decision begun before another one completed never. A loaded store,
// or a hot key whose queued decisions time out together, completes other
// decisions meanwhile, so its timeouts do not count; a hung store
// completes none. The count saturates at Timeouts and is reset by every
// completed decision.
type Detector struct {
	// state is the generation (decisions completed) shifted left by
	// countBits, or'ed with the count of qualifying timeouts in that
	// generation (at most Timeouts). One word, so that a completed
	// decision resets the count in the same step as it ends the
	// generation.
	state atomic.Uint64
}

// Token is the Detector's generation when a decision began (Begin).
type Token uint64

// Begin returns the token of a decision about to be made, for Outage.
func (d *Detector) Begin() Token { return Token(d.state.Load() >> countBits) }

// Success records a decision the store completed (allowed or denied): it
// ends the generation, so that no timeout of a decision begun before it
// counts, and resets the count.
func (d *Detector) Success() {
	for {
		s := d.state.Load()
		if d.state.CompareAndSwap(s, (s>>countBits+1)<<countBits) {
			return
		}
	}
}

// Outage records err, the store failure of a decision begun at begun, and
// reports whether it is an outage by the rule of Detector.
func (d *Detector) Outage(begun Token, err error) bool {
	if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrBusy) {
		return false
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	for {
		s := d.state.Load()
		if Token(s>>countBits) != begun {
			return false // a decision completed since this one began
		}
		n := s & (1<<countBits - 1)
		if n >= Timeouts {
			return true // saturated
		}
		if d.state.CompareAndSwap(s, s+1) {
			return n+1 >= Timeouts
		}
	}
}
