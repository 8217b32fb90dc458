package wasm_test

import (
	"testing"

	"github.com/rlcore/rl/tests/vectors/vectorstest"
)

// TestVectors runs every conformance vector file through the module: with
// the single-limit calls (exports rl_take/rl_peek) for one limit, as the
// vectors' README prescribes, and with TakeAll/PeekAll for every step
// (exports rl_take_all/rl_peek_all), the path stores use.
func TestVectors(t *testing.T) {
	t.Run("single", func(t *testing.T) { vectorstest.Run(t, pool, false) })
	t.Run("all", func(t *testing.T) { vectorstest.Run(t, pool, true) })
}
