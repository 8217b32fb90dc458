package core_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rlcore/rl/core"
)

const (
	ms = 1000 * µs
	// day0 is 2026-01-01T00:00:00Z (t0): windows of a second, a minute
	// and a day start on it.
	day0 = t0
)

// call is one call of a pinned sequence and what it must report.
type call struct {
	at, cost int64
	peek     bool
	allowed  bool
	// remaining, resetAfter and nextAfter of every limit, in order.
	remaining, resetAfter, nextAfter []int64
}

// TestNextAfterPinned pins NextAfter, the RateLimit field's t, for every
// algorithm, hand-computed: a fresh key, quota coming back before the full
// reset (sliding window, sliding log, the buckets, GCRA), denials (never
// later than RetryAfter) and a multi-limit policy, denied by one limit,
// whose other limit reports its untouched state.
func TestNextAfterPinned(t *testing.T) {
	one := func(v int64) []int64 { return []int64{v} }
	cases := []struct {
		name   string
		limits []core.Limit
		calls  []call
	}{
		{"fixed window: the window's end", []core.Limit{{Algorithm: core.FixedWindow, Limit: 10, Window: 60 * sec}}, []call{
			{at: day0 + sec, cost: 1, allowed: true, remaining: one(9), resetAfter: one(59 * sec), nextAfter: one(59 * sec)},
			{at: day0 + 30*sec, cost: 9, allowed: true, remaining: one(0), resetAfter: one(30 * sec), nextAfter: one(30 * sec)},
			{at: day0 + 40*sec, cost: 1, allowed: false, remaining: one(0), resetAfter: one(20 * sec), nextAfter: one(20 * sec)},
			// A peek of a fresh window: nothing to restore, no t.
			{at: day0 + 60*sec, peek: true, allowed: true, remaining: one(10), resetAfter: one(0), nextAfter: one(0)},
		}},
		{"sliding window: one request comes back only when it has slid out", []core.Limit{{Algorithm: core.SlidingWindow, Limit: 10, Window: 60 * sec}}, []call{
			// The unit counts whole in its own window, then slides out over
			// the next: a 10th unit fits again at the end of the next
			// window, 2w − 1s from now. (Issue 23 took t=119 for a bug; it
			// is this.)
			{at: day0 + sec, cost: 1, allowed: true, remaining: one(9), resetAfter: one(119 * sec), nextAfter: one(119 * sec)},
		}},
		{"sliding window: the previous window slides out a unit at a time", []core.Limit{{Algorithm: core.SlidingWindow, Limit: 10, Window: 60 * sec}}, []call{
			// Now 5 units weigh whole until this window ends; the first one
			// slides out 12 s into the next: 71 s from now.
			{at: day0 + sec, cost: 5, allowed: true, remaining: one(5), resetAfter: one(119 * sec), nextAfter: one(71 * sec)},
			// Next window: 5 units weigh 5×(60−e)/60; one of them is gone
			// every 12 s, the first at e = 12 s. The full reset is 60 s.
			{at: day0 + 60*sec, peek: true, allowed: true, remaining: one(5), resetAfter: one(60 * sec), nextAfter: one(12 * sec)},
			{at: day0 + 66*sec, peek: true, allowed: true, remaining: one(5), resetAfter: one(54 * sec), nextAfter: one(6 * sec)},
			{at: day0 + 72*sec, peek: true, allowed: true, remaining: one(6), resetAfter: one(48 * sec), nextAfter: one(12 * sec)},
		}},
		{"sliding log: the oldest admission's expiry", []core.Limit{{Algorithm: core.SlidingLog, Limit: 3, Window: 60 * sec}}, []call{
			{at: day0, cost: 1, allowed: true, remaining: one(2), resetAfter: one(60 * sec), nextAfter: one(60 * sec)},
			{at: day0 + 10*sec, cost: 1, allowed: true, remaining: one(1), resetAfter: one(60 * sec), nextAfter: one(50 * sec)},
			{at: day0 + 20*sec, cost: 1, allowed: true, remaining: one(0), resetAfter: one(60 * sec), nextAfter: one(40 * sec)},
			// Denied: the retry of one unit is the next unit back.
			{at: day0 + 30*sec, cost: 1, allowed: false, remaining: one(0), resetAfter: one(50 * sec), nextAfter: one(30 * sec)},
			// Denied two units: t is still when one comes back (30 s), the
			// retry when two have (40 s).
			{at: day0 + 30*sec, cost: 2, allowed: false, remaining: one(0), resetAfter: one(50 * sec), nextAfter: one(30 * sec)},
		}},
		{"token bucket: the next whole token", []core.Limit{{Algorithm: core.TokenBucket, Limit: 10, Window: sec}}, []call{
			{at: day0, cost: 3, allowed: true, remaining: one(7), resetAfter: one(300 * ms), nextAfter: one(100 * ms)},
			{at: day0 + 50*ms, peek: true, allowed: true, remaining: one(7), resetAfter: one(250 * ms), nextAfter: one(50 * ms)},
			{at: day0 + 50*ms, cost: 7, allowed: true, remaining: one(0), resetAfter: one(950 * ms), nextAfter: one(50 * ms)},
			{at: day0 + 60*ms, cost: 2, allowed: false, remaining: one(0), resetAfter: one(940 * ms), nextAfter: one(40 * ms)},
		}},
		{"token bucket at a rate below its capacity", []core.Limit{{Algorithm: core.TokenBucket, Limit: 10, Window: sec, Rate: 2}}, []call{
			{at: day0, cost: 10, allowed: true, remaining: one(0), resetAfter: one(5 * sec), nextAfter: one(500 * ms)},
		}},
		{"leaky bucket: the next unit leaked", []core.Limit{{Algorithm: core.LeakyBucket, Limit: 5, Window: sec}}, []call{
			{at: day0, cost: 2, allowed: true, remaining: one(3), resetAfter: one(400 * ms), nextAfter: one(200 * ms)},
			{at: day0 + 100*ms, peek: true, allowed: true, remaining: one(3), resetAfter: one(300 * ms), nextAfter: one(100 * ms)},
		}},
		{"gcra: the next emission", []core.Limit{{Algorithm: core.GCRA, Limit: 5, Window: 60 * sec}}, []call{
			{at: day0, cost: 1, allowed: true, remaining: one(4), resetAfter: one(12 * sec), nextAfter: one(12 * sec)},
			{at: day0, cost: 4, allowed: true, remaining: one(0), resetAfter: one(60 * sec), nextAfter: one(12 * sec)},
			{at: day0 + sec, cost: 1, allowed: false, remaining: one(0), resetAfter: one(59 * sec), nextAfter: one(11 * sec)},
		}},
		{"a burst and a daily limit", []core.Limit{
			{Algorithm: core.TokenBucket, Limit: 10, Window: sec},
			{Algorithm: core.FixedWindow, Limit: 1000, Window: 86400 * sec},
		}, []call{
			{at: day0 + sec, cost: 1, allowed: true, remaining: []int64{9, 999},
				resetAfter: []int64{100 * ms, 86399 * sec}, nextAfter: []int64{100 * ms, 86399 * sec}},
			{at: day0 + sec, cost: 9, allowed: true, remaining: []int64{0, 990},
				resetAfter: []int64{sec, 86399 * sec}, nextAfter: []int64{100 * ms, 86399 * sec}},
			// Denied by the burst: the daily limit is not charged and
			// reports its state as it is.
			{at: day0 + sec + 10*ms, cost: 1, allowed: false, remaining: []int64{0, 990},
				resetAfter: []int64{990 * ms, 86399*sec - 10*ms}, nextAfter: []int64{90 * ms, 86399*sec - 10*ms}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ss := make([]core.State, len(c.limits))
			for i := range ss {
				ss[i].Log = make([]int64, 0, core.MaxLogLimit)
			}
			ds := make([]core.Decision, len(c.limits))
			for i, k := range c.calls {
				var err error
				if k.peek {
					_, err = core.PeekAll(c.limits, ss, k.at, k.cost, ds)
				} else {
					_, err = core.TakeAll(c.limits, ss, k.at, k.cost, ds)
				}
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				for j, d := range ds {
					if d.Allowed != k.allowed && len(ds) == 1 {
						t.Errorf("call %d: allowed %v, want %v", i, d.Allowed, k.allowed)
					}
					if d.Remaining != k.remaining[j] || d.ResetAfter != k.resetAfter[j] || d.NextAfter != k.nextAfter[j] {
						t.Errorf("call %d limit %d: remaining %d, reset-after %d, next-after %d; want %d, %d, %d",
							i, j, d.Remaining, d.ResetAfter, d.NextAfter, k.remaining[j], k.resetAfter[j], k.nextAfter[j])
					}
					if msg := checkNextAfter(c.limits[j], ss[j], k.at, d); msg != "" {
						t.Errorf("call %d limit %d: %s", i, j, msg)
					}
				}
			}
		})
	}
}

// TestNextAfterAll checks every limit's NextAfter (checkNextAfter) in
// random multi-limit policies of every algorithm: admissions, peeks, and
// denials where the limits that would have admitted report their untouched
// state.
func TestNextAfterAll(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 2026))
	algs := algorithms
	n := 3000
	if testing.Short() {
		n = 500
	}
	for range n {
		ls := make([]core.Limit, 1+r.IntN(4))
		for i := range ls {
			l := core.Limit{Algorithm: algs[r.IntN(len(algs))], Limit: 1 + r.Int64N(20), Window: (1 + r.Int64N(60)) * sec / 10}
			if !l.Algorithm.Windowed() && r.IntN(2) == 0 {
				l.Rate = 1 + r.Int64N(20)
			}
			ls[i] = l
		}
		ss := make([]core.State, len(ls))
		for i := range ss {
			ss[i].Log = make([]int64, 0, core.MaxLogLimit)
		}
		ds := make([]core.Decision, len(ls))
		now := day0 + r.Int64N(sec)
		for range 30 {
			now += r.Int64N(2 * sec)
			cost := r.Int64N(6)
			after := ss
			if r.IntN(4) == 0 {
				// A peek reports what a take would: its decisions are
				// those of the states a take would write.
				if _, err := core.PeekAll(ls, ss, now, cost, ds); err != nil {
					t.Fatal(err)
				}
				after = make([]core.State, len(ss))
				for i := range ss {
					after[i] = cloneState(ss[i])
					after[i].Log = append(make([]int64, 0, core.MaxLogLimit), ss[i].Log...)
				}
				taken := make([]core.Decision, len(ls))
				if _, err := core.TakeAll(ls, after, now, cost, taken); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(taken, ds) {
					t.Fatalf("peek %+v, take %+v", ds, taken)
				}
			} else if _, err := core.TakeAll(ls, ss, now, cost, ds); err != nil {
				t.Fatal(err)
			}
			for j, d := range ds {
				if msg := checkNextAfter(ls[j], after[j], now, d); msg != "" {
					t.Fatalf("limits %+v, limit %d at %d cost %d: %s", ls, j, now, cost, msg)
				}
			}
		}
	}
}

// TestDeriveNextAfter holds DeriveNextAfter, what a decision without
// NextAfter (the PL/pgSQL port's) tells of it, to NextAfter on random
// traffic: equal or 1 µs later for the fixed window, the buckets and GCRA,
// never earlier for the sliding algorithms, 0 exactly when NextAfter is.
func TestDeriveNextAfter(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 23))
	algs := algorithms
	exact := 0
	for range 5000 {
		l := core.Limit{Algorithm: algs[r.IntN(len(algs))], Limit: 1 + r.Int64N(50), Window: 1 + r.Int64N(90*sec)}
		if !l.Algorithm.Windowed() && r.IntN(2) == 0 {
			l.Rate = 1 + r.Int64N(50)
		}
		s := core.State{Log: make([]int64, 0, core.MaxLogLimit)}
		now := day0 + r.Int64N(86400*sec)
		for range 20 {
			now += r.Int64N(l.Window/4 + 1)
			d, n, err := core.Take(l, s, now, r.Int64N(l.Limit+1))
			if err != nil {
				t.Fatal(err)
			}
			got := core.DeriveNextAfter(l, d)
			switch {
			case (got == 0) != (d.NextAfter == 0):
				t.Fatalf("%+v %+v: derived %d", l, d, got)
			case got < d.NextAfter:
				t.Fatalf("%+v %+v: derived %d is early", l, d, got)
			case l.Algorithm != core.SlidingWindow && l.Algorithm != core.SlidingLog && got > d.NextAfter+1:
				t.Fatalf("%+v %+v: derived %d, more than 1µs late", l, d, got)
			case got == d.NextAfter:
				exact++
			}
			s = n
		}
	}
	t.Logf("%d of 100000 derived exactly", exact)
}
