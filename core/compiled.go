package core

// Compiled is a Limit checked once, with what every decision of it needs
// computed ahead: the effective rate, the capacity in units of 1/Window,
// GCRA's longest arrival time ahead, and the divisions by the window and
// by the rate as multiplications (exact: see divisor). Deciding with a Compiled skips the
// limit's validation; the call (now, cost) and the state are still checked,
// so a corrupt state is reported as ErrState exactly as Take reports it.
//
// Build it with Compile, once per limit (a policy compiles its limits when
// it is created), and share it freely: it is an immutable value. The zero
// Compiled is not a valid limit; deciding with it returns ErrAlgorithm.
// Decisions, states and errors are those of Take, Peek, TakeAll and PeekAll
// for the limit it was compiled from, which the conformance vectors and a
// differential test hold.
type Compiled struct {
	l         Limit
	rate      int64   // Rate, or Limit when Rate is 0 (TokenBucket, LeakyBucket, GCRA)
	srate     int64   // the rate a state records (State.R): rate, or 0 for the window algorithms
	capacity  int64   // Limit × Window (SlidingWindow, TokenBucket, LeakyBucket, GCRA)
	ahead     int64   // capacity / rate: how far GCRA's arrival time can be ahead, whole µs
	aheadFrac int64   // capacity % rate: its fraction, in 1/rate µs
	wdiv      divisor // by Window; prepared by Compile only
	rdiv      divisor // by rate; prepared by Compile only
}

// Compile checks l and prepares it for deciding. When l is invalid it
// returns Validate's *LimitError, which matches (errors.Is) the Error Take
// would return for l.
func Compile(l Limit) (Compiled, error) {
	var c Compiled
	if err := c.set(&l); err != 0 {
		return Compiled{}, newLimitError(err, &l)
	}
	c.wdiv, c.rdiv = newDivisor(l.Window), newDivisor(c.rate)
	return c, nil
}

// set checks *l and fills c from it.
func (c *Compiled) set(l *Limit) Error {
	if err := l.check(); err != 0 {
		return err
	}
	c.l = *l
	if !l.Algorithm.UnitsBounded() {
		// Not bound by MaxUnits: no capacity in units.
		c.rate, c.srate, c.capacity, c.ahead, c.aheadFrac = 0, 0, 0, 0, 0
		return 0
	}
	c.rate = l.Rate
	if c.rate == 0 {
		c.rate = l.Limit
	}
	c.srate = c.rate
	if l.Algorithm.Windowed() { // a window algorithm records no rate
		c.srate = 0
	}
	c.capacity = l.Limit * l.Window // ≤ MaxUnits: checked
	c.ahead, c.aheadFrac = 0, 0
	if l.Algorithm == GCRA {
		c.ahead, c.aheadFrac = c.capacity/c.rate, c.capacity%c.rate
	}
	return 0
}

// Limit returns the limit c was compiled from.
func (c *Compiled) Limit() Limit { return c.l }

// Take is core.Take for the compiled limit.
func (c *Compiled) Take(s State, now, cost int64) (d Decision, n State, err error) {
	n = s
	if e := c.eval(&n, now, cost, modeTake, &d, &n); e != 0 {
		return Decision{}, s, e
	}
	return d, n, nil
}

// Peek is core.Peek for the compiled limit.
func (c *Compiled) Peek(s State, now, cost int64) (d Decision, err error) {
	if e := c.eval(&s, now, cost, modePeek, &d, nil); e != 0 {
		return Decision{}, e
	}
	return d, nil
}

// TakeInto is Take on a state the caller holds: it decides onto *d and,
// when the call changes the state (an admission of a cost above 0),
// replaces *s with the new state, writing a sliding log's entries into
// s.Log's backing array. On an error *s is unchanged and *d unspecified.
// Nothing is copied by value, so a store can decide a key's state where
// it keeps it.
func (c *Compiled) TakeInto(s *State, now, cost int64, d *Decision) error {
	if e := c.eval(s, now, cost, modeTake, d, s); e != 0 {
		return e
	}
	return nil
}

// PeekInto is Peek onto *d, changing nothing; on an error *d is
// unspecified.
func (c *Compiled) PeekInto(s *State, now, cost int64, d *Decision) error {
	if e := c.eval(s, now, cost, modePeek, d, nil); e != 0 {
		return e
	}
	return nil
}

// TakeAllCompiled is TakeAll for compiled limits: all or nothing, with the
// same deciding index, decisions, states and errors.
func TakeAllCompiled(cs []Compiled, ss []State, now, cost int64, ds []Decision) (int, error) {
	if len(cs) == 1 && len(ss) != 0 && len(ds) != 0 { // all's one-limit pass, without its dispatch
		if err := cs[0].eval(&ss[0], now, cost, modeTake, &ds[0], &ss[0]); err != 0 {
			return 0, err
		}
		return 0, nil
	}
	return all(nil, cs, len(cs), ss, now, cost, ds, modeTake)
}

// PeekAllCompiled is PeekAll for compiled limits.
func PeekAllCompiled(cs []Compiled, ss []State, now, cost int64, ds []Decision) (int, error) {
	if len(cs) == 1 && len(ss) != 0 && len(ds) != 0 {
		if err := cs[0].eval(&ss[0], now, cost, modePeek, &ds[0], nil); err != 0 {
			return 0, err
		}
		return 0, nil
	}
	return all(nil, cs, len(cs), ss, now, cost, ds, modePeek)
}

// Params returns the parameters a state written by c records (State.L, W
// and R), for a store that keeps them beside the state rather than in it:
// a state with Algorithm set, written by c, has exactly these.
func (c *Compiled) Params() (l, w, r int64) { return c.l.Limit, c.l.Window, c.srate }
