package core_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rlcore/rl/core"
)

// randomLimit returns a valid limit of a with small random parameters.
func randomLimit(r *rand.Rand, a core.Algorithm) core.Limit {
	l := core.Limit{Algorithm: a, Limit: 1 + r.Int64N(20), Window: 1 + r.Int64N(10*sec)}
	if !a.Windowed() && r.IntN(2) == 0 {
		l.Rate = 1 + r.Int64N(30)
	}
	return l
}

// TestCarryUsage holds the promises of a parameter change on a key, for
// every pair of algorithms and random parameters: a state with u units
// used under the old limit (written at one instant), read at that instant
// under the new limit, has exactly min(u, new Limit) used — (a) what is
// left is admitted, (b) the usage counts against the new limit, never a
// fraction of a unit refunded — and, at any later time, a denial's
// RetryAfter is exact and never longer than the new limit alone could
// give (c). Old states from the window algorithms are anchored at their
// window's start (see core's "Carrying usage"), so (a) and (b) are checked
// exactly for the others, and (c) for all.
func TestCarryUsage(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 11))
	for _, from := range core.Algorithms() {
		for _, to := range core.Algorithms() {
			for i := range 200 {
				ol, nl := randomLimit(r, from), randomLimit(r, to)
				written := t0 + r.Int64N(10*sec)
				used := 1 + r.Int64N(ol.Limit)
				name := fmt.Sprintf("%v→%v #%d %+v → %+v, %d used", from, to, i, ol, nl, used)
				d, s, err := core.Take(ol, core.State{Log: make([]int64, 0, core.MaxLogLimit)}, written, used)
				if err != nil || !d.Allowed {
					t.Fatalf("%s: %+v %v", name, d, err)
				}
				if s.Log == nil {
					s.Log = make([]int64, 0, core.MaxLogLimit)
				}
				if from != core.FixedWindow && from != core.SlidingWindow && (from != to || !from.Windowed()) {
					want := max(0, nl.Limit-used)
					p, err := core.Peek(nl, s, written, 0)
					if err != nil || p.Remaining != want {
						t.Fatalf("%s: remaining %d, want %d (%+v %v)", name, p.Remaining, want, p, err)
					}
					if want > 0 {
						if p, _ := core.Peek(nl, s, written, want); !p.Allowed {
							t.Fatalf("%s: what is left (%d) is denied: %+v", name, want, p)
						}
					}
					if want < nl.Limit {
						if p, _ := core.Peek(nl, s, written, want+1); p.Allowed {
							t.Fatalf("%s: more than what is left (%d) admitted: %+v", name, want+1, p)
						}
					}
				}
				for _, later := range []int64{0, 1, r.Int64N(nl.Window + 1), r.Int64N(3 * sec)} {
					for _, cost := range []int64{1, 1 + r.Int64N(nl.Limit), nl.Limit} {
						d, err := core.Peek(nl, s, written+later, cost)
						if err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						if !d.Allowed && d.RetryAfter > longestWait(t, nl) {
							t.Fatalf("%s, +%d cost %d: RetryAfter %d > %d", name, later, cost, d.RetryAfter, longestWait(t, nl))
						}
						requireExact(t, nl, s, written+later, cost, d, name)
					}
				}
			}
		}
	}
}

// TestSettleDebt: a debt from Settle is paid off exactly as the algorithm
// restores units, and a refund never goes below nothing used.
func TestSettleDebt(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 5))
	for _, a := range core.Algorithms() {
		for i := range 300 {
			l := randomLimit(r, a)
			now := t0 + r.Int64N(10*sec)
			name := fmt.Sprintf("%v #%d %+v", a, i, l)
			s := core.State{Log: make([]int64, 0, core.MaxLogLimit)}
			est := 1 + r.Int64N(l.Limit)
			d, s, err := core.Take(l, s, now, est)
			if err != nil || !d.Allowed {
				t.Fatalf("%s: %+v %v", name, d, err)
			}
			delta := r.Int64N(3*l.Limit) - l.Limit
			d, n, err := core.Settle(l, s, now, delta)
			if err != nil {
				t.Fatalf("%s settle %d: %v", name, delta, err)
			}
			want := max(0, l.Limit-max(0, est+delta))
			if a == core.SlidingWindow && est+delta > 0 {
				// The weighted count is rounded: compare what is admitted.
				want = d.Remaining
			}
			if d.Remaining != want {
				t.Fatalf("%s: %d then %+d: remaining %d, want %d", name, est, delta, d.Remaining, want)
			}
			if n.Log == nil {
				n.Log = make([]int64, 0, core.MaxLogLimit)
			}
			for _, later := range []int64{0, 1, r.Int64N(l.Window + 1), r.Int64N(5 * l.Window)} {
				for _, cost := range []int64{1, l.Limit} {
					p, err := core.Peek(l, n, now+later, cost)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					requireExact(t, l, n, now+later, cost, p, name)
				}
			}
		}
	}
}

// TestCarryNothingKeepsLogStorage: a state recorded under other
// parameters with no usage to carry (a bucket at level 0) reads as fresh,
// and a sliding log takes and settles on it in the storage the state had,
// as on any fresh state: never ErrLogCapacity for want of the storage the
// caller gave. (The SQL port, whose logs have no capacity, decides so.)
func TestCarryNothingKeepsLogStorage(t *testing.T) {
	t.Parallel()
	l := core.Limit{Algorithm: core.SlidingLog, Limit: 2, Window: sec}
	s := core.State{Algorithm: core.TokenBucket, T: t0, L: 2, W: 632, R: 2, Log: make([]int64, 0, 10)}
	d, n, err := core.Take(l, s, t0, 1)
	if err != nil || !d.Allowed || len(n.Log) != 1 {
		t.Fatalf("take: %+v %+v %v", d, n, err)
	}
	d, n, err = core.Settle(l, s, t0, 1)
	if err != nil || !d.Allowed || len(n.Log) != 1 {
		t.Fatalf("settle: %+v %+v %v", d, n, err)
	}
}
