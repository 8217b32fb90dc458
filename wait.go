package rl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlcore/rl/store"
)

// Errors of Wait and WaitN. Neither takes anything.
var (
	// ErrNever: the cost exceeds a limit of the policy, so no wait ends
	// in an admission (Result.Never).
	ErrNever = errors.New("rl: the cost can never be admitted")
	// ErrWaitDeadline: the time until the cost fits ends after the
	// context's deadline, so Wait returns at once instead of sleeping in
	// vain. It does not match context.DeadlineExceeded: the deadline has
	// not passed.
	ErrWaitDeadline = errors.New("rl: the wait would outlast the context's deadline")
)

// Wait blocks until one unit for key is admitted under the default policy;
// see WaitN.
func (l *Limiter) Wait(ctx context.Context, key string) (Result, error) {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until cost units for key are admitted under the default
// policy, the way x/time/rate's Limiter.WaitN does for its one bucket.
//
// Each try is an ordinary AllowN: a denial sleeps exactly its RetryAfter
// (the earliest time the cost fits, which under a multi-limit policy is the
// latest of the denying limits) and decides again, so under contention a
// waiter that lost the race sleeps again, and nothing is ever admitted
// beyond the limits. It returns at once, having taken nothing, with
// ErrNever when the cost can never fit, with ErrWaitDeadline when the
// RetryAfter ends after ctx's deadline, and with ctx.Err() when ctx is done
// (before a try or while sleeping). Invalid keys and store failures return
// their errors as AllowN does.
//
// An admission by a LeakyBucket limit may come with a shaping Delay: WaitN
// sleeps it too before returning, so that the caller proceeds at the
// shaped rate. If ctx ends during that sleep, WaitN returns the admitted
// Result with ctx.Err() (the units stay taken).
//
// WaitN sleeps on the real clock (time.Timer), while the limiter decides on
// its Clock: a custom Clock must advance with real time. With the default
// coarse clock (1 ms resolution) a retry may land just before the cost fits
// and sleep once more, for under a millisecond.
func (l *Limiter) WaitN(ctx context.Context, key string, cost int64) (Result, error) {
	for {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		var r Result
		if err := l.decide(ctx, store.Take, key, cost, nil, nil, &r); err != nil {
			return Result{}, err
		}
		if r.Allowed {
			return r, sleep(ctx, r.Delay)
		}
		if r.Never {
			return Result{}, fmt.Errorf("%w: cost %d, limit %q of %d", ErrNever, cost, r.Name, r.Limit)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < r.RetryAfter {
			return Result{}, fmt.Errorf("%w: %q fits again in %s", ErrWaitDeadline, key, r.RetryAfter)
		}
		if err := sleep(ctx, r.RetryAfter); err != nil {
			return Result{}, err
		}
	}
}

// sleep waits d on a timer, or until ctx is done (returning ctx.Err()).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reservation is the outcome of Reserve: units taken now, to be used once
// their shaping delay has passed. Its Result says whether they were taken
// (Allowed) and, when they were not, when to try again (RetryAfter, Never).
type Reservation struct {
	Result
	// At is when the reservation was made (the real clock).
	At time.Time
}

// Reserve takes one unit for key now under the default policy and tells
// when to act on it; see ReserveN.
func (l *Limiter) Reserve(ctx context.Context, key string) (Reservation, error) {
	return l.ReserveN(ctx, key, 1)
}

// ReserveN takes cost units for key now under the default policy, without
// blocking, and returns the reservation: for shaping, an admitted call acts
// after Delay (a LeakyBucket's queue ahead of it; 0 for the other
// algorithms), which Reservation.Wait sleeps. A denied call took nothing
// (Allowed is false and RetryAfter says when the cost fits): unlike
// x/time/rate, which lends tokens it does not have and cannot be undone
// exactly, a reservation never goes beyond the limits.
func (l *Limiter) ReserveN(ctx context.Context, key string, cost int64) (Reservation, error) {
	at := time.Now()
	var r Result
	if err := l.decide(ctx, store.Take, key, cost, nil, nil, &r); err != nil {
		return Reservation{}, err
	}
	return Reservation{Result: r, At: at}, nil
}

// ErrNotReserved is returned by Reservation.Wait for a denied reservation.
var ErrNotReserved = errors.New("rl: nothing was reserved (denied)")

// DelayFrom returns how long after t the reserved units may be used: the
// Delay left, or 0.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	return max(0, r.Delay-t.Sub(r.At))
}

// Wait sleeps until the reserved units may be used (Delay after At) or ctx
// is done (ctx.Err()). For a denied reservation it returns ErrNotReserved at
// once.
func (r *Reservation) Wait(ctx context.Context) error {
	if !r.Allowed {
		return ErrNotReserved
	}
	return sleep(ctx, r.DelayFrom(time.Now()))
}
