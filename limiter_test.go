package rl_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/fakestore"
	"github.com/rlcore/rl/store"
)

const t0 = int64(1_767_225_600_000_000)

// fakeClock is a settable clock.
type fakeClock struct{ now atomic.Int64 }

func (c *fakeClock) Now() int64              { return c.now.Load() }
func (c *fakeClock) Advance(d time.Duration) { c.now.Add(int64(d / time.Microsecond)) }

func newLimiter(t *testing.T, p *rl.Policy) (*rl.Limiter, *fakeClock) {
	clk := &fakeClock{}
	clk.now.Store(t0)
	l, err := rl.New(rl.Config{Policy: p, Clock: clk.Now})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, clk
}

func TestAllowResult(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute})
	l, clk := newLimiter(t, p)
	ctx := context.Background()
	clk.Advance(20 * time.Second)
	for i := range 3 {
		r, err := l.Allow(ctx, "user:1")
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.Equal(t, int64(2-i), r.Remaining)
		require.Equal(t, 40*time.Second, r.ResetAfter)
		require.Equal(t, "default", r.Name)
	}
	r, err := l.Allow(ctx, "user:1")
	require.NoError(t, err)
	require.False(t, r.Allowed)
	require.Equal(t, 40*time.Second, r.RetryAfter)
	require.False(t, r.Never)

	r, err = l.AllowN(ctx, "user:2", 4)
	require.NoError(t, err)
	require.False(t, r.Allowed)
	require.True(t, r.Never, "a cost above the limit can never pass")

	// Peek reports without taking; Reset restores.
	r, err = l.Peek(ctx, "user:2", 3)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	require.NoError(t, l.Reset(ctx, "user:1"))
	r, _ = l.AllowN(ctx, "user:1", 3)
	require.True(t, r.Allowed)
}

func TestPolicyPerCall(t *testing.T) {
	free := rl.MustPolicy(rl.Limit{Name: "free", Algorithm: core.TokenBucket, Limit: 2, Window: time.Minute})
	paid := rl.MustPolicy(rl.Limit{Name: "paid", Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute})
	l, _ := newLimiter(t, nil)
	ctx := context.Background()
	_, err := l.Allow(ctx, "x")
	require.ErrorIs(t, err, rl.ErrNoPolicy)
	var freeOK, paidOK int
	for range 10 {
		if r, _ := l.Do(ctx, rl.Request{Key: "acct:1", Cost: 1, Policy: free}); r.Allowed {
			freeOK++
		}
		if r, _ := l.Do(ctx, rl.Request{Key: "acct:2", Cost: 1, Policy: paid}); r.Allowed {
			paidOK++
		}
	}
	require.Equal(t, 2, freeOK)
	require.Equal(t, 10, paidOK)
}

func TestMultiLimit(t *testing.T) {
	p := rl.MustPolicy(
		rl.Limit{Name: "burst", Algorithm: core.TokenBucket, Limit: 5, Window: time.Second},
		rl.Limit{Name: "daily", Algorithm: core.FixedWindow, Limit: 7, Window: 24 * time.Hour},
	)
	l, clk := newLimiter(t, p)
	ctx := context.Background()
	each := make([]rl.LimitResult, 2)
	r, err := l.Do(ctx, rl.Request{Key: "k", Cost: 5, Each: each})
	require.NoError(t, err)
	require.True(t, r.Allowed)
	require.Equal(t, "burst", r.Name, "the fewest remaining decides an admission")
	require.Equal(t, int64(2), each[1].Remaining)
	r, _ = l.Allow(ctx, "k")
	require.False(t, r.Allowed)
	require.Equal(t, "burst", r.Name)
	require.Equal(t, 200*time.Millisecond, r.RetryAfter)
	clk.Advance(time.Second)
	r, _ = l.AllowN(ctx, "k", 3)
	require.False(t, r.Allowed, "daily has 2 left")
	require.Equal(t, "daily", r.Name)
	require.Equal(t, 1, r.Index)
	r, _ = l.AllowN(ctx, "k", 2)
	require.True(t, r.Allowed, "the denied call consumed nothing")
}

func TestPolicyErrors(t *testing.T) {
	_, err := rl.NewPolicy()
	require.ErrorIs(t, err, rl.ErrPolicy)
	_, err = rl.NewPolicy(rl.Limit{Algorithm: core.GCRA, Limit: 1, Window: 0})
	require.ErrorIs(t, err, rl.ErrPolicy)
	require.ErrorIs(t, err, core.ErrWindow)
	_, err = rl.NewPolicy(rl.Limit{Name: "a", Algorithm: core.GCRA, Limit: 1, Window: time.Second},
		rl.Limit{Name: "a", Algorithm: core.GCRA, Limit: 1, Window: time.Second})
	require.ErrorContains(t, err, "two limits named")
	p, err := rl.NewPolicy(rl.Limit{Algorithm: core.GCRA, Limit: 1, Window: time.Second},
		rl.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour})
	require.NoError(t, err)
	require.Equal(t, "gcra_1s", p.Limits()[0].Name)
	require.Equal(t, "fixed_window_1h", p.Limits()[1].Name)
}

func TestKeys(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute})
	l, _ := newLimiter(t, p)
	ctx := context.Background()
	for _, key := range []string{"user:42", "203.0.113.7", "[2001:db8::1]", "api-key_AbC.123/x", strings.Repeat("k", 256)} {
		_, err := l.Allow(ctx, key)
		require.NoError(t, err, key)
	}
	for _, key := range []string{"", "has space", "tab\t", "nul\x00", "é", strings.Repeat("k", 257)} {
		_, err := l.Allow(ctx, key)
		require.ErrorIs(t, err, rl.ErrInvalidKey, "%q", key)
		var ke *rl.KeyError
		require.ErrorAs(t, err, &ke)
		// Reason is for the client; the advice is the developer's, in
		// Error alone.
		require.NotContains(t, ke.Reason, "Config.", "%q", key)
		require.Equal(t, strings.Contains(ke.Reason, "printable"), strings.Contains(err.Error(), "Config.AnyKey"), "%q", key)
	}
	_, err := l.Allow(ctx, "a b")
	require.EqualError(t, err, `rl: invalid key "a b": byte 0x20 at 1 is not printable ASCII (set Config.AnyKey to allow any bytes)`)
	any, err := rl.New(rl.Config{Policy: p, AnyKey: true, MaxKeyLength: 8})
	require.NoError(t, err)
	defer any.Close()
	_, err = any.Allow(ctx, "é \x00")
	require.NoError(t, err)
	_, err = any.Allow(ctx, "123456789")
	require.ErrorIs(t, err, rl.ErrInvalidKey)
}

func TestStoreErrors(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute})
	down := fakestore.New(t, fakestore.Config{})
	down.Fail(fmt.Errorf("dial: %w", store.ErrUnavailable))
	l, err := rl.New(rl.Config{Policy: p, Store: down})
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k")
	require.ErrorIs(t, err, rl.ErrStore)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorIs(t, l.Reset(context.Background(), "k"), rl.ErrStore)
	// Invalid input is not a store failure.
	l2, _ := newLimiter(t, p)
	_, err = l2.AllowN(context.Background(), "k", -1)
	require.ErrorIs(t, err, core.ErrCost)
	require.False(t, errors.Is(err, rl.ErrStore))
}

// TestExactness: 64 goroutines released at once on one key admit exactly
// the limit, 300 trials (a fresh key each) per algorithm.
func TestExactness(t *testing.T) {
	const goroutines, calls, limit, trials = 64, 4, 100, 300
	for _, alg := range core.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			// A day-long window: nothing is restored during the test.
			p := rl.MustPolicy(rl.Limit{Algorithm: alg, Limit: limit, Window: 24 * time.Hour})
			l, err := rl.New(rl.Config{Policy: p})
			require.NoError(t, err)
			defer l.Close()
			var start, done sync.WaitGroup
			var admitted atomic.Int64
			key := make(chan string)
			for range goroutines {
				go func() {
					for k := range key {
						start.Done()
						start.Wait()
						for range calls {
							r, err := l.Allow(context.Background(), k)
							if err != nil {
								t.Error(err)
							} else if r.Allowed {
								admitted.Add(1)
							}
						}
						done.Done()
					}
				}()
			}
			for trial := range trials {
				admitted.Store(0)
				start.Add(goroutines)
				done.Add(goroutines)
				k := fmt.Sprint("hot:", trial)
				for range goroutines {
					key <- k
				}
				done.Wait()
				if n := admitted.Load(); n != limit {
					close(key)
					t.Fatalf("trial %d: %d admitted, want %d", trial, n, limit)
				}
			}
			close(key)
		})
	}
}

// TestAllOrNothingRace races a two-limit policy against callers of each of
// its limits alone, on one key: the two-limit calls take from both limits or
// from neither, so the units left in each limit are exactly its quota less
// what was admitted by the calls that include it.
func TestAllOrNothingRace(t *testing.T) {
	hourly := rl.Limit{Name: "hourly", Algorithm: core.FixedWindow, Limit: 60, Window: time.Hour}
	burst := rl.Limit{Name: "burst", Algorithm: core.TokenBucket, Limit: 40, Window: 24 * time.Hour}
	both := rl.MustPolicy(hourly, burst)
	onlyHourly, onlyBurst := rl.MustPolicy(hourly), rl.MustPolicy(burst)
	policies := []*rl.Policy{both, onlyHourly, onlyBurst}
	l, _ := newLimiter(t, both)
	ctx := context.Background()
	for trial := range 100 {
		key := fmt.Sprint("k", trial)
		var admitted [3]atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 48 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range 6 {
					which := (g + i + trial) % 3
					r, err := l.Do(ctx, rl.Request{Key: key, Cost: int64(1 + (g+i)%2), Policy: policies[which]})
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						admitted[which].Add(int64(1 + (g+i)%2))
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		each := make([]rl.LimitResult, 2)
		_, err := l.Do(ctx, rl.Request{Key: key, Policy: both, Peek: true, Each: each})
		require.NoError(t, err)
		a, h, b := admitted[0].Load(), admitted[1].Load(), admitted[2].Load()
		require.Equal(t, 60-(a+h), each[0].Remaining, "trial %d: hourly left, after %d two-limit + %d alone", trial, a, h)
		require.Equal(t, 40-(a+b), each[1].Remaining, "trial %d: burst left, after %d two-limit + %d alone", trial, a, b)
		require.Positive(t, a, "trial %d: no two-limit call was admitted", trial)
	}
}

// TestDurationsSaturate: a valid limit whose spans exceed what a
// time.Duration holds (a burst of 1000 at 1 per 365 days: refilled in 1000
// years) reports math.MaxInt64, never a wrapped, negative or short span.
func TestDurationsSaturate(t *testing.T) {
	year := 365 * 24 * time.Hour
	for _, alg := range []core.Algorithm{core.GCRA, core.TokenBucket, core.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			p := rl.MustPolicy(rl.Limit{Algorithm: alg, Limit: 1000, Window: year, Rate: 1})
			l, _ := newLimiter(t, p)
			ctx := context.Background()
			r, err := l.AllowN(ctx, "k", 1000)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			require.Equal(t, time.Duration(math.MaxInt64), r.ResetAfter, "1000 years until full")
			r, err = l.AllowN(ctx, "k", 1000)
			require.NoError(t, err)
			require.False(t, r.Allowed)
			require.Equal(t, time.Duration(math.MaxInt64), r.RetryAfter, "1000 years until 1000 fit again")
			r, err = l.Allow(ctx, "k")
			require.NoError(t, err)
			require.Equal(t, year, r.RetryAfter, "one unit: a year, exact")
			if alg == core.LeakyBucket {
				l.Reset(ctx, "k")
				l.AllowN(ctx, "k", 999)
				r, err = l.Allow(ctx, "k")
				require.NoError(t, err)
				require.True(t, r.Allowed)
				require.Equal(t, time.Duration(math.MaxInt64), r.Delay, "999 years of queue ahead")
			}
		})
	}
	require.Equal(t, time.Duration(math.MaxInt64), rl.Micros(math.MaxInt64/1000+1))
	require.Equal(t, time.Duration(math.MaxInt64/1000*1000), rl.Micros(math.MaxInt64/1000))
	require.Equal(t, time.Duration(0), rl.Micros(-5))
}

// TestKeyBytes checks the eight-bytes-at-a-time key check against the
// rule byte by byte: every length up to 24, a byte at every position.
func TestKeyBytes(t *testing.T) {
	l, _ := newLimiter(t, rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: time.Second}))
	ctx := context.Background()
	for n := 1; n <= 24; n++ {
		for pos := range n {
			for c := range 256 {
				b := []byte(strings.Repeat("a~!", 8)[:n])
				b[pos] = byte(c)
				_, err := l.Peek(ctx, string(b), 1)
				want := c >= 0x21 && c <= 0x7e
				if (err == nil) != want {
					t.Fatalf("key %q (byte %#02x at %d): err %v", b, c, pos, err)
				}
				if !want && !errors.Is(err, rl.ErrInvalidKey) {
					t.Fatal(err)
				}
			}
		}
	}
}
