package rl_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
)

// TestShadow: a shadow limit never denies, is charged only when the call is
// admitted and it admits the cost, and reports its would-denies in Each;
// an enforced denial charges nothing; a promoted candidate keeps its count.
func TestShadow(t *testing.T) {
	enforced := rl.Limit{Name: "enforced", Algorithm: core.FixedWindow, Limit: 4, Window: time.Minute}
	candidate := rl.Limit{Name: "candidate", Algorithm: core.TokenBucket, Limit: 2, Window: time.Minute, Shadow: true}
	p := rl.MustPolicy(enforced, candidate)
	require.Equal(t, []rl.Limit{enforced, candidate}, p.Limits())
	l, _ := newLimiter(t, p)
	ctx := context.Background()
	each := make([]rl.LimitResult, 2)
	do := func(cost int64) rl.Result {
		t.Helper()
		r, err := l.Do(ctx, rl.Request{Key: "k", Cost: cost, Each: each})
		require.NoError(t, err)
		require.Equal(t, "enforced", r.Name, "the deciding limit is the enforced one")
		require.False(t, r.Shadow)
		require.False(t, each[0].Shadow)
		require.True(t, each[1].Shadow)
		return r
	}
	r := do(2)
	require.True(t, r.Allowed)
	require.True(t, each[1].Allowed)
	require.Equal(t, int64(0), each[1].Remaining, "charged: both admitted")

	r = do(1)
	require.True(t, r.Allowed, "a shadow limit never denies")
	require.False(t, each[1].Allowed, "a would-deny")
	require.Positive(t, each[1].RetryAfter)
	require.Equal(t, int64(1), r.Remaining)

	r = do(3)
	require.False(t, r.Allowed, "the enforced limit denies")
	require.False(t, each[1].Allowed, "the candidate's peek")

	// The candidate was charged 2 of the 3 admitted units: enforced, its
	// count holds.
	promoted := rl.MustPolicy(enforced, rl.Limit{Name: "candidate", Algorithm: core.TokenBucket, Limit: 2, Window: time.Minute})
	r, err := l.Do(ctx, rl.Request{Key: "k", Cost: 1, Policy: promoted})
	require.NoError(t, err)
	require.False(t, r.Allowed)
	require.Equal(t, "candidate", r.Name)
}

// TestShadowOnly: a policy of shadow limits alone admits every call; the
// Result is the shadow limit's, marked, with Allowed set.
func TestShadowOnly(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.GCRA, Limit: 1, Window: time.Hour, Shadow: true})
	l, _ := newLimiter(t, p)
	ctx := context.Background()
	for i := range 3 {
		r, err := l.Allow(ctx, "k")
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.True(t, r.Shadow)
		require.Zero(t, r.RetryAfter)
		require.Equal(t, "default", r.Name)
		each := make([]rl.LimitResult, 1)
		r, err = l.Do(ctx, rl.Request{Key: "k", Peek: true, Cost: 1, Each: each})
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.False(t, each[0].Allowed, "call %d: the shadow limit would deny one more", i)
	}
	// Wait never waits for a shadow limit: one that did would wait an hour
	// and answer ErrWaitDeadline before this generous deadline.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	_, err := l.Wait(wctx, "k")
	require.NoError(t, err)
}

// TestSettleCharged: a settle under Policy.Charged corrects only the limits
// that charged the call: a shadow limit's would-deny is left as it was (as
// if enforced, the call would have been denied, with nothing to settle),
// while a shadow limit that was charged is settled with the enforced ones.
func TestSettleCharged(t *testing.T) {
	enforced := rl.Limit{Name: "enforced", Algorithm: core.FixedWindow, Limit: 100, Window: time.Hour}
	small := rl.Limit{Name: "small", Algorithm: core.FixedWindow, Limit: 2, Window: time.Hour, Shadow: true}
	large := rl.Limit{Name: "large", Algorithm: core.FixedWindow, Limit: 50, Window: time.Hour, Shadow: true}
	p := rl.MustPolicy(enforced, small, large)
	l, _ := newLimiter(t, p)
	ctx := context.Background()
	each := make([]rl.LimitResult, 3)
	take := func(cost int64) {
		t.Helper()
		r, err := l.Do(ctx, rl.Request{Key: "k", Cost: cost, Each: each})
		require.NoError(t, err)
		require.True(t, r.Allowed)
	}
	take(2) // every limit charged
	require.Same(t, p, p.Charged(each), "all charged: the policy itself")
	take(1) // small would deny
	require.False(t, each[1].Allowed)
	q := p.Charged(each)
	require.NotNil(t, q)
	require.Equal(t, []rl.Limit{enforced, large}, q.Limits())
	require.Same(t, q, p.Charged(each), "built once")

	_, err := l.Do(ctx, rl.Request{Key: "k", Cost: 5, Policy: q, Settle: true})
	require.NoError(t, err)
	peek := make([]rl.LimitResult, 3)
	_, err = l.Do(ctx, rl.Request{Key: "k", Cost: 0, Each: peek})
	require.NoError(t, err)
	require.Equal(t, int64(100-8), peek[0].Remaining, "enforced: 3 taken + 5 settled")
	require.Equal(t, int64(0), peek[1].Remaining, "small: its 2, untouched by the settle")
	require.Equal(t, int64(50-8), peek[2].Remaining, "large: charged, so settled")

	// Shadow limits only, all would-deny: nothing to settle.
	only := rl.MustPolicy(small)
	res := []rl.LimitResult{{Name: "small", Allowed: false, Shadow: true}}
	require.Nil(t, only.Charged(res))
	require.Same(t, only, only.Charged(nil), "no results: every limit charged")
	plain := rl.MustPolicy(enforced)
	require.Same(t, plain, plain.Charged([]rl.LimitResult{{Allowed: false}}), "no shadow limits: the policy itself")
}
