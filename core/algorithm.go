package core

//go:generate go run ./internal/dispatchgen

// algorithm is everything the package knows of one algorithm beyond its row
// in the table (algorithms, core.go): each Algorithm constant X is
// implemented by a zero-size type algX (algGCRA for GCRA) that has these
// methods, in a file of its own (fixed_window.go, sliding_window.go,
// sliding_log.go, bucket.go for TokenBucket and LeakyBucket, gcra.go).
// The rest of the package reaches them only through the dispatchers of
// dispatch_gen.go (decideBy, settleBy, checkWordsBy, usageBy, carriedBy,
// nextAfterBy), which go generate writes from the constants: a switch with
// a case per algorithm, calling its type's method statically. A new
// algorithm is its constant and row in core.go, its type in a new file,
// and go generate; the compiler then names any method the type lacks.
//
// The dispatch is a switch rather than a table of function values on
// purpose: a call through a function value (or an interface) makes every
// pointer passed to it escape, so each decision's state and result would
// move to the heap, and the decisions must not allocate. The interface is
// never called through; dispatch_gen.go asserts that every algX has it.
//
// Every method reads all of its inputs before it writes any output: the
// state read and the state written may be the same.
type algorithm interface {
	// decide decides a call of cost at now on the state *s, whose words
	// are checked and written by c's algorithm or by none (fresh, or
	// another algorithm's legacy state, which counts as fresh), into *d,
	// which holds only Limit. exact reports that *s was written under
	// exactly c's parameters (or carried over to them); otherwise its
	// counts may exceed the limit and are clamped. It writes the new state
	// to *n only when n is not nil (modeTake) and the state changes (an
	// admission of a cost above 0). m says how far to go (a sliding log
	// checks its storage in modeCheck and modeTake).
	decide(c *Compiled, s *State, exact bool, now, cost int64, m mode, d *Decision, n *State) Error
	// checkWords checks the words of a state the algorithm wrote, beyond
	// the bounds every word has (checked before): ErrState for a word it
	// does not use set, or a value it never writes.
	checkWords(s *State) Error
	// usage reads what a state the algorithm wrote, with valid recorded
	// parameters (L, W, R), has used, for carrying it to other
	// parameters (see Compiled.carry): its anchor, the state's own time,
	// and the usage there, in whole units for a windowed algorithm
	// (a fraction of one counts as one), else as a level in units of
	// 1/s.W of a unit (at most MaxStateValue). ok is false when it has
	// used nothing.
	usage(s *State) (anchor, used int64, ok bool)
	// carried returns the words (T, X, Y) of the state of c's algorithm
	// that holds a usage carried over from another state: used units at
	// anchor for a windowed algorithm, a level in units of 1/Window for
	// the others, above 0 and already clamped to c's limit (or capacity).
	// The caller writes the state, with c's parameters and the other
	// state's log storage.
	carried(c *Compiled, anchor, used int64) (t, x, y int64)
	// settle writes to *n, which is the zero State, the state *s holds
	// after delta more units used at now (fewer when delta is negative),
	// or leaves it zero when nothing is used any more; the caller sets the
	// recorded parameters and decides on the result. *s is as decide gets
	// it: checked, carried over to c's parameters when it has to be, and
	// exact as there. In modeCheck it only checks (a sliding log's
	// storage) and may leave *n incomplete.
	settle(c *Compiled, s *State, exact bool, now, delta int64, m mode, n *State) Error
	// nextAfter derives a decision's NextAfter from its other fields and
	// l's parameters (see DeriveNextAfter), for a decision with less than
	// the whole limit remaining.
	nextAfter(l *Limit, d *Decision) int64
}
