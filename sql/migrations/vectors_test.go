package migrations_test

import (
	"testing"

	"github.com/rlcore/rl/internal/testkit/sqldecider"
	"github.com/rlcore/rl/tests/vectors/vectorstest"
)

// TestVectorsPure runs every conformance vector through rl.decide (one
// limit) and rl.decide_all (several), and every step through rl.decide_all.
func TestVectorsPure(t *testing.T) {
	t.Parallel()
	d := sqldecider.New(db)
	t.Run("single", func(t *testing.T) { vectorstest.Run(t, d, false) })
	t.Run("all", func(t *testing.T) { vectorstest.Run(t, d, true) })
}
