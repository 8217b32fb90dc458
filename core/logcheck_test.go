package core

import (
	"math"
	"testing"
)

// TestSlidingLogCheckWords holds the branch-free check of a stored log to
// its definition (ascending, every entry within [0, MaxStateValue]) on
// every log of up to four entries drawn from the values at the edges of
// int64 arithmetic, where a wrapped subtraction could hide an entry.
func TestSlidingLogCheckWords(t *testing.T) {
	edges := []int64{
		math.MinInt64, math.MinInt64 + 1, -MaxStateValue - 1, -MaxStateValue, -MaxStateValue + 1,
		-1, 0, 1, 2, MaxStateValue - 1, MaxStateValue, MaxStateValue + 1, math.MaxInt64 - 1, math.MaxInt64,
	}
	want := func(log []int64) bool {
		prev := int64(0)
		for _, e := range log {
			if e < prev || e > MaxStateValue {
				return false
			}
			prev = e
		}
		return true
	}
	var log []int64
	var walk func(depth int)
	walk = func(depth int) {
		s := State{Algorithm: SlidingLog, Log: log}
		if got := (algSlidingLog{}).checkWords(&s) == 0; got != want(log) {
			t.Fatalf("checkWords(%v) accepts = %v, want %v", log, got, want(log))
		}
		if depth == 4 {
			return
		}
		for _, e := range edges {
			log = append(log, e)
			walk(depth + 1)
			log = log[:len(log)-1]
		}
	}
	walk(0)
}
