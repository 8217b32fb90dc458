package migrations_test

import (
	"testing"

	"github.com/rlcore/rl/internal/testkit/difftest"
	"github.com/rlcore/rl/internal/testkit/sqldecider"
	"github.com/rlcore/rl/tests/vectors/vectorstest"
)

// sqlRunner holds rl.decide and rl.decide_all to the Go core.
func sqlRunner() difftest.Runner {
	return difftest.Runner{Workers: 4, Deciders: []difftest.Decider{
		{Name: "native", Decider: vectorstest.Native{}},
		{Name: "sql", Decider: sqldecider.New(db)},
	}}
}

// TestDifferential runs random sequences (package internal/testkit/difftest)
// through the Go core and through rl.decide / rl.decide_all and requires
// identical decisions, errors and states at every step. A failure prints
// the sequence and how to replay it (RL_DIFF_SEED, RL_DIFF_N).
func TestDifferential(t *testing.T) {
	t.Parallel()
	n := 1500
	if testing.Short() || raceEnabled {
		n = 500
	}
	r := sqlRunner()
	t.Log(r.Check(t, difftest.Config{}, 20260101, n))
}

// TestExtremes decides every algorithm at its parameter bounds against
// states at the bounds (difftest.Extremes), in Go and in SQL.
func TestExtremes(t *testing.T) {
	t.Parallel()
	r := sqlRunner()
	stats := r.CheckSequences(t, difftest.Extremes())
	t.Logf("%d sequences, %d steps", stats.Sequences, stats.Steps)
}
