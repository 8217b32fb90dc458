package core

import "math/bits"

// divisor divides by a constant exactly with a multiplication and a shift
// instead of the division instruction, whose latency is several times a
// multiplication's: Compile prepares one for a limit's Window and one for
// its rate. The zero divisor uses the division instruction, which is what
// the checked path (Take, TakeAll: a limit compiled per call) gets, since
// preparing one costs more than the division it saves once.
//
// For a divisor d ≥ 2 let ℓ = ⌈log2 d⌉ and m = ⌈2^(63+ℓ)/d⌉. Then m < 2^64
// and 2^(63+ℓ) ≤ m×d < 2^(63+ℓ) + 2^ℓ, so by Granlund and Montgomery
// ("Division by invariant integers using multiplication", 1994, theorem
// 4.2) ⌊n/d⌋ = ⌊m×n / 2^(63+ℓ)⌋ for every 0 ≤ n < 2^63: the high word of
// the 128-bit product m×n shifted right by ℓ−1. Every dividend of the
// algorithms is a non-negative int64.
type divisor struct {
	m uint64 // 0: use the division instruction
	s uint8  // ℓ−1
}

// newDivisor prepares the division by d; for d < 2 it returns the zero
// divisor (a division by 1 needs no preparing, and no limit divides by 0).
func newDivisor(d int64) divisor {
	if d < 2 {
		return divisor{}
	}
	l := bits.Len64(uint64(d - 1)) // ⌈log2 d⌉, ≥ 1
	// 2^(63+ℓ) is the 128-bit number with 2^(ℓ−1) as its high word, and
	// 2^(ℓ−1) < d, so the quotient fits 64 bits.
	q, r := bits.Div64(1<<(l-1), 0, uint64(d))
	if r != 0 {
		q++ // < 2^64: see the type's comment
	}
	return divisor{m: q, s: uint8(l - 1)}
}

// div returns ⌊n/d⌋ for 0 ≤ n < 2^63, d the divisor v was prepared for.
func (v *divisor) div(n, d int64) int64 {
	if v.m == 0 {
		return n / d
	}
	hi, _ := bits.Mul64(uint64(n), v.m)
	return int64(hi >> v.s)
}

// ceil returns ⌈n/d⌉, as ceilDiv, for n ≥ 0 and n + d ≤ 2^63: every use
// divides a level of at most 2^62 by a rate of at most 2^40.
func (v *divisor) ceil(n, d int64) int64 { return v.div(n+d-1, d) }
