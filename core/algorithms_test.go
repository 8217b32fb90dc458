package core_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/rlcore/rl/core"
)

// TestAlgorithms: the one list of algorithms (core.Algorithms) is every
// valid number, each name of each parses back to it, and the properties
// it gives agree with what Limit.Validate enforces.
func TestAlgorithms(t *testing.T) {
	algs := core.Algorithms()
	// Numbered from 1 with no gap (TestAlgorithmSwitchesExhaustive checks
	// that every Algorithm constant is among them).
	for i, a := range algs {
		if a != core.Algorithm(i+1) || !a.Valid() {
			t.Fatalf("Algorithms() = %v: want 1 to %d", algs, len(algs))
		}
	}
	seen := map[string]core.Algorithm{}
	for _, a := range algs {
		names := a.Names()
		if names[0] != a.String() || !slices.Contains(names, a.ShortName()) {
			t.Errorf("%v: names %q, short %q", a, names, a.ShortName())
		}
		for _, n := range names {
			if b, ok := seen[n]; ok {
				t.Errorf("%q names %v and %v", n, a, b)
			}
			seen[n] = a
			if got, err := core.ParseAlgorithm(n); err != nil || got != a {
				t.Errorf("ParseAlgorithm(%q) = %v, %v", n, got, err)
			}
		}
		// Windowed: a rate is refused; otherwise accepted.
		l := core.Limit{Algorithm: a, Limit: 10, Window: 1_000_000, Rate: 5}
		if err := l.Validate(); errors.Is(err, core.ErrRate) != a.Windowed() {
			t.Errorf("%v: Windowed %v, a rate: %v", a, a.Windowed(), err)
		}
		// UnitsBounded: limit × window past MaxUnits is ErrUnits.
		l = core.Limit{Algorithm: a, Limit: 4096, Window: core.MaxWindow}
		if err := l.Validate(); errors.Is(err, core.ErrUnits) != a.UnitsBounded() {
			t.Errorf("%v: UnitsBounded %v, limit × window past MaxUnits: %v", a, a.UnitsBounded(), err)
		}
	}
	for _, a := range []core.Algorithm{0, core.Algorithm(len(algs) + 1), -1} {
		if a.Valid() || a.String() != "unknown" || a.Names() != nil || a.Windowed() || a.UnitsBounded() {
			t.Errorf("%d reads as valid", a)
		}
		if err := (core.Limit{Algorithm: a, Limit: 1, Window: 1}).Validate(); !errors.Is(err, core.ErrAlgorithm) {
			t.Errorf("%d: %v", a, err)
		}
	}
	if _, err := core.ParseAlgorithm("tokn"); err != core.ErrAlgorithm {
		t.Error(err)
	}
}
