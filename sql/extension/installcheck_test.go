package extension_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/extension"
)

// installHint says how to put the files of extension.FS where the server
// reads them.
const installHint = "make -C sql/extension install (as root; PG_CONFIG=... for another server than pg_config's)"

// pgConfig returns the pg_config to use: $PG_CONFIG, else the one on PATH.
// It fails t when there is none: PGXS (postgresql-server-dev-15 on Debian)
// is needed to install and test the extension.
func pgConfig(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL's pg_config and PGXS: not run in the quick tier (go test -short)")
	}
	if p := os.Getenv("PG_CONFIG"); p != "" {
		return p
	}
	p, err := exec.LookPath("pg_config")
	if err != nil {
		t.Fatalf("no pg_config on PATH (set PG_CONFIG; on Debian install postgresql-server-dev-15): %v", err)
	}
	return p
}

// TestInstallcheck runs make installcheck: pg_regress runs test/sql/*.sql
// against the server of DATABASE_URL (as its role, a superuser) in a
// database of its own, and fails when any output differs from
// test/expected/*.out, printing regression.diffs. The server must hold the
// files of extension.FS (make install); it fails, saying so, when it holds
// others.
func TestInstallcheck(t *testing.T) {
	ctx := context.Background()
	pgc := pgConfig(t)
	requireInstalled(t, pgc)

	u, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatalf("DATABASE_URL: %v", err)
	}
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatalf("PostgreSQL at %s is unreachable (set DATABASE_URL): %v", u.Redacted(), err)
	}
	defer conn.Close(ctx)
	// The tests create the cluster-wide roles regress_rl_owner and
	// regress_rl_superuser: one installcheck at a time per cluster.
	const lockKey = 0x726c5f7265677265 // "rl_regre"
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(lockKey)); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(lockKey))

	b := make([]byte, 6)
	_, _ = rand.Read(b)
	db := "rltest_" + hex.EncodeToString(b) + "_regress"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, pgtest.URL())
		if err != nil {
			t.Errorf("drop database %s: %v", db, err)
			return
		}
		defer c.Close(ctx)
		// The database first (the roles own objects and privileges in it),
		// then the roles a failed run may have left.
		for _, q := range []string{
			"DROP DATABASE IF EXISTS " + db + " WITH (FORCE)",
			"DROP ROLE IF EXISTS regress_rl_owner",
			"DROP ROLE IF EXISTS regress_rl_superuser",
		} {
			if _, err := c.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})

	out := t.TempDir()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "installcheck",
		"PG_CONFIG="+pgc, "CONTRIB_TESTDB="+db, "REGRESS_OUTPUTDIR="+out)
	cmd.Env = append(os.Environ(), libpqEnv(u)...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		diffs, _ := os.ReadFile(filepath.Join(out, "regression.diffs"))
		t.Fatalf("make installcheck: %v\n%s\nregression.diffs:\n%s", err, log.String(), diffs)
	}
	if !strings.Contains(log.String(), "tests passed") {
		t.Fatalf("make installcheck succeeded without saying the tests passed:\n%s", log.String())
	}
}

// libpqEnv returns the PG* variables pg_regress and psql read for the
// server and role of u.
func libpqEnv(u *url.URL) []string {
	env := []string{"PGHOST=" + u.Hostname()}
	if p := u.Port(); p != "" {
		env = append(env, "PGPORT="+p)
	}
	if name := u.User.Username(); name != "" {
		env = append(env, "PGUSER="+name)
	}
	if pw, ok := u.User.Password(); ok {
		env = append(env, "PGPASSWORD="+pw)
	}
	if m := u.Query().Get("sslmode"); m != "" {
		env = append(env, "PGSSLMODE="+m)
	}
	return env
}

// requireInstalled fails t unless the server's share directory holds the
// control file and scripts of extension.FS, byte for byte: installcheck
// tests what is installed.
func requireInstalled(t *testing.T, pgc string) {
	t.Helper()
	out, err := exec.Command(pgc, "--sharedir").Output()
	if err != nil {
		t.Fatalf("%s --sharedir: %v", pgc, err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "extension")
	names, err := fs.Glob(extension.FS, "rl*")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		want, err := fs.ReadFile(extension.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s in %s is missing or not the file of extension.FS: %s", name, dir, installHint)
		}
	}
}
