package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/util/flagdoc"
)

// TestConfigReference: docs/reference/filter-configuration.md is the page
// the configuration's types and their comments give.
func TestConfigReference(t *testing.T) {
	want, err := configPage("..")
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join("..", configReference))
	require.NoError(t, err, "run %s", flagdoc.Command)
	require.Equal(t, want, string(got), "%s is stale: run %s", configReference, flagdoc.Command)
}
