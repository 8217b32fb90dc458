package core

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
	return decideBy(c, s, exact, now, cost, m, d, n)
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
