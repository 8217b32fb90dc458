package core

import "math/bits"

// converts reports whether a state written by algorithm from under other
// parameters is converted (carried) before a limit of algorithm to reads
// it. A window algorithm reading its own state does not convert it: its
// counts (and a log's times) are read in the new window that holds the
// state's start, as they are; every other pair converts.
func converts(from, to Algorithm) bool {
	if from == to {
		return !from.Windowed()
	}
	return true
}

// carry writes to *t the state c would hold with the usage of *s, a state
// recorded (L, W, R set) under other parameters or by another algorithm.
// The usage is read at the state's own time, its anchor: a bucket's last
// update (T), GCRA's last admission (Y), a window's start (T), a log's
// newest entry. So the result depends only on *s and c, never on the time
// of the call, and a RetryAfter computed from it stays exact until the
// state is written again:
//
//   - between TokenBucket, LeakyBucket and GCRA the level (in units of
//     1/Window of a unit) is rescaled to the new Window, rounded up, so not
//     a fraction of a unit is refunded;
//   - otherwise the units used are counted whole (a fraction of one counts
//     as one): a fixed window's count, a sliding window's current and
//     previous counts (the previous one weighs fully at the window's
//     start), a log's entries within its Window before its newest, a
//     bucket's or GCRA's level. They are taken at the anchor by the new
//     algorithm: a window's count in the window that holds the anchor, a
//     log's entries at the anchor, a bucket's or GCRA's level there.
//
// The carried usage is clamped to the new limit, so a RetryAfter is never
// longer than the new limit alone could give. A sliding log carried over
// is kept as (T = anchor, X = entries) with the storage of s.Log: its
// entries are written only by an admission, as any log's (a log's X is
// otherwise always 0, so the form is never mistaken for a stored state).
func (c *Compiled) carry(s, t *State) Error {
	lim, w := c.l.Limit, c.l.Window
	// No usage carries over as a fresh state, which keeps the storage of
	// s.Log too, so a sliding log can take on it as on any fresh state.
	*t = State{Log: s.Log[:0]}
	// The usage at the anchor: whole units from a window algorithm, a
	// level in 1/s.W of a unit from the others.
	a, used, ok := usageBy(s)
	if !ok {
		return 0
	}
	if c.l.Algorithm.Windowed() { // to a count of whole units
		if !s.Algorithm.Windowed() {
			used = ceilDiv(used, s.W)
		}
		used = min(used, lim)
	} else { // to a level in 1/w of a unit
		if s.Algorithm.Windowed() {
			used = min(used, lim) * w
		} else {
			// ⌈used×w / s.W⌉, saturating.
			hi, lo := bits.Mul64(uint64(used), uint64(w))
			if hi >= uint64(s.W) {
				used = MaxStateValue
			} else {
				q, r := bits.Div64(hi, lo, uint64(s.W))
				if r != 0 {
					q++
				}
				used = int64(satU(0, q))
			}
		}
		used = min(used, c.capacity)
	}
	if used == 0 {
		return 0
	}
	tt, x, y := carriedBy(c, a, used)
	// The storage of s.Log goes with it: a sliding log writes its
	// carried entries there (the others ignore it).
	*t = State{Algorithm: c.l.Algorithm, T: tt, X: x, Y: y, L: lim, W: w, R: c.srate, Log: s.Log[:0]}
	return 0
}

// sat returns v, or MaxStateValue when v is above it (or overflowed).
func sat(v int64) int64 {
	if v < 0 || v > MaxStateValue {
		return MaxStateValue
	}
	return v
}

// satU returns the 128-bit value hi:lo, or MaxStateValue when it is above.
func satU(hi, lo uint64) uint64 {
	if hi != 0 || lo > uint64(MaxStateValue) {
		return uint64(MaxStateValue)
	}
	return lo
}
