package difftest

import (
	"fmt"
	"math/bits"

	"github.com/rlcore/rl/core"
)

// Oracle is what the tests hold one algorithm to, written apart from the
// code that decides: the bounds its decisions keep, and the states that
// test it at its extremes. Every algorithm of core.Algorithms() has one
// (OracleFor; TestOracles fails for an algorithm without), so a new
// algorithm's oracles are one entry here, and no test skips it.
type Oracle struct {
	// LongestWait is the longest RetryAfter that a state written under l,
	// at or before the call's time, may cause for a cost within the
	// limit: the promise core.State makes about parameter changes.
	LongestWait func(l core.Limit) int64
	// Bound is the most units l admits in calls at times from to to
	// (from ≤ to); ok is false when the algorithm bounds no such pair of
	// calls.
	Bound func(l core.Limit, from, to int64) (bound int64, ok bool)
	// RealTimes: Bound holds on the calls' own times. Otherwise it holds
	// on their effective times, the latest time seen so far, as the
	// algorithms read a clock that stepped back.
	RealTimes bool
	// States are states the algorithm writes, with their words at the
	// extremes, for Extremes.
	States func() []core.State
}

// OracleFor returns a's oracle, or an error naming an algorithm that has
// none.
func OracleFor(a core.Algorithm) (Oracle, error) {
	o, ok := oracles[a]
	if !ok || o.LongestWait == nil || o.Bound == nil || o.States == nil {
		return Oracle{}, fmt.Errorf("difftest: algorithm %v has no oracle, or an incomplete one: add it to oracles (internal/testkit/difftest/oracles.go)", a)
	}
	return o, nil
}

// mustOracle is OracleFor for the kit's own generators, which return no
// error: an algorithm without an oracle stops the test that asked.
func mustOracle(a core.Algorithm) Oracle {
	o, err := OracleFor(a)
	if err != nil {
		panic(err)
	}
	return o
}

// oracles holds each algorithm's Oracle.
var oracles = map[core.Algorithm]Oracle{
	core.FixedWindow:   {LongestWait: window, Bound: sameWindow, States: wordStates(core.FixedWindow, false)},
	core.SlidingWindow: {LongestWait: twoWindows, Bound: sameWindow, States: wordStates(core.SlidingWindow, true)},
	core.SlidingLog:    {LongestWait: window, Bound: withinWindow, States: logStates},
	core.TokenBucket:   {LongestWait: fullRefill, Bound: refilled, States: wordStates(core.TokenBucket, false)},
	core.LeakyBucket:   {LongestWait: fullRefill, Bound: refilled, States: wordStates(core.LeakyBucket, false)},
	// GCRA keeps no last-seen time: its bound holds on real times.
	core.GCRA: {LongestWait: fullRefill, Bound: refilled, RealTimes: true, States: wordStates(core.GCRA, false)},
}

// window: a state denies for one window at most.
func window(l core.Limit) int64 { return l.Window }

// twoWindows: the previous window of a sliding window counter still
// weighs in the current one.
func twoWindows(l core.Limit) int64 { return 2 * l.Window }

// fullRefill: ⌈Limit×Window/Rate⌉, a refill from empty to full.
func fullRefill(l core.Limit) int64 {
	r := l.Rate
	if r == 0 {
		r = l.Limit
	}
	c := l.Limit * l.Window
	return (c + r - 1) / r
}

// sameWindow: Limit in one window of the epoch's grid.
func sameWindow(l core.Limit, from, to int64) (int64, bool) {
	return l.Limit, from/l.Window == to/l.Window
}

// withinWindow: Limit in any span shorter than a window.
func withinWindow(l core.Limit, from, to int64) (int64, bool) {
	return l.Limit, to-from < l.Window
}

// refilled: Limit plus what refills in the span, ⌊span×rate/window⌋, in
// 128 bits; no bound past 2^62 units.
func refilled(l core.Limit, from, to int64) (int64, bool) {
	rate := l.Rate
	if rate == 0 {
		rate = l.Limit
	}
	h, lo := bits.Mul64(uint64(to-from), uint64(rate))
	if h >= uint64(l.Window) {
		return 0, false // more than 2^64 units
	}
	q, _ := bits.Div64(h, lo, uint64(l.Window))
	if q > uint64(1<<62) {
		return 0, false
	}
	return l.Limit + int64(q), true
}

// wordStates returns states of a with T and X at the extreme words, and
// with Y at 0 and, when y, at MaxStateValue.
func wordStates(a core.Algorithm, y bool) func() []core.State {
	return func() []core.State {
		words := []int64{0, 1, core.MaxUnits, core.MaxStateValue}
		ys := []int64{0}
		if y {
			ys = append(ys, core.MaxStateValue)
		}
		var states []core.State
		for _, x := range words {
			for _, t := range words {
				for _, y := range ys {
					states = append(states, core.State{Algorithm: a, T: t, X: x, Y: y})
				}
			}
		}
		return states
	}
}

// logStates returns sliding logs: empty, one entry at either end, the
// extreme words, entries at MaxTime.
func logStates() []core.State {
	var states []core.State
	for _, log := range [][]int64{nil, {0}, {core.MaxStateValue}, {0, 1, core.MaxUnits, core.MaxStateValue},
		{core.MaxTime - 1, core.MaxTime, core.MaxTime}} {
		states = append(states, core.State{Algorithm: core.SlidingLog, Log: log})
	}
	return states
}
