package rl_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/store"
)

// busyStore refuses its first busy calls for load (store.ErrBusy), then
// decides with the memory store.
type busyStore struct {
	*memstore.Store
	busy  atomic.Int32
	calls atomic.Int32
}

func (s *busyStore) Decide(ctx context.Context, req store.Request, each []core.Decision) (int, core.Decision, error) {
	s.calls.Add(1)
	if s.busy.Add(-1) >= 0 {
		return 0, core.Decision{}, store.ErrBusy
	}
	return s.Store.Decide(ctx, req, each)
}

// TestSettleRetriedUnderLoad: a settle the store refuses for load is tried
// again a few times, so load alone does not drop a debt; a take is not
// retried; a store that stays busy is reported, after the last try.
func TestSettleRetriedUnderLoad(t *testing.T) {
	p := rl.MustPolicy(rl.Limit{Algorithm: core.FixedWindow, Limit: 10, Window: time.Hour})
	mem := memstore.New(nil)
	t.Cleanup(func() { mem.Close() })
	s := &busyStore{Store: mem}
	l, err := rl.New(rl.Config{Policy: p, Store: s})
	require.NoError(t, err)
	ctx := context.Background()

	s.busy.Store(2)
	_, err = l.Do(ctx, rl.Request{Key: "k", Cost: 8, Settle: true})
	require.NoError(t, err, "settled on the third try")
	require.Equal(t, int32(3), s.calls.Load())
	r, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, int64(1), r.Remaining, "the debt of 8 landed")

	s.calls.Store(0)
	s.busy.Store(1)
	_, err = l.Allow(ctx, "k")
	require.ErrorIs(t, err, store.ErrBusy, "a take is not retried")
	require.Equal(t, int32(1), s.calls.Load())

	s.calls.Store(0)
	s.busy.Store(100)
	_, err = l.Settle(ctx, "k", 1)
	require.ErrorIs(t, err, store.ErrBusy)
	require.Equal(t, int32(4), s.calls.Load(), "one try and three more")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	s.calls.Store(0)
	_, err = l.Settle(cctx, "k", 1)
	require.True(t, errors.Is(err, store.ErrBusy))
	require.Equal(t, int32(1), s.calls.Load(), "no wait past the context")
	s.busy.Store(0)
}
