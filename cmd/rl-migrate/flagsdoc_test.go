package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/util/flagdoc"
)

// TestFlagsReference: docs/reference/rl-migrate.md is the page the
// command's own flag definitions give.
func TestFlagsReference(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{flagdoc.Arg}, func(string) string { return "" }, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	page, err := os.ReadFile(filepath.Join("..", "..", flagdoc.Page("rl-migrate")))
	require.NoError(t, err, "run %s", flagdoc.Command)
	require.Equal(t, out.String(), string(page), "%s is stale: run %s", flagdoc.Page("rl-migrate"), flagdoc.Command)
}
