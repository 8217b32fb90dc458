package core

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// step is one call in a simulated sequence.
type step struct {
	now, cost int64
}

// checkInvariants runs steps against l from a fresh state and fails t on any
// broken invariant. It returns the admitted calls.
func checkInvariants(t testing.TB, l Limit, steps []step) []step {
	t.Helper()
	s := State{}
	if l.Algorithm == SlidingLog {
		s.Log = make([]int64, 0, l.Limit)
	}
	var admitted []step
	maxNow := int64(0)
	for i, st := range steps {
		before := cloneState(s)
		p, err := Peek(l, s, st.now, st.cost)
		if err != nil {
			t.Fatalf("step %d: Peek: %v", i, err)
		}
		if !stateEqual(s, before) {
			t.Fatalf("step %d: Peek changed the state", i)
		}
		d, n, err := Take(l, s, st.now, st.cost)
		if err != nil {
			t.Fatalf("step %d: Take: %v", i, err)
		}
		if d != p {
			t.Fatalf("step %d: Peek %+v != Take %+v", i, p, d)
		}
		if d.Remaining < 0 || d.Remaining > l.Limit || d.ResetAfter < 0 || d.Delay < 0 {
			t.Fatalf("step %d: out of range %+v", i, d)
		}
		if d.Allowed != (d.RetryAfter == 0) && !(d.RetryAfter == Never && !d.Allowed) {
			t.Fatalf("step %d: allowed/retry mismatch %+v", i, d)
		}
		if !d.Allowed {
			if !stateEqual(n, before) {
				t.Fatalf("step %d: denial changed the state", i)
			}
			if st.cost > l.Limit {
				if d.RetryAfter != Never {
					t.Fatalf("step %d: cost > limit must be Never: %+v", i, d)
				}
			} else {
				// Retry-after is exact: not earlier, not later.
				ok, _ := Peek(l, before, st.now+d.RetryAfter, st.cost)
				if !ok.Allowed {
					t.Fatalf("step %d (%+v): retry at +%d still denied: %+v (state %+v)", i, st, d.RetryAfter, ok, before)
				}
				if d.RetryAfter > 1 {
					if early, _ := Peek(l, before, st.now+d.RetryAfter-1, st.cost); early.Allowed {
						t.Fatalf("step %d (%+v): retry-after %d is late: allowed 1µs earlier (state %+v)", i, st, d.RetryAfter, before)
					}
				}
			}
		}
		// Reset-after: afterwards the state decides like a fresh one.
		at := st.now + d.ResetAfter
		if at <= MaxTime && st.now >= maxNow {
			for _, c := range []int64{1, l.Limit} {
				got, _ := Peek(l, n, at, c)
				want, _ := Peek(l, State{}, at, c)
				if got != want {
					t.Fatalf("step %d: at reset-after +%d state %+v decides %+v, fresh %+v", i, d.ResetAfter, n, got, want)
				}
			}
		}
		// A clock that steps back never refunds.
		if st.now < maxNow {
			ahead, _ := Peek(l, before, maxNow, 0)
			back, _ := Peek(l, before, st.now, 0)
			if back.Remaining > ahead.Remaining {
				t.Fatalf("step %d: backwards clock refunded: remaining %d at %d, %d at %d", i, back.Remaining, st.now, ahead.Remaining, maxNow)
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

// checkAdmissionBound checks that the admitted calls never exceed what the
// algorithm allows over any interval. Calls are taken at the effective time
// max(now so far), as the algorithms read a backwards clock.
func checkAdmissionBound(t testing.TB, l Limit, admitted []step) {
	t.Helper()
	eff := make([]step, len(admitted))
	hi := int64(0)
	for i, a := range admitted {
		hi = max(hi, a.now)
		eff[i] = step{hi, a.cost}
	}
	if l.Algorithm == GCRA {
		eff = admitted // GCRA has no last-seen time: bound on real times
		slices.SortStableFunc(eff, func(a, b step) int { return int(a.now - b.now) })
	}
	w := l.Window
	for i := range eff {
		var sum int64
		for j := i; j < len(eff); j++ {
			sum += eff[j].cost
			span := eff[j].now - eff[i].now
			var bound int64
			switch l.Algorithm {
			case FixedWindow, SlidingWindow:
				if eff[i].now/w != eff[j].now/w {
					continue
				}
				bound = l.Limit
			case SlidingLog:
				if span >= w {
					continue
				}
				bound = l.Limit
			default:
				// Limit plus what refills in span: floor(span×rate/window).
				bound = l.Limit + span*l.rate()/w
			}
			if sum > bound {
				t.Fatalf("%v admitted %d > %d in [%d, %d]", l.Algorithm, sum, bound, eff[i].now, eff[j].now)
			}
		}
	}
}

func cloneState(s State) State {
	s.Log = slices.Clone(s.Log)
	return s
}

func stateEqual(a, b State) bool {
	return a.Algorithm == b.Algorithm && a.T == b.T && a.X == b.X && a.Y == b.Y && slices.Equal(a.Log, b.Log)
}

var allAlgorithms = []Algorithm{FixedWindow, SlidingWindow, SlidingLog, TokenBucket, LeakyBucket, GCRA}

func randomLimit(r *rand.Rand, alg Algorithm) Limit {
	l := Limit{Algorithm: alg, Limit: 1 + r.Int64N(12), Window: 1 + r.Int64N(2000)}
	if alg >= TokenBucket && r.IntN(2) == 0 {
		l.Rate = 1 + r.Int64N(20)
	}
	return l
}

func randomSteps(r *rand.Rand, l Limit, n int) []step {
	now := r.Int64N(1_000_000)
	steps := make([]step, n)
	for i := range steps {
		switch r.IntN(10) {
		case 0:
			now = max(0, now-r.Int64N(l.Window*2)) // backwards
		case 1:
			now += r.Int64N(l.Window * 3) // a long gap
		default:
			now += r.Int64N(l.Window/4 + 1)
		}
		cost := int64(1)
		switch r.IntN(6) {
		case 0:
			cost = 0
		case 1:
			cost = r.Int64N(l.Limit + 2)
		}
		steps[i] = step{now, cost}
	}
	return steps
}

func TestInvariantsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			for range 3000 {
				l := randomLimit(r, alg)
				checkInvariants(t, l, randomSteps(r, l, 40))
			}
		})
	}
}

func FuzzInvariants(f *testing.F) {
	f.Add(uint8(1), uint16(5), uint16(100), uint8(0), []byte{1, 2, 3, 200, 4})
	f.Add(uint8(4), uint16(3), uint16(1000), uint8(7), []byte{0, 0, 0, 9, 250, 1})
	f.Fuzz(func(t *testing.T, alg uint8, lim, win uint16, rate uint8, script []byte) {
		l := Limit{Algorithm: allAlgorithms[int(alg)%len(allAlgorithms)], Limit: 1 + int64(lim%64), Window: 1 + int64(win)}
		if l.Algorithm >= TokenBucket {
			l.Rate = int64(rate % 32)
		}
		now := int64(10_000_000)
		var steps []step
		for i := 0; i+1 < len(script) && len(steps) < 64; i += 2 {
			dt := int64(script[i])
			if dt >= 240 {
				dt = -(dt - 239) * l.Window / 4 // backwards
			} else if dt >= 200 {
				dt = (dt - 199) * l.Window
			}
			now = max(0, now+dt)
			steps = append(steps, step{now, int64(script[i+1]) % (l.Limit + 3)})
		}
		checkInvariants(t, l, steps)
	})
}
