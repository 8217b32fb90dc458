package core

import "math/bits"

// Settle corrects the units a key has used by delta, at now: the
// difference between a cost known only later (the response's size, the
// tokens a model used) and the estimate taken when the request arrived.
// It returns the state after the correction and a decision describing it
// (the decision of a call of cost 0: Allowed, with Remaining, ResetAfter
// and NextAfter of the settled state).
//
// A positive delta is charged whatever the limit says: it may put the key
// in debt, used units above the limit, and later calls are denied until
// the debt is paid off exactly as the algorithm restores units (a bucket
// or GCRA drains it at its rate; a fixed or sliding window releases it as
// the window ends or slides out). A sliding log holds at most Limit live
// entries, so on it a debt is bounded by one full window (Limit entries at
// now). A negative delta refunds: units are given back, the newest first
// (a sliding window takes them from the current window, then from the
// previous one), never below nothing used. It never refunds more than
// the key has used, but it cannot know what one call was charged: pass
// actual − estimate, with actual ≥ 0, so a refund never exceeds the
// estimate.
//
// delta must be within [−MaxCost, MaxCost] (ErrCost). A debt larger than a
// state can record is recorded as the largest it can, never refused
// (refusing it would leave the key charged its estimate only: a huge cost
// for free): a fixed window's count at MaxStateValue, a sliding window's
// counts at MaxUnits/Window together, a bucket's level at MaxStateValue
// (MaxStateValue/Window units: 1.28e9 for a one-hour window), GCRA's
// arrival time at MaxStateValue µs. A capped debt is paid off as any
// other; only the part no state can record is forgiven, and on a fixed or
// sliding window that part would have expired with the window anyway. A
// state written under other parameters is carried over first, as Take
// does.
// For a SlidingLog, Settle writes entries into s.Log's backing array.
func Settle(l Limit, s State, now, delta int64) (d Decision, n State, err error) {
	var c Compiled
	if e := c.set(&l); e != 0 {
		return Decision{}, s, e
	}
	n = s
	if e := c.settle(&n, now, delta, modeTake, &d); e != 0 {
		return Decision{}, s, e
	}
	return d, n, nil
}

// SettleInto is Settle on a state the caller holds, replacing *s; on an
// error *s is unchanged.
func (c *Compiled) SettleInto(s *State, now, delta int64, d *Decision) error {
	if e := c.settle(s, now, delta, modeTake, d); e != 0 {
		return e
	}
	return nil
}

// SettleAll settles delta on every limit of ls, each with its state:
// ss[i] is replaced by limit i's settled state and ds[i] receives its
// decision. All limits are checked before any state changes, so on an
// error (the index of the limit that caused it is returned) no state has
// changed.
func SettleAll(ls []Limit, ss []State, now, delta int64, ds []Decision) (int, error) {
	return settleAll(ls, nil, len(ls), ss, now, delta, ds)
}

// SettleAllCompiled is SettleAll for compiled limits.
func SettleAllCompiled(cs []Compiled, ss []State, now, delta int64, ds []Decision) (int, error) {
	return settleAll(nil, cs, len(cs), ss, now, delta, ds)
}

func settleAll(ls []Limit, cs []Compiled, k int, ss []State, now, delta int64, ds []Decision) (int, error) {
	if k == 0 || len(ss) < k || len(ds) < k {
		return 0, ErrLimits
	}
	var c Compiled
	at := func(i int) (*Compiled, Error) {
		if cs != nil {
			return &cs[i], 0
		}
		if err := c.set(&ls[i]); err != 0 {
			return nil, err
		}
		return &c, 0
	}
	for i := range k { // check: nothing changes
		ci, err := at(i)
		if err == 0 {
			err = ci.settle(&ss[i], now, delta, modeCheck, &ds[i])
		}
		if err != 0 {
			return i, err
		}
	}
	for i := range k {
		ci, _ := at(i)
		if err := ci.settle(&ss[i], now, delta, modeTake, &ds[i]); err != 0 {
			return i, err // not reached: the check pass accepted the same input
		}
	}
	return 0, nil
}

// CheckSettle returns the error Settle and SettleAll return for a call at
// now with delta whatever the limits and states (ErrTime, then ErrCost), or
// nil: for a caller that settles limits one by one and must refuse such a
// call as a whole.
func CheckSettle(now, delta int64) error {
	if err := checkSettle(now, delta); err != 0 {
		return err
	}
	return nil
}

func checkSettle(now, delta int64) Error {
	if now < 0 || now > MaxTime {
		return ErrTime
	}
	if delta < -MaxCost || delta > MaxCost {
		return ErrCost
	}
	return 0
}

// settle applies delta to *s (in modeTake; modeCheck only checks) and
// decides a call of cost 0 on the result into *d.
func (c *Compiled) settle(s *State, now, delta int64, m mode, d *Decision) Error {
	if c.l.Algorithm == 0 {
		return ErrAlgorithm
	}
	if err := checkSettle(now, delta); err != 0 {
		return err
	}
	if delta == 0 { // nothing to correct: the state stays as it is
		return c.eval(s, now, 0, modePeek, d, nil)
	}
	var carried State
	r, exact, err := c.read(s, &carried)
	if err != 0 {
		return err
	}
	var n State
	switch c.l.Algorithm {
	case FixedWindow:
		err = c.settleFixed(r, now, delta, &n)
	case SlidingWindow:
		err = c.settleSliding(r, exact, now, delta, &n)
	case SlidingLog:
		err = c.settleLog(r, now, delta, m, &n)
	case TokenBucket, LeakyBucket, GCRA:
		err = c.settleLevel(r, exact, now, delta, &n)
	}
	if err != 0 {
		return err
	}
	if n.Algorithm != 0 {
		n.L, n.W, n.R = c.l.Limit, c.l.Window, c.srate
	}
	if m == modeTake {
		*s = n
	}
	return c.eval(&n, now, 0, modePeek, d, nil)
}

func (c *Compiled) settleFixed(s *State, now, delta int64, n *State) Error {
	w := c.l.Window
	start, count := c.wdiv.div(now, w)*w, int64(0)
	if s.Algorithm == FixedWindow && s.T >= start {
		start, count = c.wdiv.div(s.T, w)*w, s.X
	}
	count = min(count+delta, MaxStateValue) // no overflow: both ≤ MaxStateValue + MaxCost
	if count > 0 {
		*n = State{Algorithm: FixedWindow, T: start, X: count}
	}
	return 0
}

func (c *Compiled) settleSliding(s *State, exact bool, now, delta int64, n *State) Error {
	w := c.l.Window
	start, curr, prev := slidingCounts(c, s, c.wdiv.div(now, w)*w, w)
	curr, prev = clampCounts(c, exact, curr, prev)
	curr += delta // no overflow: curr ≤ MaxStateValue, |delta| ≤ MaxCost
	if curr < 0 {
		prev = max(0, prev+curr)
		curr = 0
	}
	// A debt is kept while the weighted count stays computable, the counts
	// times Window within MaxUnits as a limit's own are; a larger one is
	// capped there.
	if m := MaxUnits / c.l.Window; curr > m-min(prev, m) {
		prev = min(prev, m)
		curr = m - prev
	}
	if curr > 0 || prev > 0 {
		*n = State{Algorithm: SlidingWindow, T: start, X: curr, Y: prev}
	}
	return 0
}

func (c *Compiled) settleLog(s *State, now, delta int64, m mode, n *State) Error {
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

// settleLevel settles TokenBucket, LeakyBucket and GCRA: the level (in
// units of 1/Window) read at the state's latest time or now, whichever is
// later, changed by delta×Window.
func (c *Compiled) settleLevel(s *State, exact bool, now, delta int64, n *State) Error {
	w, r := c.l.Window, c.rate
	ne, level := now, int64(0)
	if s.Algorithm == c.l.Algorithm {
		if c.l.Algorithm == GCRA {
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
		} else {
			ne, level = max(now, s.T), s.X
			if !exact {
				level = min(level, c.capacity)
			}
			if el := ne - s.T; el > 0 && level > 0 {
				if hi, lo := bits.Mul64(uint64(el), uint64(r)); hi != 0 || lo >= uint64(level) {
					level = 0
				} else {
					level -= int64(lo)
				}
			}
		}
	}
	hi, lo := bits.Mul64(uint64(max(delta, -delta)), uint64(w))
	switch {
	case delta >= 0:
		if hi != 0 || lo > uint64(MaxStateValue-level) {
			level = MaxStateValue // a debt beyond a state: capped
		} else {
			level += int64(lo)
		}
	case hi != 0 || lo >= uint64(level):
		level = 0
	default:
		level -= int64(lo)
	}
	if level == 0 {
		return 0
	}
	if c.l.Algorithm == GCRA {
		q := level / r
		if q > MaxStateValue-ne { // its arrival time would not fit a state: capped
			q = MaxStateValue - ne
			level = q * r // ≤ the level: no overflow
		}
		*n = State{Algorithm: GCRA, T: ne + q, X: level - q*r, Y: ne}
	} else {
		*n = State{Algorithm: c.l.Algorithm, T: ne, X: level}
	}
	return 0
}
