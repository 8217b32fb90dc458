package core

// LimitError is an invalid Limit as Validate and Compile report it: the
// check it failed (Code), the parameter at fault, its value and the range
// it must be in, with the limit itself (its algorithm). errors.Is(err,
// ErrLimit) and errors.As into an Error hold for it, through Unwrap, as
// they do for the bare Error.
//
// Its message is the one every runtime gives for the same limit: the SQL
// functions raise it, the configuration checker of rl-wasm-host and the
// proxy-wasm filter print it (Message), and a test holds the three equal.
// It is formatted only when asked for (Error, Message): building a
// LimitError does no formatting. The decisions (Take, Peek, TakeAll and
// the Compiled methods) return the bare Error code, which costs nothing and
// is the WebAssembly ABI's status; Validate or Compile the limit to learn
// why it was refused.
type LimitError struct {
	// Code is the check the limit failed: ErrAlgorithm, ErrLimit,
	// ErrWindow, ErrRate or ErrUnits.
	Code Error
	// Limit is the limit as given.
	Limit Limit
	// Field names the parameter at fault: "algorithm", "limit", "window"
	// (in µs) or "rate". For ErrUnits it is "limit": the largest Limit
	// that Window allows is Max.
	Field string
	// Value is the parameter's value.
	Value int64
	// Min and Max bound the values Field may take for this algorithm:
	// [1, 6] for the algorithm, [1, MaxLimit] for a limit ([1,
	// MaxLogLimit] for SlidingLog, [1, MaxUnits/Window] for ErrUnits), [1,
	// MaxWindow] for a window, [0, MaxLimit] for a rate ([0, 0] for the
	// window algorithms, which take none).
	Min, Max int64
}

// newLimitError describes why l failed the check that returned code.
func newLimitError(code Error, l *Limit) *LimitError {
	e := &LimitError{Code: code, Limit: *l}
	switch code {
	case ErrAlgorithm:
		e.Field, e.Value, e.Min, e.Max = "algorithm", int64(l.Algorithm), 1, int64(len(algorithms)-1)
	case ErrLimit:
		e.Field, e.Value, e.Min, e.Max = "limit", l.Limit, 1, MaxLimit
		if l.Algorithm == SlidingLog {
			e.Max = MaxLogLimit
		}
	case ErrWindow:
		e.Field, e.Value, e.Min, e.Max = "window", l.Window, 1, MaxWindow
	case ErrRate:
		e.Field, e.Value, e.Min, e.Max = "rate", l.Rate, 0, MaxLimit
		if l.Algorithm.Windowed() {
			e.Max = 0
		}
	case ErrUnits:
		e.Field, e.Value, e.Min, e.Max = "limit", l.Limit, 1, MaxUnits/l.Window
	}
	return e
}

// Error returns "ratelimit: " and Message.
func (e *LimitError) Error() string { return "ratelimit: " + e.Message() }

// Unwrap returns Code.
func (e *LimitError) Unwrap() error { return e.Code }

// Message says what is wrong and what is allowed, as the SQL functions and
// the configuration checker say it:
//
//	algorithm 0: unknown (want 1 fixed_window, 2 sliding_window, 3 sliding_log, 4 token_bucket, 5 leaky_bucket or 6 gcra)
//	limit 0: outside [1, 1099511627776] for fixed_window
//	window 0 µs: outside [1, 1000000000000000] µs
//	rate 5: must be 0 or absent for fixed_window (rate applies to token_bucket, leaky_bucket and gcra)
//	rate -1: outside [0, 1099511627776] for token_bucket
//	limit 1000000000000 × window 86400000000 µs: too large for token_bucket (limit × window in µs must be at most 2305843009213693952)
//
// Every number in it is written in full; windows are in µs.
func (e *LimitError) Message() string {
	l := &e.Limit
	alg := l.Algorithm.String()
	switch e.Code {
	case ErrAlgorithm:
		return "algorithm " + itoa64(e.Value) + ": unknown (want " + AlgorithmList(true) + ")"
	case ErrLimit:
		return "limit " + itoa64(e.Value) + ": outside [1, " + itoa64(e.Max) + "] for " + alg
	case ErrWindow:
		return "window " + itoa64(e.Value) + " µs: outside [1, " + itoa64(MaxWindow) + "] µs"
	case ErrRate:
		if l.Algorithm.Windowed() {
			return "rate " + itoa64(e.Value) + ": must be 0 or absent for " + alg + " (rate applies to " + RatedList() + ")"
		}
		return "rate " + itoa64(e.Value) + ": outside [0, " + itoa64(MaxLimit) + "] for " + alg
	case ErrUnits:
		return "limit " + itoa64(l.Limit) + " × window " + itoa64(l.Window) + " µs: too large for " + alg +
			" (limit × window in µs must be at most " + itoa64(MaxUnits) + ")"
	}
	return e.Code.Error()[len("ratelimit: "):] // not the call's fault: the code's own words
}

// AlgorithmList names every algorithm for a message, in number order:
// "fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket or
// gcra", or with numbered set "1 fixed_window, 2 sliding_window, ... or 6
// gcra" (the numbers of Algorithm, which the SQL functions take).
func AlgorithmList(numbered bool) string {
	var names []string
	for _, a := range Algorithms() {
		if numbered {
			names = append(names, itoa64(int64(a))+" "+a.String())
		} else {
			names = append(names, a.String())
		}
	}
	return prose(names, "or")
}

// RatedList names the algorithms that take a Rate (the ones not Windowed):
// "token_bucket, leaky_bucket and gcra".
func RatedList() string {
	var names []string
	for _, a := range Algorithms() {
		if !a.Windowed() {
			names = append(names, a.String())
		}
	}
	return prose(names, "and")
}

// prose joins items as "a, b and c" (last is "and" or "or").
func prose(items []string, last string) string {
	s := ""
	for i, it := range items {
		switch {
		case i == 0:
		case i == len(items)-1:
			s += " " + last + " "
		default:
			s += ", "
		}
		s += it
	}
	return s
}

// itoa64 writes v in decimal.
func itoa64(v int64) string {
	if v < 0 {
		return "-" + itoa(uint64(-(v+1))+1)
	}
	return itoa(uint64(v))
}

// CallError is an invalid call: a now outside [0, MaxTime] (ErrTime) or a
// cost outside [0, MaxCost] (ErrCost; a settle's delta outside [−MaxCost,
// MaxCost]). The decisions return the bare Error; a caller that knows the
// call builds a CallError from it to say more: rl's Limiter does. It
// matches Code with errors.Is and errors.As, through Unwrap, and its
// message is the SQL functions' for the same call.
type CallError struct {
	// Code is ErrTime or ErrCost.
	Code Error
	// Now and Cost are the call's: its time (µs since the Unix epoch)
	// and its cost, or a settle's delta.
	Now, Cost int64
	// Settle marks a settle, whose Cost is a delta.
	Settle bool
}

// Error returns "ratelimit: " and Message.
func (e *CallError) Error() string { return "ratelimit: " + e.Message() }

// Unwrap returns Code.
func (e *CallError) Unwrap() error { return e.Code }

// Message says what is wrong and what is allowed, as the SQL functions say
// it:
//
//	time -5 µs: outside [0, 253402300799999999] µs since the Unix epoch
//	cost -1: outside [0, 1099511627776]
//	settle delta 1099511627777: outside [-1099511627776, 1099511627776]
func (e *CallError) Message() string {
	switch {
	case e.Code == ErrTime && (e.Now < 0 || e.Now > MaxTime):
		return "time " + itoa64(e.Now) + " µs: outside [0, " + itoa64(MaxTime) + "] µs since the Unix epoch"
	case e.Code == ErrCost && e.Settle && (e.Cost < -MaxCost || e.Cost > MaxCost):
		return "settle delta " + itoa64(e.Cost) + ": outside [-" + itoa64(MaxCost) + ", " + itoa64(MaxCost) + "]"
	case e.Code == ErrCost && !e.Settle && (e.Cost < 0 || e.Cost > MaxCost):
		return "cost " + itoa64(e.Cost) + ": outside [0, " + itoa64(MaxCost) + "]"
	}
	return e.Code.Error()[len("ratelimit: "):] // not the call's fault: the code's own words
}
