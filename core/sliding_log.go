package core

// algSlidingLog implements SlidingLog, the sliding window log: Log holds
// the times (µs) of the admitted units, ascending, one entry per unit;
// T, X and Y are zero. A log carried over from a state written under other
// parameters is held as (T = its time, X = its entries) with s.Log's
// storage until an admission writes the entries (see Compiled.carry).
type algSlidingLog struct{}

func (algSlidingLog) decide(c *Compiled, s *State, _ bool, now, cost int64, m mode, d *Decision, n *State) Error {
	if s.Algorithm == SlidingLog && s.X != 0 { // carried over, not yet written (see carry)
		return slidingLogCarried(c, s, now, cost, m, d, n)
	}
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
// with s.Log's storage, as decide decides a log of those entries.
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

func (algSlidingLog) checkWords(s *State) Error {
	if s.T != 0 || s.X != 0 || s.Y != 0 || int64(len(s.Log)) > MaxLogLimit {
		return ErrState
	}
	// Ascending, within [0, MaxStateValue]: ascending as unsigned
	// numbers with the newest at most MaxStateValue puts every entry
	// within it (a negative one reads as above it), so the pass over the
	// log, which runs on every decision over a stored log, compares each
	// entry once.
	log := s.Log
	if len(log) == 0 {
		return 0
	}
	if uint64(log[len(log)-1]) > uint64(MaxStateValue) {
		return ErrState
	}
	prev := uint64(log[0])
	for _, e := range log[1:] {
		if uint64(e) < prev {
			return ErrState
		}
		prev = uint64(e)
	}
	return 0
}

// usage: the entries within the log's Window before its newest, anchored
// at the newest.
func (algSlidingLog) usage(s *State) (anchor, used int64, ok bool) {
	if len(s.Log) == 0 {
		return 0, 0, false
	}
	anchor = s.Log[len(s.Log)-1]
	for _, e := range s.Log {
		if e > anchor-s.W {
			used++
		}
	}
	return anchor, used, true
}

// carried: the entries exist only as (anchor, used) until an admission
// writes them into the state's log storage (slidingLogCarried).
func (algSlidingLog) carried(_ *Compiled, anchor, used int64) (t, x, y int64) {
	return anchor, used, 0
}

// settle refunds the newest entries first; a debt is bounded by the
// Limit live entries a log holds.
func (algSlidingLog) settle(c *Compiled, s *State, _ bool, now, delta int64, m mode, n *State) Error {
	w, lim := c.l.Window, c.l.Limit
	log := s.Log
	if s.Algorithm != SlidingLog {
		log = log[:0]
	}
	ne := now
	if len(log) > 0 {
		ne = max(now, log[len(log)-1])
	}
	i0 := 0
	for i0 < len(log) && log[i0] <= ne-w {
		i0++
	}
	count := int64(len(log) - i0)
	carried := int64(0) // entries carried over at s.T, not yet written (see carry)
	if s.Algorithm == SlidingLog && s.X != 0 {
		ne = max(now, s.T)
		if s.T > ne-w {
			carried = s.X
		}
		count = carried
	}
	keep := count + delta // live entries after the settle
	if delta > 0 {
		keep = max(count, min(keep, lim))
	}
	keep = max(0, keep)
	if (delta > 0 || carried > 0) && int64(cap(log)) < keep {
		// Entries are written: new ones, or carried ones for the first
		// time.
		return ErrLogCapacity
	}
	if m != modeTake || keep == 0 {
		if keep > 0 {
			*n = State{Algorithm: SlidingLog, Log: log}
		}
		return 0
	}
	old := min(keep, count) // live entries kept, the oldest first
	if carried > 0 {
		log = log[:keep]
		for i := range old {
			log[i] = s.T
		}
	} else {
		copy(log[:old], log[i0:i0+int(old)])
		log = log[:keep]
	}
	for i := old; i < keep; i++ {
		log[i] = ne
	}
	*n = State{Algorithm: SlidingLog, Log: log}
	return 0
}

// nextAfter: ResetAfter, or a denial's RetryAfter when earlier (both
// bounds: the entries that would tell the exact time are not in d).
func (algSlidingLog) nextAfter(_ *Limit, d *Decision) int64 { return windowNextAfter(d) }
