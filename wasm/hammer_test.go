package wasm_test

import (
	"testing"

	"github.com/rlcore/rl/internal/testkit/difftest"
	"github.com/rlcore/rl/tests/vectors/vectorstest"
	"github.com/rlcore/rl/wasm"
)

// TestHammer runs 16 goroutines through one pool of at most 3 instances,
// each driving the module and the native core through differential
// sequences of its own (difftest, Exact), and requires the same answers
// throughout (a trap is a divergence) from a pool that stays within its
// bound and discards no instance. Run it with -race.
func TestHammer(t *testing.T) {
	p := newPool(t, wasm.Config{MaxInstances: 3})
	n := 500
	if testing.Short() {
		n = 100
	}
	r := difftest.Runner{Exact: true, Workers: 16, Deciders: []difftest.Decider{
		{Name: "native", Decider: vectorstest.Native{}},
		{Name: "wasm", Decider: p},
	}}
	stats := r.Check(t, difftest.Config{}, 99, n)
	st := p.Stats()
	if st.Instances > 3 || st.Discarded != 0 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("%d calls, pool %+v", stats.Steps, st)
}
