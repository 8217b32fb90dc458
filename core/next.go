package core

// DeriveNextAfter returns a Decision's NextAfter as far as its other fields
// and the limit's parameters tell it, for a decision computed where
// NextAfter is not: by the SQL functions of a schema before migration 16
// (sql/migrations), which do not return it, or by a WebAssembly module built
// before the ABI reported it (wasm/ABI.md, offset 136). Every decider of
// this module computes NextAfter itself. It returns 0 when d.Remaining is
// the whole limit, else
//
//   - FixedWindow: ResetAfter, exactly NextAfter;
//   - TokenBucket, LeakyBucket, GCRA: ResetAfter less the time the units
//     beyond the next one take to come back, ResetAfter −
//     ⌊(Limit−Remaining−1)×Window/Rate⌋, which is NextAfter or 1 µs later
//     (ResetAfter is rounded up to a whole µs, and so is NextAfter);
//   - SlidingWindow, SlidingLog: ResetAfter, or a denial's RetryAfter when
//     earlier. Both are bounds, never early: all of the quota is back at
//     ResetAfter and a denied cost, above Remaining, fits at RetryAfter.
//     The exact time depends on the counts (the log's entries) that the
//     decision does not carry: a sliding log whose oldest admission leaves
//     before its newest gets quota back earlier than this says.
//
// l must be valid (DeriveNextAfter does not check it) and d a decision of
// it.
func DeriveNextAfter(l Limit, d Decision) int64 {
	if d.Remaining >= d.Limit {
		return 0
	}
	return nextAfterBy(&l, &d)
}

// ratedNextAfter derives NextAfter for an algorithm that restores Rate
// units per Window (TokenBucket, LeakyBucket, GCRA): ResetAfter less the
// time the units beyond the next one take to come back.
func ratedNextAfter(l *Limit, d *Decision) int64 {
	rate := l.Rate
	if rate == 0 {
		rate = l.Limit
	}
	// (Limit−Remaining−1)×Window ≤ Limit×Window ≤ MaxUnits.
	rest := (d.Limit - d.Remaining - 1) * l.Window / rate
	return max(1, d.ResetAfter-rest)
}

// windowNextAfter derives NextAfter for a window that slides
// (SlidingWindow, SlidingLog): ResetAfter, or a denial's RetryAfter when
// earlier.
func windowNextAfter(d *Decision) int64 {
	if !d.Allowed && d.RetryAfter != Never && d.RetryAfter < d.ResetAfter {
		return d.RetryAfter
	}
	return d.ResetAfter
}
