package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/migrations"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// build compiles rl-migrate once into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rl-migrate-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "rl-migrate")
		if out, err := exec.Command("go", "build", "-ldflags", "-X github.com/rlcore/rl/internal/request/version.version=v0.0.0-test", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// runBin runs the binary with DATABASE_URL set to env (unset when empty).
func runBin(t *testing.T, bin, env string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if env != "" {
		cmd.Env = append(cmd.Env, "DATABASE_URL="+env)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}

func TestCommand(t *testing.T) {
	bin := build(t)
	u := pgtest.NewDatabase(t)
	// postgresql:// is accepted as well as postgres://.
	u2 := "postgresql://" + strings.TrimPrefix(u, "postgres://")

	// The tests' server URL names the superuser postgres: the commands that
	// run migrations say so on stderr and go on, told to by -allow-superuser
	// (TestCommandSuperuser refuses without it).
	r := runBin(t, bin, u, "-allow-superuser", "up")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("migrated up: version %d\n", migrations.Latest), r.stdout)

	r = runBin(t, bin, u2, "-allow-superuser", "up")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("no change: version %d\n", migrations.Latest), r.stdout)

	r = runBin(t, bin, "", "-database", u, "version")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("%d\n", migrations.Latest), r.stdout)

	r = runBin(t, bin, u, "-allow-superuser", "down", "2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("migrated down: version %d\n", migrations.Latest-2), r.stdout)

	r = runBin(t, bin, u, "-allow-superuser", "goto", fmt.Sprint(migrations.Latest))
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("migrated: version %d\n", migrations.Latest), r.stdout)

	// A dirty version: say how to repair it.
	conn, err := pgx.Connect(context.Background(), u)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), "UPDATE "+migrations.Table+" SET dirty = true")
	require.NoError(t, err)
	r = runBin(t, bin, u, "-allow-superuser", "up")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, fmt.Sprintf("dirty at version %d", migrations.Latest))
	require.Contains(t, r.stderr, fmt.Sprintf(`"rl-migrate force %d" after a failed up`, migrations.Latest-1))
	r = runBin(t, bin, u, "version")
	require.Equal(t, 1, r.code)
	require.Equal(t, fmt.Sprintf("%d (dirty)\n", migrations.Latest), r.stdout)
	r = runBin(t, bin, u, "force", fmt.Sprint(migrations.Latest))
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("forced: version %d\n", migrations.Latest), r.stdout)

	r = runBin(t, bin, u, "-allow-superuser", "down")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "migrated down: version none\n", r.stdout)
	r = runBin(t, bin, u, "-allow-superuser", "down")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "no change: version none\n", r.stdout)
	r = runBin(t, bin, u, "version")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "none\n", r.stdout)
}

func TestCommandErrors(t *testing.T) {
	bin := build(t)
	for _, tc := range []struct {
		name   string
		env    string
		args   []string
		code   int
		stderr string
	}{
		{"no URL", "", []string{"up"}, 1, "bad database URL: empty (set -database or DATABASE_URL)"},
		{"bad scheme", "mysql://u:hunter2@h/db", []string{"up"}, 1, `bad database URL: scheme "mysql"`},
		{"key=value", "host=h dbname=db", []string{"up"}, 1, "bad database URL: no scheme"},
		{"no dbname", "postgres://h:5432", []string{"up"}, 1, "bad database URL: no database name"},
		{"unreachable", "postgres://u:hunter2@127.0.0.1:1/db?sslmode=disable", []string{"up"}, 1,
			"cannot open database postgres://u:xxxxx@127.0.0.1:1/db?sslmode=disable"},
		{"no command", "", nil, 2, "no command"},
		{"unknown command", "", []string{"sideways"}, 2, `unknown command "sideways"`},
		{"down x", "", []string{"down", "x"}, 2, "N must be a positive integer"},
		{"goto", "", []string{"goto"}, 2, "goto takes one argument"},
		{"force x", "", []string{"force", "-2"}, 2, "V must be a version number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runBin(t, bin, tc.env, tc.args...)
			require.Equal(t, tc.code, r.code, "%s%s", r.stdout, r.stderr)
			require.Contains(t, r.stderr, tc.stderr)
			require.NotContains(t, r.stderr+r.stdout, "hunter2", "the password is never printed")
		})
	}

	t.Run("hung server", func(t *testing.T) {
		addr := pgtest.HungServer(t)
		r := runBin(t, bin, "postgres://u:hunter2@"+addr+"/db?sslmode=disable", "-timeout", "1s", "up")
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, "no answer within 1s")
		require.NotContains(t, r.stderr, "hunter2") // the 1s timeout, which must fire, ended it
	})
}

func TestRunHelp(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &out, &errb)
	require.Equal(t, 0, code)
	require.Contains(t, errb.String(), "usage: rl-migrate")
	require.Contains(t, errb.String(), "force V")
}
