package core

// Algorithm selects the rate-limiting algorithm of a Limit. The zero value is
// invalid for a Limit and, in a State, means "fresh" (no state yet).
type Algorithm int32

// The algorithms. Their numbers are part of the state encoding shared with the
// WebAssembly ABI and the SQL functions; they never change.
const (
	FixedWindow   Algorithm = 1
	SlidingWindow Algorithm = 2
	SlidingLog    Algorithm = 3
	TokenBucket   Algorithm = 4
	LeakyBucket   Algorithm = 5
	GCRA          Algorithm = 6
)

// algorithms describes each algorithm, by number: the one list of them
// (Algorithms), which names, parsers, messages and tests read.
var algorithms = [...]struct {
	name, short     string
	aliases         []string
	windowed, units bool
}{
	FixedWindow:   {"fixed_window", "fixed", nil, true, false},
	SlidingWindow: {"sliding_window", "sliding", []string{"sliding_window_counter"}, true, true},
	SlidingLog:    {"sliding_log", "sliding_log", []string{"log", "sliding_window_log"}, true, false},
	TokenBucket:   {"token_bucket", "token", nil, false, true},
	LeakyBucket:   {"leaky_bucket", "leaky", nil, false, true},
	GCRA:          {"gcra", "gcra", nil, false, true},
}

// Algorithms returns every algorithm, in number order.
func Algorithms() []Algorithm {
	out := make([]Algorithm, 0, len(algorithms)-1)
	for a := range algorithms[1:] {
		out = append(out, Algorithm(a+1))
	}
	return out
}

// Valid reports whether a is one of Algorithms.
func (a Algorithm) Valid() bool { return a >= 1 && int(a) < len(algorithms) }

// String returns the algorithm's canonical name, as used in vectors, SQL and
// configuration files ("fixed_window", "sliding_window", ...).
func (a Algorithm) String() string {
	if !a.Valid() {
		return "unknown"
	}
	return algorithms[a].name
}

// ShortName returns the name configuration files usually write: "fixed",
// "sliding", "sliding_log", "token", "leaky", "gcra".
func (a Algorithm) ShortName() string {
	if !a.Valid() {
		return "unknown"
	}
	return algorithms[a].short
}

// Names returns every name ParseAlgorithm accepts for a: the canonical
// one, the short one if it differs, then the others.
func (a Algorithm) Names() []string {
	if !a.Valid() {
		return nil
	}
	e := algorithms[a]
	names := []string{e.name}
	if e.short != e.name {
		names = append(names, e.short)
	}
	return append(names, e.aliases...)
}

// Windowed reports whether a counts requests per window (fixed_window,
// sliding_window, sliding_log): its Limit is a count per Window and its
// Rate must be 0. The others (the buckets, GCRA) restore Rate units per
// Window.
func (a Algorithm) Windowed() bool { return a.Valid() && algorithms[a].windowed }

// UnitsBounded reports whether a computes in units of 1/Window of a
// request, so that its Limit × Window (µs) must stay within MaxUnits
// (ErrUnits): every algorithm but fixed_window and sliding_log.
func (a Algorithm) UnitsBounded() bool { return a.Valid() && algorithms[a].units }

// ParseAlgorithm returns the algorithm named s: one of its Names (the
// canonical names and the short names other limiters use, "fixed",
// "sliding", "log", "token", "leaky"). It returns ErrAlgorithm for anything
// else.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms() {
		for _, n := range a.Names() {
			if n == s {
				return a, nil
			}
		}
	}
	return 0, ErrAlgorithm
}

// Bounds on every input. Inputs outside them return an Error; inside them no
// arithmetic overflows.
const (
	// MaxTime is the largest accepted now: 9999-12-31T23:59:59.999999Z in
	// microseconds since the Unix epoch. The smallest is 0.
	MaxTime int64 = 253402300799999999
	// MaxWindow is the longest Window: 10^15 µs, about 31.7 years.
	MaxWindow int64 = 1_000_000_000_000_000
	// MaxLimit is the largest Limit and Rate: 2^40 (about 1.1e12).
	MaxLimit int64 = 1 << 40
	// MaxCost is the largest cost of one call. A cost above the Limit is
	// accepted and denied with RetryAfter == Never.
	MaxCost int64 = 1 << 40
	// MaxLogLimit is the largest Limit of a SlidingLog: the log keeps one
	// entry per admitted unit, so this bounds its storage (32 KiB).
	MaxLogLimit int64 = 4096
	// MaxUnits bounds Limit × Window (µs) for SlidingWindow, TokenBucket,
	// LeakyBucket and GCRA, whose exact arithmetic works in units of
	// 1/Window of a token: 2^61, e.g. 10^7 per day or 10^5 per 266 days.
	// FixedWindow and SlidingLog have no such bound.
	MaxUnits int64 = 1 << 61
	// MaxStateValue bounds every integer field of a State; larger or negative
	// values are reported as ErrState.
	MaxStateValue int64 = 1 << 62
)

// Never is Decision.RetryAfter when the cost can never be admitted because it
// exceeds the Limit.
const Never int64 = -1

// Limit holds the parameters of one rate limit. It is a plain value: choose
// it per call if you like (a free plan and a paid plan can share one store).
type Limit struct {
	// Algorithm selects the algorithm.
	Algorithm Algorithm
	// Limit is the quota per window (FixedWindow, SlidingWindow,
	// SlidingLog), the bucket capacity (TokenBucket, LeakyBucket) or the
	// burst (GCRA): the number of units admitted at once from a fresh state.
	Limit int64
	// Window is the window length in microseconds, or for the bucket
	// algorithms and GCRA the period over which Rate units are restored.
	Window int64
	// Rate is how many units are restored per Window for TokenBucket,
	// LeakyBucket and GCRA; 0 means Limit (the whole capacity per Window).
	// It must be 0 for the window algorithms.
	Rate int64
}

// State is the stored state of one limit on one key: a fixed record of int64
// words whose meaning depends on the algorithm that wrote it. The zero value
// is a fresh state. It is the encoding shared with the SQL rows and the
// WebAssembly buffers:
//
//	FixedWindow   T = window start (µs)      X = units admitted in it
//	SlidingWindow T = current window start   X = units in it     Y = units in the previous window
//	SlidingLog    Log = times (µs) of admitted units, ascending, one entry per unit
//	TokenBucket   T = last update (µs)       X = units taken, in 1/Window of a token
//	LeakyBucket   T = last update (µs)       X = water level, in 1/Window of a unit
//	GCRA          T = theoretical arrival time, whole µs; X = its fraction, in 1/Rate µs (≤ MaxLimit)
//	              Y = time of the admission that wrote it (≤ T; 0 in states written before it was kept)
//
// Unused words are zero. A state that records the parameters that wrote it
// (L, W, R) and meets a limit with other parameters or another algorithm
// is carried over: the units it had used are read under the new limit
// (see "Carrying usage" in the package documentation). A legacy state
// (L, W, R zero) written by another algorithm is treated as fresh; a
// legacy state written under other
// parameters of the same algorithm is read under the new ones, clamped so it
// never denies longer than a state written under the new parameters could:
// one window (FixedWindow, SlidingLog), two windows (SlidingWindow, whose
// previous window still weighs) or one full refill, Limit×Window/Rate
// (TokenBucket, LeakyBucket, GCRA), counted from the time the state was
// written. A window state written under another window length is read in
// the new window that holds its start, so RetryAfter stays exact. (A GCRA
// state with Y = 0 is not clamped: it has no time to count from.)
type State struct {
	Algorithm Algorithm
	T, X, Y   int64
	// L, W and R are the parameters of the limit that wrote the state: its
	// Limit, its Window and, for TokenBucket, LeakyBucket and GCRA, its
	// effective rate (Rate, or Limit when Rate is 0; 0 for the window
	// algorithms). They are what lets a state written under other
	// parameters be carried over exactly (see Carrying usage in the
	// package documentation). All three are 0 in a fresh state and in a
	// state written before they were kept (a legacy state, read as
	// described above).
	L, W, R int64
	// Log holds the SlidingLog entries. Take writes new entries into its
	// backing array, which must have capacity for the Limit (see
	// ErrLogCapacity); the other algorithms ignore it (and drop it from the
	// states they write).
	Log []int64
}

// Decision is the outcome of one call.
type Decision struct {
	// Allowed reports whether the cost was admitted.
	Allowed bool
	// Limit is the limit's quota, capacity or burst (Limit.Limit).
	Limit int64
	// Remaining is how many units a call at the same now would still be
	// admitted after this decision, never negative.
	Remaining int64
	// ResetAfter is the time in µs until the limit is fully restored
	// (Remaining == Limit) if nothing more is taken; 0 when it already is.
	// A store may drop the key's state once it has passed.
	ResetAfter int64
	// RetryAfter is 0 when allowed; when denied, the time in µs until a
	// call of the same cost would be admitted (exact: one µs earlier is still
	// denied), or Never if the cost exceeds the Limit.
	RetryAfter int64
	// Delay is set by LeakyBucket for an admitted call: the time in µs until
	// the units ahead of it have leaked out, after which it should proceed.
	// It is 0 for every other algorithm.
	Delay int64
	// NextAfter is the time in µs until more quota is made available if
	// nothing more is taken: the first instant at which Remaining grows,
	// that is at which a call of cost Remaining+1 would be admitted
	// (exact: one µs earlier it is still denied). It is 0 exactly when
	// Remaining == Limit, when nothing is left to restore. By algorithm:
	// the end of the window (FixedWindow); the moment the weighted count
	// drops by a whole unit, in this window as the previous one slides
	// out or in the next as the current one does (SlidingWindow); the
	// expiry of the oldest admission in the log, or of the first one above
	// a lowered Limit (SlidingLog); the refill or leak of the next whole
	// unit (TokenBucket, LeakyBucket, GCRA). It is what the RateLimit
	// field's "t" parameter reports (draft-ietf-httpapi-ratelimit-headers:
	// the seconds until additional quota is made available), and never
	// later than RetryAfter for a denied call. The conformance vectors pin
	// it, and every runtime computes it: the WebAssembly module, the SQL
	// functions (since migration 16) and their native step.
	NextAfter int64
}

// Error is the code of every error the package returns. Its values are
// constants, comparable with == and errors.Is; their numbers are the status
// codes of the WebAssembly ABI and the SQL functions' SQLSTATEs (RL0NN).
// The decisions return it bare; Validate and Compile return a *LimitError,
// which says more and matches its Error with errors.Is.
type Error int32

// The errors.
const (
	// ErrAlgorithm: Limit.Algorithm is not one of the six algorithms.
	ErrAlgorithm Error = 1
	// ErrLimit: Limit.Limit is outside [1, MaxLimit] (or [1, MaxLogLimit]
	// for SlidingLog).
	ErrLimit Error = 2
	// ErrWindow: Limit.Window is outside [1, MaxWindow].
	ErrWindow Error = 3
	// ErrRate: Limit.Rate is outside [0, MaxLimit], or not 0 for a window
	// algorithm.
	ErrRate Error = 4
	// ErrUnits: Limit × Window exceeds MaxUnits for an algorithm bound by it.
	ErrUnits Error = 5
	// ErrCost: cost is outside [0, MaxCost].
	ErrCost Error = 6
	// ErrTime: now is outside [0, MaxTime].
	ErrTime Error = 7
	// ErrState: the state is corrupt (a negative or out-of-range field, an
	// unknown algorithm, a word the algorithm does not use set, a log that
	// is not ascending or longer than MaxLogLimit).
	ErrState Error = 8
	// ErrLogCapacity: a SlidingLog state's Log has too little capacity for
	// the entries an admission would store.
	ErrLogCapacity Error = 9
	// ErrLimits: a multi-limit call was given no limits, or states and
	// decisions slices shorter than the limits.
	ErrLimits Error = 10
)

// Error returns a fixed description of the error.
func (e Error) Error() string {
	switch e {
	case ErrAlgorithm:
		return "ratelimit: unknown algorithm"
	case ErrLimit:
		return "ratelimit: limit out of range"
	case ErrWindow:
		return "ratelimit: window out of range"
	case ErrRate:
		return "ratelimit: rate out of range"
	case ErrUnits:
		return "ratelimit: limit × window too large"
	case ErrCost:
		return "ratelimit: cost out of range"
	case ErrTime:
		return "ratelimit: time out of range"
	case ErrState:
		return "ratelimit: corrupt state"
	case ErrLogCapacity:
		return "ratelimit: sliding log storage too small"
	case ErrLimits:
		return "ratelimit: bad limit list"
	}
	return "ratelimit: unknown error"
}

// Validate reports whether l is a valid limit: nil, or a *LimitError
// naming the parameter at fault, its value and the range allowed, which
// matches (errors.Is) the Error that Take would return for l.
func (l Limit) Validate() error {
	if err := l.check(); err != 0 {
		return newLimitError(err, &l)
	}
	return nil
}

func (l *Limit) check() Error {
	if !l.Algorithm.Valid() {
		return ErrAlgorithm
	}
	if l.Limit < 1 || l.Limit > MaxLimit || (l.Algorithm == SlidingLog && l.Limit > MaxLogLimit) {
		return ErrLimit
	}
	if l.Window < 1 || l.Window > MaxWindow {
		return ErrWindow
	}
	if l.Algorithm.Windowed() {
		if l.Rate != 0 {
			return ErrRate
		}
	} else if l.Rate < 0 || l.Rate > MaxLimit {
		return ErrRate
	}
	if l.Algorithm.UnitsBounded() && l.Limit > MaxUnits/l.Window {
		return ErrUnits
	}
	return 0
}

// set makes *n the state of algorithm a with words t, x and y, written
// under parameters l, w and r, without a log. It writes the fields one by
// one: a State literal is built on the stack and copied whole (a State
// holds a pointer, so the copy checks for the write barrier), which the
// decisions of the common algorithms would pay on every admission. The
// log is cleared only when there is one, so the common case stores no
// pointer.
func (n *State) set(a Algorithm, t, x, y, l, w, r int64) {
	n.Algorithm, n.T, n.X, n.Y, n.L, n.W, n.R = a, t, x, y, l, w, r
	if n.Log != nil {
		n.Log = nil
	}
}

// simpleState reports whether s is a state of a fixed window or a bucket
// with T and X below MaxStateValue and Y zero: the most common state, which
// checkState accepts, told apart without a call.
func simpleState(s *State) bool {
	const simple = 1<<FixedWindow | 1<<TokenBucket | 1<<LeakyBucket
	return 1<<uint32(s.Algorithm)&simple != 0 && uint64(s.T|s.X) < uint64(MaxStateValue) && s.Y == 0
}

// checkState validates the words of a state written by l's algorithm.
func checkState(l *Limit, s *State) Error {
	if s.L|s.W|s.R != 0 && !paramsValid(s) {
		return ErrState
	}
	return checkWords(l, s)
}

// checkWords is checkState without the recorded parameters, for a state
// whose parameters are known to be valid (those of the limit deciding it).
func checkWords(l *Limit, s *State) Error {
	if s.T < 0 || s.T > MaxStateValue || s.X < 0 || s.X > MaxStateValue || s.Y < 0 || s.Y > MaxStateValue {
		return ErrState
	}
	if s.Algorithm == 0 { // fresh: nothing set
		if s.T != 0 || s.X != 0 || s.Y != 0 || s.L|s.W|s.R != 0 || len(s.Log) != 0 {
			return ErrState
		}
		return 0
	}
	return checkWordsBy(s) // the algorithm's own checks, ErrState for an unknown one
}

// paramsValid reports whether a state's recorded parameters (L, W, R) are
// those of a valid limit of its algorithm, R being the effective rate.
func paramsValid(s *State) bool {
	l := Limit{Algorithm: s.Algorithm, Limit: s.L, Window: s.W, Rate: s.R}
	if s.Algorithm.Windowed() {
		// The window algorithms record no rate.
	} else if s.R < 1 {
		return false
	}
	return l.check() == 0
}

func checkCall(now, cost int64) Error {
	if now < 0 || now > MaxTime {
		return ErrTime
	}
	if cost < 0 || cost > MaxCost {
		return ErrCost
	}
	return 0
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if q*b != a {
		q++
	}
	return q
}

// ceilDivSigned returns ⌈a/b⌉ for any a and b > 0.
func ceilDivSigned(a, b int64) int64 {
	if a >= 0 {
		return ceilDiv(a, b)
	}
	return -(-a / b)
}
