package failover_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/failover"
	"github.com/rlcore/rl/internal/testkit/fakestore"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/store"
	"github.com/rlcore/rl/store/storetest"
)

// down is the error of a primary that is down.
var down = fmt.Errorf("dial tcp: %w", store.ErrUnavailable)

const t0 = int64(1_767_225_600_000_000)

var lim = core.Limit{Algorithm: core.FixedWindow, Limit: 3, Window: 60_000_000}

func req(key string) store.Request {
	return store.Request{Key: key, Policy: store.MustPolicy([]string{"default"}, lim), Now: t0, Cost: 1}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Config{New: func(t *testing.T) store.Store {
		s, err := failover.New(failover.Config{Primary: memstore.New(nil), Fallback: memstore.New(nil)})
		require.NoError(t, err)
		return s
	}})
}

func TestBreaker(t *testing.T) {
	primary := fakestore.New(t, fakestore.Config{})
	fallback := memstore.New(nil)
	now := int64(0) // µs
	var changes []string
	var fallbacks atomic.Int64
	s, err := failover.New(failover.Config{
		Primary: primary, Fallback: fallback, Threshold: 2, Cooldown: time.Second,
		Clock:      func() int64 { return now },
		OnChange:   func(from, to failover.State) { changes = append(changes, from.String()+">"+to.String()) },
		OnFallback: func(error) { fallbacks.Add(1) },
	})
	require.NoError(t, err)
	ctx := context.Background()
	decide := func() core.Decision {
		_, d, err := s.Decide(ctx, req("k"), nil)
		require.NoError(t, err, "failover must answer every call")
		return d
	}
	require.True(t, decide().Allowed) // primary: 1 of 3
	primary.Fail(down)
	require.True(t, decide().Allowed) // primary fails, fallback answers
	require.Equal(t, failover.Closed, s.State())
	require.True(t, decide().Allowed) // second failure opens the circuit
	require.Equal(t, failover.Open, s.State())
	calls := primary.Calls()
	require.True(t, decide().Allowed) // open: fallback only, primary not called
	require.False(t, decide().Allowed, "the fallback enforces the limit on its own")
	require.Equal(t, calls, primary.Calls())
	// After the cooldown a probe fails: open again.
	now += time.Second.Microseconds()
	decide()
	require.Equal(t, failover.Open, s.State())
	// Primary recovers: the next probe closes the circuit, and the primary's
	// state resumes where it was (1 taken before the outage).
	primary.Fail(nil)
	now += time.Second.Microseconds()
	d := decide()
	require.True(t, d.Allowed)
	require.Equal(t, int64(1), d.Remaining)
	require.Equal(t, failover.Closed, s.State())
	require.Equal(t, []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>closed"}, changes)
	require.Equal(t, int64(5), fallbacks.Load())
}

func TestInvalidInputIsNotAnOutage(t *testing.T) {
	primary := fakestore.New(t, fakestore.Config{})
	s, _ := failover.New(failover.Config{Primary: primary, Fallback: memstore.New(nil), Threshold: 1})
	r := req("k")
	r.Cost = -1
	_, _, err := s.Decide(context.Background(), r, nil)
	require.True(t, errors.Is(err, core.ErrCost))
	require.Equal(t, failover.Closed, s.State())
}

func TestTimeout(t *testing.T) {
	slow := fakestore.New(t, fakestore.Config{})
	slow.Hold(fakestore.All) // never released: it answers when its context ends
	s, _ := failover.New(failover.Config{Primary: slow, Fallback: memstore.New(nil), Timeout: 20 * time.Millisecond, Threshold: 1})
	// The primary never answers until the timeout (which must fire) ends
	// its context: that the call returns at all shows it does not stall.
	_, d, err := s.Decide(context.Background(), req("k"), nil)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	_, _, err = s.Decide(context.Background(), req("k"), nil)
	require.NoError(t, err)
	require.Equal(t, failover.Open, s.State())
}
