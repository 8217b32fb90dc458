package core

import "math/bits"

// mode says how far eval goes.
type mode int8

const (
	modePeek  mode = iota // decide only
	modeCheck             // decide and check that an admission could be stored
	modeTake              // decide and build the new state (writing the log)
)

// Take decides whether cost units may pass l at now given the state s. It
// returns the decision and the state after it. A denied call, and a call of
// cost 0, return s unchanged. For a SlidingLog, Take writes the admitted
// entries into s.Log's backing array.
//
// now is in microseconds since the Unix epoch; see the package doc for units
// and bounds. Invalid input returns an Error and the zero Decision.
func Take(l Limit, s State, now, cost int64) (d Decision, n State, err error) {
	n = s // eval reads all of the state before it writes the new one
	if e := eval(&l, &n, now, cost, modeTake, &d, &n); e != 0 {
		return Decision{}, s, e
	}
	return d, n, nil
}

// Peek returns the decision Take would return, without changing anything.
func Peek(l Limit, s State, now, cost int64) (d Decision, err error) {
	if e := eval(&l, &s, now, cost, modePeek, &d, nil); e != 0 {
		return Decision{}, e
	}
	return d, nil
}

// eval decides into *d: the checked path, which validates l first. In
// modeTake it writes the new state to *n, and only when the state changes
// (an admission of a cost above 0); n may alias s. Every algorithm reads
// all of *s before it writes *n.
func eval(l *Limit, s *State, now, cost int64, m mode, d *Decision, n *State) Error {
	var c Compiled
	if err := c.set(l); err != 0 {
		return err
	}
	return c.eval(s, now, cost, m, d, n)
}

// eval decides into *d with the limit checked and prepared at Compile; the
// call and the state are still checked, in the core's order (now, cost,
// then the state).
func (c *Compiled) eval(s *State, now, cost int64, m mode, d *Decision, n *State) Error {
	if c.l.Algorithm == 0 { // the zero Compiled
		return ErrAlgorithm
	}
	if err := checkCall(now, cost); err != 0 {
		return err
	}
	// exact: written under exactly c's parameters, the common case, read
	// as it is, with no carrying over. The dispatch below is here rather
	// than in a function of its own so that the common case makes one call
	// fewer; a state to carry over is the only one that uses the
	// temporary, declared in its branch so that no other call zeroes it.
	exact := s.Algorithm == c.l.Algorithm && s.W == c.l.Window && s.L == c.l.Limit && s.R == c.srate
	if !exact {
		// Written under other parameters, by another algorithm, before
		// it recorded its parameters, or fresh: checked, and carried
		// over if it has to be.
		var carried State
		var err Error
		if s, exact, err = c.read(s, &carried); err != 0 {
			return err
		}
	} else if !simpleState(s) {
		if err := checkWords(&c.l, s); err != 0 { // its parameters are c's, valid
			return err
		}
	}
	*d = Decision{Limit: c.l.Limit}
	if m != modeTake {
		n = nil
	}
	switch c.l.Algorithm {
	case FixedWindow:
		fixedWindow(c, s, now, cost, d, n)
	case SlidingWindow:
		slidingWindow(c, s, exact, now, cost, d, n)
	case SlidingLog:
		if s.Algorithm == SlidingLog && s.X != 0 { // carried over, not yet written (see carry)
			return slidingLogCarried(c, s, now, cost, m, d, n)
		}
		return slidingLog(c, s, now, cost, m, d, n)
	case GCRA:
		gcra(c, s, exact, now, cost, d, n)
	case TokenBucket, LeakyBucket:
		bucket(c, s, exact, now, cost, d, n)
	}
	return 0
}

// read checks the state *s for deciding with c and returns the state to
// decide on: s itself, or, for a state recorded under other parameters
// that has to be converted, its carried-over form (see carry). exact
// reports that s was written under exactly c's parameters, so it is read
// as it is, unclamped (units above the limit are a debt from Settle).
// A carried state is written to *t.
func (c *Compiled) read(s, t *State) (*State, bool, Error) {
	exact := s.Algorithm == c.l.Algorithm && s.W == c.l.Window && s.L == c.l.Limit && s.R == c.srate
	if !exact || !simpleState(s) {
		if err := checkState(&c.l, s); err != 0 {
			return s, false, err
		}
	}
	if !exact && s.W != 0 && converts(s.Algorithm, c.l.Algorithm) {
		if err := c.carry(s, t); err != 0 {
			return s, false, err
		}
		// The carried state is within the new limit: it reads as exact.
		return t, true, 0
	}
	return s, exact, 0
}

func fixedWindow(c *Compiled, s *State, now, cost int64, d *Decision, n *State) {
	w, lim := c.l.Window, c.l.Limit
	start, count := c.wdiv.div(now, w)*w, int64(0)
	if s.Algorithm == FixedWindow && s.T >= start {
		// The current window, or a later one if the clock stepped back.
		// A state written under another window length may start off
		// the current one's grid: its window is the one holding T.
		start, count = c.wdiv.div(s.T, w)*w, s.X
	}
	end := start + w
	if cost == 0 || count+cost <= lim {
		d.Allowed = true
		if cost > 0 {
			count += cost
			if n != nil {
				n.set(FixedWindow, start, count, 0, lim, w, 0)
			}
		}
	} else if cost > lim {
		d.RetryAfter = Never
	} else {
		d.RetryAfter = end - now
	}
	d.Remaining = max(0, lim-count)
	if count > 0 {
		// The whole quota comes back when the window ends, none before.
		d.ResetAfter = end - now
		d.NextAfter = end - now
	}
}

// slidingCounts reads a sliding window state, of window w, in the window
// starting at start (now's): the start of the window it counts in (a later one if the
// clock stepped back) and its current and previous counts, as written (a
// state written under other parameters has them clamped by the caller:
// clampCounts). Small enough to inline, as its callers need.
func slidingCounts(c *Compiled, s *State, start, w int64) (at, curr, prev int64) {
	at = start
	if s.Algorithm == SlidingWindow {
		// The window holding T: T itself unless the state was written
		// under another window length.
		if st := c.wdiv.div(s.T, w) * w; st >= start {
			at, curr, prev = st, s.X, s.Y
		} else if st+w == start {
			prev = s.X
		}
	}
	return at, curr, prev
}

// clampCounts clamps the counts of a sliding window state written under
// other parameters (not exact): counts above the limit come from a lowered
// limit, and count as full.
func clampCounts(c *Compiled, exact bool, curr, prev int64) (int64, int64) {
	if exact {
		return curr, prev
	}
	return min(curr, c.l.Limit), min(prev, c.l.Limit)
}

func slidingWindow(c *Compiled, s *State, exact bool, now, cost int64, d *Decision, n *State) {
	w, lim := c.l.Window, c.l.Limit
	start, curr, prev := slidingCounts(c, s, c.wdiv.div(now, w)*w, w)
	curr, prev = clampCounts(c, exact, curr, prev)
	e := max(now, start) - start // elapsed in the current window, < w
	// room: units (1/w of a request) left under the weighted count.
	room := (lim-curr)*w - prev*(w-e)
	if cost == 0 || (cost <= lim-curr && cost*w <= room) {
		d.Allowed = true
		if cost > 0 {
			curr += cost
			room -= cost * w
			if n != nil {
				n.set(SlidingWindow, start, curr, prev, lim, w, 0)
			}
		}
	} else if cost > lim {
		d.RetryAfter = Never
	} else {
		d.RetryAfter = slidingRetry(w, lim, start, e, curr, prev, cost) - now
	}
	if room > 0 {
		d.Remaining = c.wdiv.div(room, w)
	}
	switch {
	case curr > 0:
		d.ResetAfter = start + 2*w - now
	case prev > 0:
		d.ResetAfter = start + w - now
	}
	if d.Remaining < lim {
		// One more unit fits when a call of Remaining+1, denied now,
		// would pass.
		d.NextAfter = slidingRetry(w, lim, start, e, curr, prev, d.Remaining+1) - now
	}
}

// slidingRetry returns the first instant at which cost (≤ lim) fits a
// sliding window currently at (start, curr, prev), elapsed e.
func slidingRetry(w, lim, start, e, curr, prev, cost int64) int64 {
	if curr+cost <= lim && prev > 0 {
		// Later in this window, once enough of prev has slid out:
		// prev×(w−e') ≤ (lim−curr−cost)×w.
		// Denied now, so k < w−e and e1 > e.
		k := (lim - curr - cost) * w / prev
		if e1 := w - k; e1 < w {
			return start + e1
		}
	}
	// In the next window curr becomes prev: curr×(w−e'') ≤ (lim−cost)×w.
	if curr == 0 {
		return start + w
	}
	k := (lim - cost) * w / curr
	return start + w + max(0, w-k)
}

func slidingLog(c *Compiled, s *State, now, cost int64, m mode, d *Decision, n *State) Error {
	w, lim := c.l.Window, c.l.Limit
	log := s.Log
	if s.Algorithm != SlidingLog {
		log = log[:0]
	}
	ne := now
	if len(log) > 0 {
		ne = max(now, log[len(log)-1])
	}
	// First live entry: the first with e > ne−w.
	lo, hi := 0, len(log)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if log[mid] > ne-w {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	i0 := lo
	count := int64(len(log) - i0)
	newest := ne
	if count > 0 {
		newest = log[len(log)-1]
	}
	if cost == 0 || count+cost <= lim {
		d.Allowed = true
		if cost > 0 {
			need := count + cost
			if m != modePeek && int64(cap(log)) < need {
				*d = Decision{}
				return ErrLogCapacity
			}
			// Read before the log is rewritten below.
			d.NextAfter = logNext(log[i0:], ne, need, lim) + w - now
			if m == modeTake {
				copy(log[:count], log[i0:])
				log = log[:need]
				for i := count; i < need; i++ {
					log[i] = ne
				}
				*n = State{Algorithm: SlidingLog, L: lim, W: w, Log: log}
			}
			count = need
			newest = ne
		}
	} else if cost > lim {
		d.RetryAfter = Never
	} else {
		// The (count+cost−lim)-th live entry must expire.
		d.RetryAfter = log[i0+int(count+cost-lim)-1] + w - now
	}
	d.Remaining = max(0, lim-count)
	if count > 0 {
		d.ResetAfter = newest + w - now
		if d.NextAfter == 0 { // not an admission: the log is as it was
			d.NextAfter = logNext(log[i0:], ne, count, lim) + w - now
		}
	}
	return 0
}

// slidingLogCarried decides a sliding log carried over from a state
// written under other parameters (see carry): s.X entries at time s.T,
// with s.Log's storage, as slidingLog decides a log of those entries.
func slidingLogCarried(c *Compiled, s *State, now, cost int64, m mode, d *Decision, n *State) Error {
	w, lim, a := c.l.Window, c.l.Limit, s.T
	ne := max(now, a)
	count := s.X
	if a <= ne-w {
		count = 0
	}
	live := count // carried entries still live, all at a
	newest := ne
	if count > 0 {
		newest = a
	}
	// next returns the expiry time's base of the entry that brings k
	// live units back to one more remaining: logNext on the entries.
	next := func(k int64) int64 {
		if j := max(0, k-lim); j < live {
			return a
		}
		return ne
	}
	if cost == 0 || count+cost <= lim {
		d.Allowed = true
		if cost > 0 {
			need := count + cost
			if m != modePeek && int64(cap(s.Log)) < need {
				*d = Decision{}
				return ErrLogCapacity
			}
			d.NextAfter = next(need) + w - now
			if m == modeTake {
				log := s.Log[:need]
				for i := range log {
					log[i] = ne
					if int64(i) < live {
						log[i] = a
					}
				}
				*n = State{Algorithm: SlidingLog, L: lim, W: w, Log: log}
			}
			count, newest = need, ne
		}
	} else if cost > lim {
		d.RetryAfter = Never
	} else {
		d.RetryAfter = a + w - now // every live entry is at a
	}
	d.Remaining = max(0, lim-count)
	if count > 0 {
		d.ResetAfter = newest + w - now
		if d.NextAfter == 0 {
			d.NextAfter = next(count) + w - now
		}
	}
	return 0
}

// logNext returns the time of the admission whose expiry brings a sliding
// log of n live units (live, the entries before the call, then units
// admitted at ne) back to one more remaining unit than it has: with
// r = max(0, lim−n) remaining, the (n+r+1−lim)-th oldest. n is at least 1.
func logNext(live []int64, ne, n, lim int64) int64 {
	j := n - lim // the index: 0 while n ≤ lim, else the units above the limit
	if j < 0 {
		j = 0
	}
	if j < int64(len(live)) {
		return live[j]
	}
	return ne
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

// gcra keeps the theoretical arrival time TAT = T + X/Rate µs and, in Y,
// the time of the admission that wrote it. Its level (TAT−now)×Rate is in
// the same units as bucket's. Under the parameters that wrote it, the level
// at Y is at most the capacity; a state whose level at Y is higher was
// written under other parameters and is read as full at Y (clamped: one
// full refill from Y at most). Y = 0 (an admission at time 0, or a state
// written before Y was kept) is not clamped. A clock that stepped back
// makes the state look fuller.
func gcra(c *Compiled, s *State, exact bool, now, cost int64, d *Decision, n *State) {
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
}

// ceilDivSigned returns ⌈a/b⌉ for any a and b > 0.
func ceilDivSigned(a, b int64) int64 {
	if a >= 0 {
		return ceilDiv(a, b)
	}
	return -(-a / b)
}
