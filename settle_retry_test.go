package rl_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/fakestore"
	"github.com/rlcore/rl/store"
)

// TestSettleRetriedUnderLoad: a settle the store refuses for load is tried
// again a few times, so load alone does not drop a debt; a take is not
// retried; a store that stays busy is reported, after the last try.
func TestSettleRetriedUnderLoad(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 10, Window: time.Hour})
	s := fakestore.New(t, fakestore.Config{})
	l, err := rl.New(rl.Config{Policy: p, Store: s})
	require.NoError(t, err)
	ctx := context.Background()

	s.FailNext(2, store.ErrBusy)
	_, err = l.Do(ctx, rl.Request{Key: "k", Cost: 8, Settle: true})
	require.NoError(t, err, "settled on the third try")
	require.Equal(t, int64(3), s.Calls())
	r, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, int64(1), r.Remaining, "the debt of 8 landed")

	calls := s.Calls()
	s.FailNext(1, store.ErrBusy)
	_, err = l.Allow(ctx, "k")
	require.ErrorIs(t, err, store.ErrBusy, "a take is not retried")
	require.Equal(t, int64(1), s.Calls()-calls)

	calls = s.Calls()
	s.FailNext(100, store.ErrBusy)
	_, err = l.Settle(ctx, "k", 1)
	require.ErrorIs(t, err, store.ErrBusy)
	require.Equal(t, int64(4), s.Calls()-calls, "one try and three more")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	calls = s.Calls()
	_, err = l.Settle(cctx, "k", 1)
	require.True(t, errors.Is(err, store.ErrBusy))
	require.Equal(t, int64(1), s.Calls()-calls, "no wait past the context")
}
