package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/util/flagdoc"
)

// TestFlagsReference: docs/reference/rl-wasm-host.md is the page the
// command's own flag definitions give (run without DATABASE_URL, the one
// default read from the environment).
func TestFlagsReference(t *testing.T) {
	cmd := exec.Command(binary(t), flagdoc.Arg)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "DATABASE_URL=") })
	out, err := cmd.Output()
	require.NoError(t, err)
	page, err := os.ReadFile(filepath.Join("..", "..", flagdoc.Page("rl-wasm-host")))
	require.NoError(t, err, "run %s", flagdoc.Command)
	require.Equal(t, string(out), string(page), "%s is stale: run %s", flagdoc.Page("rl-wasm-host"), flagdoc.Command)
}
