package core_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
)

// TestLimitError: Validate names the parameter at fault, its value, the
// range allowed and the algorithm, in the words of the SQL functions
// (tests/errtext holds them equal to SQL's and the configuration
// checker's); the error matches its Error code with errors.Is and
// errors.As, and Take still returns the bare code.
func TestLimitError(t *testing.T) {
	nalg := int64(len(core.Algorithms())) // the largest algorithm number
	numbered, _, rated := algorithmLists()
	for _, c := range []struct {
		name     string
		l        core.Limit
		code     core.Error
		field    string
		value    int64
		min, max int64
		msg      string
	}{
		{"unset algorithm", core.Limit{Limit: 1, Window: 1}, core.ErrAlgorithm, "algorithm", 0, 1, nalg,
			"algorithm 0: unknown (want " + numbered + ")"},
		{"unknown algorithm", core.Limit{Algorithm: -3, Limit: 1, Window: 1}, core.ErrAlgorithm, "algorithm", -3, 1, nalg,
			"algorithm -3: unknown (want " + numbered + ")"},
		{"zero limit", core.Limit{Algorithm: core.FixedWindow, Window: 1}, core.ErrLimit, "limit", 0, 1, core.MaxLimit,
			"limit 0: outside [1, 1099511627776] for fixed_window"},
		{"negative limit", core.Limit{Algorithm: core.TokenBucket, Limit: -5, Window: 1}, core.ErrLimit, "limit", -5, 1, core.MaxLimit,
			"limit -5: outside [1, 1099511627776] for token_bucket"},
		{"log limit", core.Limit{Algorithm: core.SlidingLog, Limit: 5000, Window: 1}, core.ErrLimit, "limit", 5000, 1, core.MaxLogLimit,
			"limit 5000: outside [1, 4096] for sliding_log"},
		{"zero window", core.Limit{Algorithm: core.GCRA, Limit: 1}, core.ErrWindow, "window", 0, 1, core.MaxWindow,
			"window 0 µs: outside [1, 1000000000000000] µs"},
		{"long window", core.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: core.MaxWindow + 1}, core.ErrWindow, "window", core.MaxWindow + 1, 1, core.MaxWindow,
			"window 1000000000000001 µs: outside [1, 1000000000000000] µs"},
		{"rate on a window", core.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: 1, Rate: 5}, core.ErrRate, "rate", 5, 0, 0,
			"rate 5: must be 0 or absent for fixed_window (rate applies to " + rated + ")"},
		{"negative rate", core.Limit{Algorithm: core.LeakyBucket, Limit: 1, Window: 1, Rate: -1}, core.ErrRate, "rate", -1, 0, core.MaxLimit,
			"rate -1: outside [0, 1099511627776] for leaky_bucket"},
		{"units", core.Limit{Algorithm: core.TokenBucket, Limit: 1_000_000_000_000, Window: 86_400_000_000}, core.ErrUnits, "limit", 1_000_000_000_000, 1, core.MaxUnits / 86_400_000_000,
			"limit 1000000000000 × window 86400000000 µs: too large for token_bucket (limit × window in µs must be at most 2305843009213693952)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.l.Validate()
			var le *core.LimitError
			require.ErrorAs(t, err, &le)
			require.Equal(t, core.LimitError{Code: c.code, Limit: c.l, Field: c.field, Value: c.value, Min: c.min, Max: c.max}, *le)
			require.Equal(t, c.msg, le.Message())
			require.Equal(t, "ratelimit: "+c.msg, err.Error())
			require.ErrorIs(t, err, c.code)
			var code core.Error
			require.ErrorAs(t, err, &code)
			require.Equal(t, c.code, code)
			for _, other := range []core.Error{core.ErrAlgorithm, core.ErrLimit, core.ErrWindow, core.ErrRate, core.ErrUnits} {
				require.Equal(t, other == c.code, errors.Is(err, other), "%v", other)
			}
			// The value is outside [Min, Max], and the bound is exact: a
			// limit with Max (or Min) there is valid for this check.
			require.True(t, le.Value < le.Min || le.Value > le.Max)
			_, _, terr := core.Take(c.l, core.State{}, 0, 1)
			require.Equal(t, c.code, terr) // the decisions return the bare code
			_, cerr := core.Compile(c.l)
			require.Equal(t, err, cerr)
		})
	}
}

// TestLimitErrorBoundsExact: a LimitError's Max is the largest value its
// field may take for the limit: set there, the limit passes that check.
func TestLimitErrorBoundsExact(t *testing.T) {
	for _, l := range []core.Limit{
		{Algorithm: core.FixedWindow, Limit: core.MaxLimit + 1, Window: 1},
		{Algorithm: core.SlidingLog, Limit: core.MaxLogLimit + 1, Window: 1},
		{Algorithm: core.TokenBucket, Limit: 1, Window: core.MaxWindow + 1},
		{Algorithm: core.GCRA, Limit: 1, Window: 1, Rate: core.MaxLimit + 1},
		{Algorithm: core.SlidingWindow, Limit: 4096, Window: core.MaxWindow},
	} {
		var le *core.LimitError
		require.ErrorAs(t, l.Validate(), &le)
		fixed := l
		switch le.Field {
		case "limit":
			fixed.Limit = le.Max
		case "window":
			fixed.Window = le.Max
		case "rate":
			fixed.Rate = le.Max
		}
		require.NoError(t, fixed.Validate(), "%+v fixed to %+v", l, fixed)
	}
}

// algorithmLists returns the lists the messages name, built from the
// table (core.Algorithms): every algorithm with its number, "1
// fixed_window, 2 sliding_window, ... or 6 gcra"; every algorithm,
// "fixed_window, sliding_window, ... or gcra"; the algorithms that take a
// rate (not Windowed), "token_bucket, leaky_bucket and gcra".
func algorithmLists() (numbered, names, rated string) {
	var n, a, r []string
	for _, alg := range core.Algorithms() {
		n = append(n, fmt.Sprintf("%d %s", alg, alg))
		a = append(a, alg.String())
		if !alg.Windowed() {
			r = append(r, alg.String())
		}
	}
	return joined(n, "or"), joined(a, "or"), joined(r, "and")
}

// joined writes items as a message lists them: "a, b and c".
func joined(items []string, last string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + last + " " + items[len(items)-1]
}

// TestAlgorithmList: the lists messages name come from Algorithms, in
// number order, joined as prose; the algorithms of today are among them,
// in their places.
func TestAlgorithmList(t *testing.T) {
	numbered, names, rated := algorithmLists()
	require.Equal(t, names, core.AlgorithmList(false))
	require.Equal(t, numbered, core.AlgorithmList(true))
	require.Equal(t, rated, core.RatedList())
	require.True(t, strings.HasPrefix(numbered, "1 fixed_window, 2 sliding_window, 3 sliding_log, 4 token_bucket, 5 leaky_bucket"), numbered)
	require.Contains(t, numbered, "6 gcra")
	require.True(t, strings.HasPrefix(rated, "token_bucket, leaky_bucket"), rated)
}

// TestValidateAllocs: validating a valid limit allocates nothing; only a
// refusal builds a LimitError.
func TestValidateAllocs(t *testing.T) {
	l := core.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: 1_000_000, Rate: 5}
	if n := testing.AllocsPerRun(100, func() {
		if l.Validate() != nil {
			t.Fatal("invalid")
		}
	}); n != 0 {
		t.Fatalf("Validate of a valid limit: %v allocations, want 0", n)
	}
}

// TestCallError: a CallError names the value and the range; a code that
// does not describe its value falls back to the code's own words.
func TestCallError(t *testing.T) {
	for _, c := range []struct {
		e    core.CallError
		want string
	}{
		{core.CallError{Code: core.ErrTime, Now: -1}, "ratelimit: time -1 µs: outside [0, 253402300799999999] µs since the Unix epoch"},
		{core.CallError{Code: core.ErrCost, Cost: -1}, "ratelimit: cost -1: outside [0, 1099511627776]"},
		{core.CallError{Code: core.ErrCost, Cost: -1, Settle: true}, "ratelimit: cost out of range"},
		{core.CallError{Code: core.ErrCost, Cost: core.MaxCost + 1, Settle: true}, "ratelimit: settle delta 1099511627777: outside [-1099511627776, 1099511627776]"},
		{core.CallError{Code: core.ErrTime, Now: 5}, "ratelimit: time out of range"},
	} {
		require.EqualError(t, &c.e, c.want)
		require.ErrorIs(t, &c.e, c.e.Code)
		var code core.Error
		require.ErrorAs(t, &c.e, &code)
		require.Equal(t, c.e.Code, code)
	}
}
