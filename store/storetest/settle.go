package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// carryAndSettle: a key decided under changing limits (other parameters
// and algorithms under the same name, so the state carries over) with
// takes, peeks and settles, against the core deciding the same calls on a
// state of its own: the store must keep the parameters a state was written
// under (core.State L, W, R), so that every decision, carried over or in
// debt, is the core's.
func carryAndSettle(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 8))
	for k := range 6 {
		key := fmt.Sprintf("carry-%d", k)
		limit := func() core.Limit {
			a := algorithms[r.IntN(len(algorithms))]
			l := core.Limit{Algorithm: a, Limit: 1 + r.Int64N(8), Window: []int64{1_000_000, 2_000_000, 700_000}[r.IntN(3)]}
			if !a.Windowed() && r.IntN(2) == 0 {
				l.Rate = 1 + r.Int64N(6)
			}
			return l
		}
		l := limit()
		p := policy(t, []string{"default"}, l)
		st := core.State{Log: make([]int64, 0, core.MaxLogLimit)}
		now := t0
		for i := range 80 {
			if r.IntN(12) == 0 { // the limit changes
				l = limit()
				p = policy(t, []string{"default"}, l)
			}
			now += r.Int64N(300_000)
			op, cost := store.Take, r.Int64N(3)
			var (
				want core.Decision
				err  error
			)
			switch r.IntN(6) {
			case 0:
				op = store.Peek
				want, err = core.Peek(l, st, now, cost)
			case 1:
				op, cost = store.Settle, r.Int64N(9)-4
				var n core.State
				want, n, err = core.Settle(l, st, now, cost)
				if err == nil {
					st = n
				}
			default:
				var n core.State
				want, n, err = core.Take(l, st, now, cost)
				if err == nil {
					st = n
				}
			}
			if err != nil {
				t.Fatalf("core: %v", err)
			}
			if st.Log == nil {
				st.Log = make([]int64, 0, core.MaxLogLimit)
			}
			_, got, err := s.Decide(ctx, req(prefix, key, op, now, cost, p), nil)
			if err != nil {
				t.Fatalf("%s step %d (%v %d under %+v): %v", key, i, op, cost, l, err)
			}
			if got != want {
				t.Fatalf("%s step %d (%v %d under %+v): store %+v, core %+v", key, i, op, cost, l, got, want)
			}
		}
	}
}

// settleRace: concurrent takes and settles on one key stay exact: every
// admitted call's estimate of 2 is settled to its real cost of 1, so once
// all are done the units used are exactly the calls admitted, never more
// than the limit: no take or settle is lost to another.
func settleRace(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	ctx := context.Background()
	l := core.Limit{Algorithm: core.FixedWindow, Limit: 100, Window: 3_600_000_000}
	p := policy(t, []string{"default"}, l)
	g, calls := cfg.Goroutines, cfg.Calls
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted int
	)
	for range g {
		wg.Go(func() {
			for range calls {
				_, d, err := s.Decide(ctx, req(prefix, "settle-race", store.Take, t0, 2, p), nil)
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					continue
				}
				if _, _, err := s.Decide(ctx, req(prefix, "settle-race", store.Settle, t0, -1, p), nil); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	_, d, err := s.Decide(ctx, req(prefix, "settle-race", store.Peek, t0, 0, p), nil)
	if err != nil {
		t.Fatal(err)
	}
	used := l.Limit - d.Remaining
	if int64(admitted) != used {
		t.Fatalf("%d calls admitted and settled to 1 each, but %d units used", admitted, used)
	}
	if used > l.Limit {
		t.Fatalf("%d units used of %d", used, l.Limit)
	}
}
