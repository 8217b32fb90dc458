package core_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/difftest"
	"github.com/rlcore/rl/tests/vectors/vectorstest"
)

// step is one call of a checked sequence.
type step struct {
	now, cost int64
}

// checkInvariants runs the Take steps of seq (a difftest.Config.Valid
// sequence: one limit, never changed) from a fresh state and fails t on any
// broken invariant. It returns the admitted calls.
func checkInvariants(t testing.TB, seq difftest.Sequence) []step {
	t.Helper()
	l := seq.Limits[0]
	s := core.State{Log: make([]int64, 0, core.MaxLogLimit)}
	var admitted []step
	maxNow := int64(0)
	for i, ds := range seq.Steps {
		st := step{ds.Now, ds.Cost}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("%v\nstep %d: "+format, append([]any{seq, i}, args...)...)
		}
		before := cloneState(s)
		p, err := core.Peek(l, s, st.now, st.cost)
		if err != nil {
			fail("Peek: %v", err)
		}
		if !stateEqual(s, before) {
			fail("Peek changed the state")
		}
		d, n, err := core.Take(l, s, st.now, st.cost)
		if err != nil {
			fail("Take: %v", err)
		}
		if d != p {
			fail("Peek %+v != Take %+v", p, d)
		}
		if d.Remaining < 0 || d.Remaining > l.Limit || d.ResetAfter < 0 || d.Delay < 0 {
			fail("out of range %+v", d)
		}
		if d.Allowed != (d.RetryAfter == 0) && !(d.RetryAfter == core.Never && !d.Allowed) {
			fail("allowed/retry mismatch %+v", d)
		}
		if !d.Allowed {
			if !stateEqual(n, before) {
				fail("denial changed the state")
			}
			if st.cost > l.Limit {
				if d.RetryAfter != core.Never {
					fail("cost > limit must be Never: %+v", d)
				}
			} else if at := st.now + d.RetryAfter; at <= core.MaxTime {
				// Retry-after is exact: not earlier, not later.
				if ok, _ := core.Peek(l, before, at, st.cost); !ok.Allowed {
					fail("retry at +%d still denied: %+v (state %+v)", d.RetryAfter, ok, before)
				}
				if d.RetryAfter > 1 {
					if early, _ := core.Peek(l, before, at-1, st.cost); early.Allowed {
						fail("retry-after %d is late: allowed 1µs earlier (state %+v)", d.RetryAfter, before)
					}
				}
			}
		}
		// Reset-after: afterwards the state decides like a fresh one.
		if at := st.now + d.ResetAfter; at <= core.MaxTime && st.now >= maxNow {
			for _, c := range []int64{1, min(l.Limit, core.MaxCost)} {
				got, _ := core.Peek(l, n, at, c)
				want, _ := core.Peek(l, core.State{}, at, c)
				if got != want {
					fail("at reset-after +%d state %+v decides %+v, fresh %+v", d.ResetAfter, n, got, want)
				}
			}
		}
		if msg := checkNextAfter(l, n, st.now, d); msg != "" {
			fail("%s", msg)
		}
		// A clock that steps back never refunds.
		if st.now < maxNow {
			ahead, _ := core.Peek(l, before, maxNow, 0)
			back, _ := core.Peek(l, before, st.now, 0)
			if back.Remaining > ahead.Remaining {
				fail("backwards clock refunded: remaining %d at %d, %d at %d", back.Remaining, st.now, ahead.Remaining, maxNow)
			}
		}
		if d.Allowed && st.cost > 0 {
			admitted = append(admitted, st)
		}
		maxNow = max(maxNow, st.now)
		s = n
	}
	checkAdmissionBound(t, l, admitted)
	return admitted
}

// checkNextAfter checks d.NextAfter, a decision of l at now whose state
// after the call is s: 0 exactly when Remaining is the whole Limit, else
// the first instant at which a call of Remaining+1 passes on s (exact: one
// µs earlier it is denied), and never after a denial's RetryAfter. It
// returns what is wrong, or "".
func checkNextAfter(l core.Limit, s core.State, now int64, d core.Decision) string {
	switch {
	case d.Remaining == d.Limit && d.NextAfter != 0:
		return fmt.Sprintf("next-after %d with the whole limit remaining: %+v", d.NextAfter, d)
	case d.Remaining < d.Limit && d.NextAfter <= 0:
		return fmt.Sprintf("no next-after with %d of %d remaining: %+v", d.Remaining, d.Limit, d)
	case !d.Allowed && d.RetryAfter != core.Never && d.NextAfter > d.RetryAfter:
		return fmt.Sprintf("next-after %d later than retry-after %d: %+v", d.NextAfter, d.RetryAfter, d)
	case d.NextAfter == 0 || now+d.NextAfter > core.MaxTime:
		return ""
	}
	more := d.Remaining + 1
	if at, _ := core.Peek(l, s, now+d.NextAfter, more); !at.Allowed {
		return fmt.Sprintf("a cost of %d still denied at next-after +%d: %+v (state %+v)", more, d.NextAfter, at, s)
	}
	if early, _ := core.Peek(l, s, now+d.NextAfter-1, more); early.Allowed {
		return fmt.Sprintf("next-after %d is late: a cost of %d passes 1µs earlier (state %+v)", d.NextAfter, more, s)
	}
	return ""
}

// checkAdmissionBound checks that the admitted calls never exceed what the
// algorithm allows over any interval (its oracle's Bound). Calls are taken
// at the effective time max(now so far), as the algorithms read a
// backwards clock, unless the oracle bounds real times.
func checkAdmissionBound(t testing.TB, l core.Limit, admitted []step) {
	t.Helper()
	o, err := difftest.OracleFor(l.Algorithm)
	if err != nil {
		t.Fatal(err)
	}
	eff := make([]step, len(admitted))
	hi := int64(0)
	for i, a := range admitted {
		hi = max(hi, a.now)
		eff[i] = step{hi, a.cost}
	}
	if o.RealTimes {
		eff = admitted
		slices.SortStableFunc(eff, func(a, b step) int { return int(a.now - b.now) })
	}
	for i := range eff {
		var sum int64
		for j := i; j < len(eff); j++ {
			sum += eff[j].cost
			bound, ok := o.Bound(l, eff[i].now, eff[j].now)
			if !ok {
				continue
			}
			if sum > bound {
				t.Fatalf("%v admitted %d > %d in [%d, %d]", l.Algorithm, sum, bound, eff[i].now, eff[j].now)
			}
		}
	}
}

func cloneState(s core.State) core.State {
	s.Log = slices.Clone(s.Log)
	return s
}

func stateEqual(a, b core.State) bool {
	return a.Algorithm == b.Algorithm && a.T == b.T && a.X == b.X && a.Y == b.Y && slices.Equal(a.Log, b.Log)
}

// TestInvariantsRandom checks the invariants on random valid sequences
// (package internal/testkit/difftest): every algorithm, limits and windows from 1 to
// their bounds, times from 0 to MaxTime, a clock that steps back.
func TestInvariantsRandom(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 2000
	}
	for seed := range uint64(n) {
		checkInvariants(t, difftest.Generate(seed, difftest.Config{Valid: true}))
	}
}

func FuzzInvariants(f *testing.F) {
	f.Add([]byte{1, 2, 3, 200, 4})
	f.Add([]byte{0, 0, 0, 9, 250, 1, 7, 7, 7, 7, 7, 7, 7, 7, 7})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkInvariants(t, difftest.FromBytes(data, difftest.Config{Valid: true}))
	})
}

// TestSingleVsAll holds the one-limit path of TakeAll and PeekAll to Take
// and Peek, and the multi-limit calls to themselves, on the random
// sequences of the differential tests.
func TestSingleVsAll(t *testing.T) {
	n := 1500
	if testing.Short() {
		n = 300
	}
	r := difftest.Runner{Deciders: []difftest.Decider{
		{Name: "Take/Peek", Decider: vectorstest.Native{}},
		{Name: "TakeAll/PeekAll", Decider: core.Native{}},
	}}
	t.Log(r.Check(t, difftest.Config{}, 1, n))
}
