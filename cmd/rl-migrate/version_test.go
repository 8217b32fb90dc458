package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/sql/extension"
	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/wasm"
)

// -version needs no database and prints the module version (stamped by go
// build from the checkout, else the test build's -ldflags -X), the commit
// and the interface versions, one line each.
func TestVersion(t *testing.T) {
	bin := build(t)
	r := runBin(t, bin, "", "-version")
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 7, r.stdout)
	info, err := exec.Command("go", "version", "-m", bin).Output()
	require.NoError(t, err)
	want := "v0.0.0-test"
	if m := regexp.MustCompile(`(?m)^\tmod\t\S+\t(\S+)`).FindSubmatch(info); m != nil && string(m[1]) != "(devel)" {
		want = string(m[1])
	}
	require.Equal(t, "rl-migrate "+want, lines[0])
	require.Regexp(t, `^commit: ([0-9a-f]{40}|unknown)$`, lines[1])
	require.Regexp(t, `^modified: (true|false|unknown)$`, lines[2])
	require.Regexp(t, `^go: go1\.`, lines[3])
	require.Equal(t, []string{
		fmt.Sprintf("schema: %d", migrations.Latest),
		fmt.Sprintf("extension: %d", extension.Version),
		fmt.Sprintf("wasm-abi: %d", wasm.ABIVersion),
	}, lines[4:])

	r = runBin(t, bin, "", "-version", "up")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "-version takes no command")
}
