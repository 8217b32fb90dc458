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
	if err := settleBy(c, r, exact, now, delta, m, &n); err != 0 {
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

// settledLevel returns a level (in units of 1/w of a unit) changed by
// delta units: a debt beyond what a state can record is capped at
// MaxStateValue, a refund never goes below 0. TokenBucket, LeakyBucket and
// GCRA settle through it.
func settledLevel(level, delta, w int64) int64 {
	hi, lo := bits.Mul64(uint64(max(delta, -delta)), uint64(w))
	switch {
	case delta >= 0:
		if hi != 0 || lo > uint64(MaxStateValue-level) {
			return MaxStateValue // a debt beyond a state: capped
		}
		return level + int64(lo)
	case hi != 0 || lo >= uint64(level):
		return 0
	}
	return level - int64(lo)
}
