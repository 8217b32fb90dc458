package core

import "math/bits"

// algTokenBucket implements TokenBucket: T is the last update (µs), X the
// units taken, in 1/Window of a token, draining Rate units per µs.
type algTokenBucket struct{}

// algLeakyBucket implements LeakyBucket: the token bucket's state read as
// a water level that leaks Rate units per µs; an admitted call reports the
// Delay until the units ahead of it have leaked out.
type algLeakyBucket struct{}

func (algTokenBucket) decide(c *Compiled, s *State, exact bool, now, cost int64, _ mode, d *Decision, n *State) Error {
	bucket(c, s, exact, now, cost, d, n)
	return 0
}

func (algLeakyBucket) decide(c *Compiled, s *State, exact bool, now, cost int64, _ mode, d *Decision, n *State) Error {
	bucket(c, s, exact, now, cost, d, n)
	return 0
}

// bucket decides TokenBucket and LeakyBucket: a level in units of 1/Window
// of a token that drains Rate units per µs, capacity Limit×Window.
func bucket(c *Compiled, s *State, exact bool, now, cost int64, d *Decision, n *State) {
	l := &c.l
	w, lim, r := l.Window, l.Limit, c.rate
	capacity := c.capacity
	last, level := now, int64(0)
	if s.Algorithm == l.Algorithm {
		last, level = s.T, s.X
		if !exact { // a legacy state written under other parameters
			level = min(level, capacity)
		}
	}
	ne := max(now, last) // a clock that stepped back is read as the last update
	if el := ne - last; el > 0 && level > 0 {
		// el ≥ ⌈level/r⌉, that is el×r ≥ level, without a division: the
		// product in 128 bits.
		if hi, lo := bits.Mul64(uint64(el), uint64(r)); hi != 0 || lo >= uint64(level) {
			level = 0
		} else {
			level -= int64(lo)
		}
	}
	if cost == 0 || (cost <= lim && level+cost*w <= capacity) {
		d.Allowed = true
		if l.Algorithm == LeakyBucket && level > 0 {
			d.Delay = c.rdiv.ceil(level, r) + ne - now
		}
		if cost > 0 {
			level += cost * w
			if n != nil {
				n.set(l.Algorithm, ne, level, 0, lim, w, r)
			}
		}
	} else if cost > lim {
		d.RetryAfter = Never
	} else {
		d.RetryAfter = c.rdiv.ceil(level+cost*w-capacity, r) + ne - now
	}
	if level < capacity {
		d.Remaining = c.wdiv.div(capacity-level, w)
	}
	if level > 0 {
		d.ResetAfter = c.rdiv.ceil(level, r) + ne - now
		d.NextAfter = c.rdiv.ceil(level-capacity+(d.Remaining+1)*w, r) + ne - now
	}
}

func (algTokenBucket) checkWords(s *State) Error { return bucketWords(s) }
func (algLeakyBucket) checkWords(s *State) Error { return bucketWords(s) }

// bucketWords checks a bucket's words: Y is unused.
func bucketWords(s *State) Error {
	if s.Y != 0 {
		return ErrState
	}
	return 0
}

// usage: the level at the last update.
func (algTokenBucket) usage(s *State) (anchor, used int64, ok bool) { return s.T, s.X, true }
func (algLeakyBucket) usage(s *State) (anchor, used int64, ok bool) { return s.T, s.X, true }

// carried: the level, updated at the anchor.
func (algTokenBucket) carried(_ *Compiled, anchor, used int64) (t, x, y int64) {
	return anchor, used, 0
}

func (algLeakyBucket) carried(_ *Compiled, anchor, used int64) (t, x, y int64) {
	return anchor, used, 0
}

func (algTokenBucket) settle(c *Compiled, s *State, exact bool, now, delta int64, _ mode, n *State) Error {
	settleBucket(c, s, exact, now, delta, n)
	return 0
}

func (algLeakyBucket) settle(c *Compiled, s *State, exact bool, now, delta int64, _ mode, n *State) Error {
	settleBucket(c, s, exact, now, delta, n)
	return 0
}

// settleBucket settles TokenBucket and LeakyBucket: the level read at the
// last update or now, whichever is later, changed by delta×Window
// (settledLevel).
func settleBucket(c *Compiled, s *State, exact bool, now, delta int64, n *State) {
	ne, level := now, int64(0)
	if s.Algorithm == c.l.Algorithm {
		ne, level = max(now, s.T), s.X
		if !exact {
			level = min(level, c.capacity)
		}
		if el := ne - s.T; el > 0 && level > 0 {
			if hi, lo := bits.Mul64(uint64(el), uint64(c.rate)); hi != 0 || lo >= uint64(level) {
				level = 0
			} else {
				level -= int64(lo)
			}
		}
	}
	if level = settledLevel(level, delta, c.l.Window); level > 0 {
		*n = State{Algorithm: c.l.Algorithm, T: ne, X: level}
	}
}

func (algTokenBucket) nextAfter(l *Limit, d *Decision) int64 { return ratedNextAfter(l, d) }
func (algLeakyBucket) nextAfter(l *Limit, d *Decision) int64 { return ratedNextAfter(l, d) }
