package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/tests/vectors"
)

// TestVectorsPure runs every conformance vector through rl.decide and
// rl.decide_all.
func TestVectorsPure(t *testing.T) {
	t.Parallel()
	files, err := vectors.Load()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 7)
	steps := 0
	for _, f := range files {
		got, err := runPure(context.Background(), f.Cases)
		require.NoError(t, err, f.Name)
		for i, c := range f.Cases {
			checkCase(t, f.Name+"/"+c.ID, c, got[i])
			steps += len(c.Steps)
		}
	}
	t.Logf("%d files, %d steps", len(files), steps)
}
