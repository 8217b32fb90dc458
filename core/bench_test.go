package core_test

import (
	"testing"

	"github.com/rlcore/rl/core"
)

// Benchmarks of one decision on a warm state. Time advances by half the
// emission interval (Window/Limit) per call, so about half the calls are
// admitted and half denied on every algorithm: both paths are measured, in
// the proportion reported as admit/op. Run with
//
//	go test ./core -run '^$' -bench . -benchmem -count 5 | benchstat -
//
// Target: about 20 ns/op or less and 0 allocs/op for one decision.

const (
	benchT0     = int64(1_767_225_600_000_000) // 2026-01-01, µs
	benchLimit  = 100
	benchWindow = int64(1_000_000) // 1s in µs
	// benchStep is half the emission interval: two calls per unit of rate.
	benchStep = benchWindow / benchLimit / 2
)

var benchAlgorithms = core.Algorithms()

// warm returns a state after one window of calls at benchStep, and the
// time after them.
func warm(b *testing.B, l core.Limit) (core.State, int64) {
	s := core.State{}
	if l.Algorithm == core.SlidingLog {
		s.Log = make([]int64, 0, l.Limit)
	}
	now := benchT0
	for range 2 * benchLimit {
		_, n, err := core.Take(l, s, now, 1)
		if err != nil {
			b.Fatal(err)
		}
		s = n
		now += benchStep
	}
	return s, now
}

func BenchmarkTake(b *testing.B) {
	for _, alg := range benchAlgorithms {
		b.Run("alg="+alg.String(), func(b *testing.B) {
			l := core.Limit{Algorithm: alg, Limit: benchLimit, Window: benchWindow}
			s, now := warm(b, l)
			admitted := 0
			b.ReportAllocs()
			for b.Loop() {
				d, n, err := core.Take(l, s, now, 1)
				if err != nil {
					b.Fatal(err)
				}
				if d.Allowed {
					admitted++
				}
				s = n
				now += benchStep
			}
			b.ReportMetric(float64(admitted)/float64(b.N), "admit/op")
		})
	}
}

func BenchmarkPeek(b *testing.B) {
	for _, alg := range benchAlgorithms {
		b.Run("alg="+alg.String(), func(b *testing.B) {
			l := core.Limit{Algorithm: alg, Limit: benchLimit, Window: benchWindow}
			s, now := warm(b, l)
			b.ReportAllocs()
			for b.Loop() {
				d, err := core.Peek(l, s, now, 1)
				if err != nil {
					b.Fatal(err)
				}
				_ = d
				now += benchStep
			}
		})
	}
}

// BenchmarkTakeAll decides through the multi-limit entry point the stores
// use (core.Native.TakeAll calls it), states updated in place:
//
//	limits=1/alg=...   one limit, as a store decides a single-limit policy
//	limits=2/algs=...  a burst limit of 100/s (denying about half the calls,
//	                   as above) under a roomy per-minute one
func BenchmarkTakeAll(b *testing.B) {
	for _, alg := range benchAlgorithms {
		b.Run("limits=1/alg="+alg.String(), func(b *testing.B) {
			benchTakeAll(b, []core.Limit{{Algorithm: alg, Limit: benchLimit, Window: benchWindow}})
		})
	}
	pairs := []struct{ burst, minute core.Algorithm }{
		{core.TokenBucket, core.FixedWindow},
		{core.GCRA, core.SlidingWindow},
	}
	for _, p := range pairs {
		b.Run("limits=2/algs="+p.burst.String()+"+"+p.minute.String(), func(b *testing.B) {
			benchTakeAll(b, []core.Limit{
				{Algorithm: p.burst, Limit: benchLimit, Window: benchWindow},
				{Algorithm: p.minute, Limit: 1_000_000, Window: 60 * benchWindow},
			})
		})
	}
}

func benchTakeAll(b *testing.B, ls []core.Limit) {
	ss := make([]core.State, len(ls))
	for i, l := range ls {
		if l.Algorithm == core.SlidingLog {
			ss[i].Log = make([]int64, 0, l.Limit)
		}
	}
	ds := make([]core.Decision, len(ls))
	now := benchT0
	for range 2 * benchLimit {
		if _, err := core.TakeAll(ls, ss, now, 1, ds); err != nil {
			b.Fatal(err)
		}
		now += benchStep
	}
	admitted := 0
	b.ReportAllocs()
	for b.Loop() {
		i, err := core.TakeAll(ls, ss, now, 1, ds)
		if err != nil {
			b.Fatal(err)
		}
		if ds[i].Allowed {
			admitted++
		}
		now += benchStep
	}
	b.ReportMetric(float64(admitted)/float64(b.N), "admit/op")
}

// BenchmarkTakeInto decides a compiled limit on a state held by the caller
// (the path of a store deciding a single-limit policy with the native core):
// the same calls as BenchmarkTakeAll/limits=1, without validating the limit
// and with the divisions by window and rate prepared.
func BenchmarkTakeInto(b *testing.B) {
	for _, alg := range benchAlgorithms {
		b.Run("alg="+alg.String(), func(b *testing.B) {
			l := core.Limit{Algorithm: alg, Limit: benchLimit, Window: benchWindow}
			c, err := core.Compile(l)
			if err != nil {
				b.Fatal(err)
			}
			s, now := warm(b, l)
			var d core.Decision
			admitted := 0
			b.ReportAllocs()
			for b.Loop() {
				if err := c.TakeInto(&s, now, 1, &d); err != nil {
					b.Fatal(err)
				}
				if d.Allowed {
					admitted++
				}
				now += benchStep
			}
			b.ReportMetric(float64(admitted)/float64(b.N), "admit/op")
		})
	}
}
