package core_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/difftest"
)

// Tests of the promise core.State makes about parameter changes: a state
// written under other parameters never denies longer than a state written
// under the new ones could, and RetryAfter stays exact.

const (
	µs   int64 = 1
	sec        = 1_000_000 * µs
	year       = 365 * 24 * 3600 * sec
	t0   int64 = 1767225600000000 // 2026-01-01
)

var algorithms = core.Algorithms()

// longestWait is the longest RetryAfter a state written under l, at or
// before the call's time, may cause for a cost within the limit: the
// algorithm's oracle says (difftest.Oracle).
func longestWait(t *testing.T, l core.Limit) int64 {
	t.Helper()
	o, err := difftest.OracleFor(l.Algorithm)
	if err != nil {
		t.Fatal(err)
	}
	return o.LongestWait(l)
}

// requireExact checks that a call of cost at now+d.RetryAfter is admitted
// and one µs earlier is not.
func requireExact(t *testing.T, l core.Limit, s core.State, now, cost int64, d core.Decision, what string) {
	t.Helper()
	if d.Allowed || d.RetryAfter == core.Never {
		return
	}
	at, err := core.Peek(l, s, now+d.RetryAfter, cost)
	if err != nil {
		t.Fatalf("%s: Peek at retry: %v", what, err)
	}
	if !at.Allowed {
		t.Fatalf("%s: denied at now+RetryAfter (%d): %+v", what, d.RetryAfter, at)
	}
	if d.RetryAfter > 1 {
		before, err := core.Peek(l, s, now+d.RetryAfter-1, cost)
		if err != nil {
			t.Fatalf("%s: Peek before retry: %v", what, err)
		}
		if before.Allowed {
			t.Fatalf("%s: admitted 1 µs before now+RetryAfter (%d)", what, d.RetryAfter)
		}
	}
}

// exhaust takes from l at now until a call of cost 1 is denied, so that the
// state is as full as l allows.
func exhaust(t *testing.T, l core.Limit, now int64) core.State {
	t.Helper()
	s := core.State{Log: make([]int64, 0, core.MaxLogLimit)}
	d, n, err := core.Take(l, s, now, l.Limit)
	if err != nil || !d.Allowed {
		t.Fatalf("exhaust %+v: %+v %v", l, d, err)
	}
	return n
}

// TestParamsChangeClamped: every algorithm, a state made full under extreme
// old parameters, read under new ones: the wait is at most what the new
// parameters allow, and exact. 1 per year switched to 10 per second frees
// the key within 0.1 s.
func TestParamsChangeClamped(t *testing.T) {
	t.Parallel()
	type params struct{ limit, window, rate int64 }
	olds := []params{
		{1, year, 0},                          // 1 per year
		{1, core.MaxWindow, 0},                // 1 per 31 years
		{4096, 1, 0},                          // a huge rate
		{1 << 20, core.MaxUnits >> 20, 1},     // a tiny rate, huge capacity
		{3, 7, core.MaxLimit},                 // a huge rate, tiny capacity
		{1000, sec, 999},                      // close to the new ones
		{5, 3 * sec, 2},                       // a window off the new one's grid
		{2, 1_000_003, 0},                     // a prime window
		{4096, year / 1000, 0},                // a long window, many units
		{1, core.MaxWindow / 1_000_000, 1},    // 1 per 1000 s
		{core.MaxLogLimit, core.MaxWindow, 0}, // a full log over 31 years
	}
	news := []params{
		{10, sec, 0},
		{1, 1, 0},
		{3, 7 * sec, 2},
		{100, 60 * sec, 1},
		{2, 1_000_001, 0},
		{7, 24 * 3600 * sec, 0},
	}
	for _, alg := range algorithms {
		for _, o := range olds {
			for _, nw := range news {
				ol := core.Limit{Algorithm: alg, Limit: o.limit, Window: o.window, Rate: o.rate}
				nl := core.Limit{Algorithm: alg, Limit: nw.limit, Window: nw.window, Rate: nw.rate}
				if alg.Windowed() {
					ol.Rate, nl.Rate = 0, 0
				}
				if ol.Validate() != nil || nl.Validate() != nil {
					continue
				}
				name := fmt.Sprintf("%s/%+v→%+v", alg, o, nw)
				for _, written := range []int64{t0, t0 + 123_457, t0 + 59*sec + 999_999} {
					s := exhaust(t, ol, written)
					for _, later := range []int64{0, 1, 99_999, sec} {
						now := written + later
						for _, cost := range []int64{1, nl.Limit} {
							d, err := core.Peek(nl, s, now, cost)
							if err != nil {
								t.Fatalf("%s: %v", name, err)
							}
							if !d.Allowed && d.RetryAfter > longestWait(t, nl) {
								t.Fatalf("%s written %d, now +%d, cost %d: RetryAfter %d > %d (state %+v)",
									name, written, later, cost, d.RetryAfter, longestWait(t, nl), s)
							}
							requireExact(t, nl, s, now, cost, d, name)
						}
					}
				}
			}
		}
	}
}

// TestGCRAYearToSecond is the case in the issue: a key limited to 1 per year,
// switched to 10 per second, is free again within 0.1 s, not a year. With
// the parameters recorded in the state, the one unit used carries over: 9
// of 10 are left at once and the 10th comes back 0.1 s after the old
// admission. A legacy state (no recorded parameters) is clamped instead:
// denied for 0.1 s from the old admission.
func TestGCRAYearToSecond(t *testing.T) {
	t.Parallel()
	old := core.Limit{Algorithm: core.GCRA, Limit: 1, Window: year}
	s := exhaust(t, old, t0)
	nl := core.Limit{Algorithm: core.GCRA, Limit: 10, Window: sec}
	d, err := core.Peek(nl, s, t0+1, 9)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("want 9 of 10 left at once: %+v %v", d, err)
	}
	d, err = core.Peek(nl, s, t0+1, 10)
	if err != nil || d.Allowed || d.RetryAfter != sec/10-1 {
		t.Fatalf("want 10 denied for 0.1 s from the old admission, got %+v %v", d, err)
	}
	requireExact(t, nl, s, t0+1, 10, d, "gcra")

	legacy := s
	legacy.L, legacy.W, legacy.R = 0, 0, 0
	d, err = core.Peek(nl, legacy, t0+1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.RetryAfter != sec/10-1 {
		t.Fatalf("legacy: want denied for 0.1 s from the old admission, got %+v", d)
	}
	requireExact(t, nl, legacy, t0+1, 1, d, "gcra")
	d, _, err = core.Take(nl, legacy, t0+sec/10, 1)
	if err != nil || !d.Allowed {
		t.Fatalf("legacy: want admitted at 0.1 s: %+v %v", d, err)
	}
}

// TestParamsChangeRandom: random limits and traffic, the parameters changed
// at random points on a clock that never steps back: every denial's
// RetryAfter is exact and at most the current parameters' longest wait,
// and every NextAfter exact (checkNextAfter), states written under other
// parameters (counts above a lowered limit) included.
func TestParamsChangeRandom(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(10, 2026))
	randLimit := func(alg core.Algorithm) core.Limit {
		for {
			l := core.Limit{Algorithm: alg, Limit: 1 + r.Int64N(1<<uint(r.IntN(13))), Window: 1 + r.Int64N(1<<uint(r.IntN(46)))}
			if !alg.Windowed() && r.IntN(2) == 0 {
				l.Rate = 1 + r.Int64N(1<<uint(r.IntN(41)))
			}
			if l.Validate() == nil {
				return l
			}
		}
	}
	iters := 3000
	if testing.Short() {
		iters = 300
	}
	for _, alg := range algorithms {
		for range iters {
			l := randLimit(alg)
			s := core.State{Log: make([]int64, 0, core.MaxLogLimit)}
			now := t0 + r.Int64N(year)
			for i := range 12 {
				if r.IntN(3) == 0 {
					l = randLimit(alg)
				}
				switch r.IntN(3) {
				case 0:
					now += r.Int64N(l.Window + 1)
				case 1:
					now += r.Int64N(l.Window/8 + 1)
				}
				cost := 1 + r.Int64N(l.Limit)
				d, n, err := core.Take(l, s, now, cost)
				if err != nil {
					t.Fatalf("%s step %d %+v: %v", alg, i, l, err)
				}
				if !d.Allowed {
					if d.RetryAfter > longestWait(t, l) {
						t.Fatalf("%s step %d %+v state %+v cost %d: RetryAfter %d > %d", alg, i, l, s, cost, d.RetryAfter, longestWait(t, l))
					}
					requireExact(t, l, s, now, cost, d, fmt.Sprintf("%s step %d %+v state %+v", alg, i, l, s))
				}
				if msg := checkNextAfter(l, n, now, d); msg != "" {
					t.Fatalf("%s step %d %+v state %+v cost %d: %s", alg, i, l, s, cost, msg)
				}
				s = n
			}
		}
	}
}

// admittedIn counts the admissions at times in [from, from+w).
func admittedIn(times []int64, from, w int64) int64 {
	n := int64(0)
	for _, at := range times {
		if at >= from && at < from+w {
			n++
		}
	}
	return n
}

// TestSlidingWindowBound: the sliding window counter admits at most 2L−1
// units in an interval of one window (the documented bound), and that bound
// is reached: L at the last µs of one window, then L−1 before the end of
// the next. The sliding log never admits more than L.
func TestSlidingWindowBound(t *testing.T) {
	t.Parallel()
	const L, w = 10, 10 * sec
	l := core.Limit{Algorithm: core.SlidingWindow, Limit: L, Window: w}
	var s core.State
	var times []int64
	take := func(now int64) bool {
		d, n, err := core.Take(l, s, now, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			s = n
			times = append(times, now)
		}
		return d.Allowed
	}
	first := t0 + w - 1 // the last µs of a window
	for range L {
		if !take(first) {
			t.Fatal("a fresh window denied")
		}
	}
	for take(first + w - 1) { // the last µs of the interval [first, first+w)
	}
	if got := admittedIn(times, first, w); got != 2*L-1 {
		t.Fatalf("worst case admitted %d in one window, want 2L−1 = %d", got, 2*L-1)
	}

	r := rand.New(rand.NewPCG(2, 1))
	for _, alg := range []core.Algorithm{core.SlidingWindow, core.SlidingLog} {
		worst := 0.0
		for range 200 {
			l := core.Limit{Algorithm: alg, Limit: 1 + r.Int64N(20), Window: 1 + r.Int64N(sec)}
			s := core.State{Log: make([]int64, 0, core.MaxLogLimit)}
			var times []int64
			now := t0 + r.Int64N(l.Window)
			for range 400 {
				now += r.Int64N(l.Window/(2*l.Limit) + 1)
				d, n, err := core.Take(l, s, now, 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					s = n
					times = append(times, now)
				}
			}
			for _, from := range times {
				got := admittedIn(times, from, l.Window)
				bound := 2*l.Limit - 1
				if alg == core.SlidingLog {
					bound = l.Limit
				}
				if got > bound {
					t.Fatalf("%+v: %d admitted in [%d, +%d), bound %d", l, got, from, l.Window, bound)
				}
				worst = max(worst, float64(got)/float64(l.Limit))
			}
		}
		t.Logf("%s: at most %.2f × Limit in one window of random traffic", alg, worst)
	}
}
