package core

import "math/bits"

// algGCRA implements GCRA. It keeps the theoretical arrival time TAT = T + X/Rate µs and, in Y,
// the time of the admission that wrote it. Its level (TAT−now)×Rate is in
// the same units as bucket's. Under the parameters that wrote it, the level
// at Y is at most the capacity; a state whose level at Y is higher was
// written under other parameters and is read as full at Y (clamped: one
// full refill from Y at most). Y = 0 (an admission at time 0, or a state
// written before Y was kept) is not clamped. A clock that stepped back
// makes the state look fuller.
type algGCRA struct{}

func (algGCRA) decide(c *Compiled, s *State, exact bool, now, cost int64, _ mode, d *Decision, n *State) Error {
	w, lim, r := c.l.Window, c.l.Limit, c.rate
	capacity, ahead := c.capacity, c.ahead
	st, sx := s.T, s.X
	level, full := int64(0), false // full: level > capacity, too big to compute
	if s.Algorithm == GCRA {
		if y := s.Y; y > 0 && !exact {
			// checkState: st ≥ y. dt×r ≤ capacity when the first test fails.
			if dt := st - y; dt > ahead || dt*r+sx > capacity {
				st, sx = y+ahead, c.aheadFrac
			}
		}
		if st >= now {
			if dt := st - now; dt > ahead {
				full = true
			} else {
				level = dt*r + sx
			}
		} else if dt := now - st; sx > 0 && dt < c.rdiv.ceil(sx, r) {
			level = sx - dt*r
		}
	}
	if cost == 0 || (!full && cost <= lim && level+cost*w <= capacity) {
		d.Allowed = true
		if cost > 0 {
			level += cost * w
			if n != nil {
				q := c.rdiv.div(level, r)
				n.set(GCRA, now+q, level-q*r, now, lim, w, r)
			}
			d.ResetAfter = c.rdiv.ceil(level, r)
		}
	} else if cost > lim {
		d.RetryAfter = Never
	} else {
		// First t with (T−t)×r + X ≤ capacity − cost×w.
		d.RetryAfter = st + ceilDivSigned(sx+cost*w-capacity, r) - now
	}
	if !full && level < capacity {
		d.Remaining = c.wdiv.div(capacity-level, w)
	}
	if d.ResetAfter == 0 && (full || level > 0) {
		d.ResetAfter = st + c.rdiv.ceil(sx, r) - now
	}
	switch {
	case full: // as a retry of one unit
		d.NextAfter = st + ceilDivSigned(sx+w-capacity, r) - now
	case level > 0:
		// The level drains r units a µs from now on: the first instant
		// at which Remaining+1 units fit.
		d.NextAfter = c.rdiv.ceil(level-capacity+(d.Remaining+1)*w, r)
	}
	return 0
}

// checkWords: X is a fraction numerator below Rate (≤ MaxLimit); larger
// values are corrupt and would overflow. Y, the admission's time, is never
// after the TAT it wrote.
func (algGCRA) checkWords(s *State) Error {
	if s.X > MaxLimit || s.Y > s.T {
		return ErrState
	}
	return 0
}

// usage: the level at the last admission (Y), (T−Y)×R + X, saturating.
func (algGCRA) usage(s *State) (anchor, used int64, ok bool) {
	hi, lo := bits.Mul64(uint64(s.T-s.Y), uint64(s.R))
	lo, carry := bits.Add64(lo, uint64(s.X), 0)
	return s.Y, int64(satU(hi+carry, lo)), true
}

// carried: the arrival time of the level admitted at the anchor.
func (algGCRA) carried(c *Compiled, anchor, used int64) (t, x, y int64) {
	q := c.rdiv.div(used, c.rate)
	return anchor + q, used - q*c.rate, anchor
}

// settle reads the level at the last admission or now, whichever is later,
// and changes it by delta×Window (settledLevel). A debt whose arrival time
// would not fit a state is capped at MaxStateValue.
func (algGCRA) settle(c *Compiled, s *State, exact bool, now, delta int64, _ mode, n *State) Error {
	r := c.rate
	ne, level := now, int64(0)
	if s.Algorithm == GCRA {
		st, sx := s.T, s.X
		if y := s.Y; y > 0 && !exact {
			if dt := st - y; dt > c.ahead || dt*r+sx > c.capacity {
				st, sx = y+c.ahead, c.aheadFrac
			}
		}
		ne = max(now, s.Y)
		if st >= ne {
			hi, lo := bits.Mul64(uint64(st-ne), uint64(r))
			lo, cy := bits.Add64(lo, uint64(sx), 0)
			level = int64(satU(hi+cy, lo))
		} else if dt := ne - st; sx > 0 && dt < ceilDiv(sx, r) {
			level = sx - dt*r
		}
	}
	if level = settledLevel(level, delta, c.l.Window); level == 0 {
		return 0
	}
	q := level / r
	if q > MaxStateValue-ne { // its arrival time would not fit a state: capped
		q = MaxStateValue - ne
		level = q * r // ≤ the level: no overflow
	}
	*n = State{Algorithm: GCRA, T: ne + q, X: level - q*r, Y: ne}
	return 0
}

func (algGCRA) nextAfter(l *Limit, d *Decision) int64 { return ratedNextAfter(l, d) }
