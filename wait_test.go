package rl_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/fakestore"
	"github.com/rlcore/rl/memstore"
)

// newRealLimiter returns a limiter on the system clock over a fake store
// that counts the admitted takes that reach it.
func newRealLimiter(t *testing.T, p *rl.Policy) (*rl.Limiter, *fakestore.Store) {
	mem := memstore.New(&memstore.Config{Clock: rl.SystemClock})
	t.Cleanup(func() { mem.Close() })
	cs := fakestore.New(t, fakestore.Config{Inner: mem})
	l, err := rl.New(rl.Config{Policy: p, Store: cs, Clock: rl.SystemClock})
	require.NoError(t, err)
	return l, cs
}

// TestWaitSleepsAndRetries: a burst of 2 refilled one per 20 ms; 6 waits in
// a row are all admitted, each a single admission at the store.
func TestWaitSleepsAndRetries(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.GCRA, Limit: 2, Window: 20 * time.Millisecond, Rate: 1})
	l, cs := newRealLimiter(t, p)
	ctx := context.Background()
	for i := range 6 {
		r, err := l.Wait(ctx, "k")
		require.NoError(t, err, "wait %d", i)
		require.True(t, r.Allowed)
	}
	// Each wait reached the store once admitted: no retry charged twice.
	// (Whether the key is empty afterwards depends on how long the last
	// sleep overran, which load decides: not asserted.)
	require.Equal(t, int64(6), cs.Admitted())
}

func TestWaitErrors(t *testing.T) {
	// A token bucket, not a fixed window: a window aligned to the epoch
	// ends within the deadline below when the test runs near the end of
	// an hour (it did, once). Empty, it refills one unit in 20 min.
	p := rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 3, Window: time.Hour})
	l, cs := newRealLimiter(t, p)
	ctx := context.Background()

	_, err := l.WaitN(ctx, "k", 4)
	require.ErrorIs(t, err, rl.ErrNever, "a cost above the limit never fits")

	_, err = l.WaitN(ctx, "k", 3)
	require.NoError(t, err)
	// Exhausted for 20 minutes: a 10 minute deadline cannot be met, so
	// Wait returns ErrWaitDeadline at once, not the context's error after
	// sleeping (generous, so that a loaded machine never reaches it).
	dctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	_, err = l.Wait(dctx, "k")
	require.ErrorIs(t, err, rl.ErrWaitDeadline)
	require.NoError(t, dctx.Err(), "returned before the deadline")
	require.False(t, errors.Is(err, context.DeadlineExceeded))

	// Canceled while sleeping: the context's error.
	cctx, cancel2 := context.WithCancel(ctx)
	time.AfterFunc(10*time.Millisecond, cancel2)
	_, err = l.Wait(cctx, "k")
	require.ErrorIs(t, err, context.Canceled)

	// A done context takes nothing.
	_, err = l.Wait(cctx, "other")
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, int64(1), cs.Admitted(), "only the WaitN of 3 took anything")

	_, err = l.Wait(ctx, "bad key")
	require.ErrorIs(t, err, rl.ErrInvalidKey)
}

// TestWaitContention: 32 goroutines wait on one key of a bucket of 4
// refilled 4 per 40 ms. Every waiter is admitted exactly once, and the store
// admitted exactly 32 takes: losing a race means sleeping again, never a
// second admission or one beyond the limit.
func TestWaitContention(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 4, Window: 40 * time.Millisecond})
	l, cs := newRealLimiter(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := l.Wait(ctx, "hot")
			if err != nil {
				t.Error(err)
				return
			}
			if r.Allowed {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(32), ok.Load())
	require.Equal(t, int64(32), cs.Admitted())
}

// TestWaitShapes: Wait on a leaky bucket sleeps the shaping Delay of its
// admission before it returns. (Leaking one per 200 ms, the second call
// has a Delay unless the machine stalled for 200 ms between the two.)
func TestWaitShapes(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.LeakyBucket, Limit: 2, Window: 400 * time.Millisecond})
	l, _ := newRealLimiter(t, p)
	ctx := context.Background()
	delayed := 0
	for range 2 {
		start := time.Now()
		r, err := l.Wait(ctx, "k")
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), r.Delay, "the Delay was slept")
		if r.Delay > 0 {
			delayed++
		}
	}
	require.Equal(t, 1, delayed, "the second call was delayed")
}

// TestReserve: a reservation takes now and reports the shaping delay; a
// denied one took nothing.
func TestReserve(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.LeakyBucket, Limit: 5, Window: time.Second})
	l, clk := newLimiter(t, p)
	ctx := context.Background()
	for i := range 5 {
		res, err := l.Reserve(ctx, "k")
		require.NoError(t, err)
		require.True(t, res.Allowed)
		require.Equal(t, time.Duration(i)*200*time.Millisecond, res.Delay, "reservation %d", i)
		require.Equal(t, res.Delay, res.DelayFrom(res.At))
		require.Equal(t, time.Duration(0), res.DelayFrom(res.At.Add(time.Hour)))
	}
	res, err := l.Reserve(ctx, "k")
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.Equal(t, 200*time.Millisecond, res.RetryAfter)
	require.ErrorIs(t, res.Wait(ctx), rl.ErrNotReserved)
	clk.Advance(200 * time.Millisecond)
	res, err = l.ReserveN(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Equal(t, 800*time.Millisecond, res.Delay)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, res.Wait(cctx), context.Canceled)
	l2, _ := newLimiter(t, rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: time.Second}))
	res, err = l2.Reserve(ctx, "x")
	require.NoError(t, err)
	require.NoError(t, res.Wait(ctx), "no delay: returns at once")
}
