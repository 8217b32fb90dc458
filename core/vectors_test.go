package core_test

import (
	"testing"

	"github.com/rlcore/rl/tests/vectors/vectorstest"
)

// TestVectors runs every conformance vector file against the core, through
// Take/Peek and through TakeAll/PeekAll.
func TestVectors(t *testing.T) {
	t.Run("single", func(t *testing.T) { vectorstest.Run(t, vectorstest.Native{}, false) })
	t.Run("all", func(t *testing.T) { vectorstest.Run(t, vectorstest.Native{}, true) })
}
