package core

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDivisor: the prepared division equals the division instruction for
// divisors and dividends across the whole range, the edges included.
func TestDivisor(t *testing.T) {
	r := rand.New(rand.NewPCG(20261127, 1))
	divisors := []int64{1, 2, 3, 5, 7, 10, 60, 1000, 1_000_000, 3_600_000_000, MaxWindow, MaxLimit, MaxLimit - 1,
		1<<61 - 1, 1 << 61, 1<<61 + 1, 1<<62 + 1, math.MaxInt64, math.MaxInt64 - 1}
	for range 2000 {
		divisors = append(divisors, r.Int64N(1<<r.IntN(63))+1)
	}
	dividends := []int64{0, 1, 2, math.MaxInt64, math.MaxInt64 - 1, 1 << 62, 1<<62 - 1, MaxTime, MaxUnits}
	for _, d := range divisors {
		v := newDivisor(d)
		ns := append(dividends, d-1, d, d+1, 2*d-1, 2*d, (math.MaxInt64/d)*d, (math.MaxInt64/d)*d-1)
		for range 200 {
			ns = append(ns, r.Int64N(1<<r.IntN(64-1)+1))
		}
		for _, n := range ns {
			if n < 0 {
				continue
			}
			if got, want := v.div(n, d), n/d; got != want {
				t.Fatalf("%d / %d: %d, want %d (m=%d s=%d)", n, d, got, want, v.m, v.s)
			}
			if n > math.MaxInt64-d+1 {
				continue // ceil's domain: n + d ≤ 2^63
			}
			if got, want := v.ceil(n, d), ceilDiv(n, d); got != want {
				t.Fatalf("⌈%d / %d⌉: %d, want %d", n, d, got, want)
			}
		}
	}
}
