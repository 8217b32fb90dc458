package difftest_test

import (
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/difftest"
)

// TestOracles: every algorithm has a complete oracle, whose states are its
// own and whose bounds hold a fresh limit's first calls: a longest wait of
// at least a µs, and the whole limit admitted at one instant.
func TestOracles(t *testing.T) {
	for _, a := range core.Algorithms() {
		o, err := difftest.OracleFor(a)
		if err != nil {
			t.Error(err)
			continue
		}
		states := o.States()
		if len(states) == 0 {
			t.Errorf("%v: the oracle gives no states", a)
		}
		for _, s := range states {
			if s.Algorithm != a {
				t.Errorf("%v: the oracle gives a state of %v", a, s.Algorithm)
			}
		}
		l := core.Limit{Algorithm: a, Limit: 3, Window: 1_000_000}
		if w := o.LongestWait(l); w < 1 {
			t.Errorf("%v: longest wait %d", a, w)
		}
		if b, ok := o.Bound(l, difftest.Epoch2026, difftest.Epoch2026); !ok || b < l.Limit {
			t.Errorf("%v: bound at one instant %d, %v: want at least the limit", a, b, ok)
		}
	}
	if _, err := difftest.OracleFor(core.Algorithm(len(core.Algorithms()) + 1)); err == nil {
		t.Error("an algorithm outside the table has an oracle")
	}
}
