package wasm_test

import (
	"math/rand/v2"
	"testing"

	"github.com/rlcore/rl/internal/testkit/difftest"
	"github.com/rlcore/rl/tests/vectors/vectorstest"
)

// The differential tests run the same sequences (package internal/testkit/difftest)
// through the native core and the module and require identical decisions,
// indexes, errors and states, down to the nil-ness, length, capacity,
// contents and backing array of every sliding log (difftest.Runner.Exact).

func exact() difftest.Runner {
	return difftest.Runner{Exact: true, Workers: 2, Deciders: []difftest.Decider{
		{Name: "native", Decider: vectorstest.Native{}},
		{Name: "wasm", Decider: pool},
	}}
}

// TestDifferential is the seeded version that runs with every go test. A
// failure prints the sequence and how to replay it (RL_DIFF_SEED,
// RL_DIFF_N).
func TestDifferential(t *testing.T) {
	n := 10000
	if testing.Short() || raceEnabled {
		n = 1500
	}
	r := exact()
	t.Log(r.Check(t, difftest.Config{}, 20260101, n))
}

// TestExtremes decides every algorithm at its parameter bounds against
// states at the bounds (difftest.Extremes), natively and in the module.
func TestExtremes(t *testing.T) {
	r := exact()
	stats := r.CheckSequences(t, difftest.Extremes())
	t.Logf("%d sequences, %d steps", stats.Sequences, stats.Steps)
}

// FuzzDifferential: go test -fuzz=FuzzDifferential ./wasm
func FuzzDifferential(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 32 {
		b := make([]byte, 16+rng.IntN(400))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0, 3, 0, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := exact()
		if d := r.Run(difftest.FromBytes(data, difftest.Config{})); d != nil {
			t.Fatal(d)
		}
	})
}
