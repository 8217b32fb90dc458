package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/migrations"
)

// TestCommandSuperuser: up, down and goto refuse to run as a superuser,
// naming the risk and the ordinary owner to use instead, and change
// nothing; -allow-superuser runs them, with a warning on stderr. version
// and force run no migration and need no flag.
func TestCommandSuperuser(t *testing.T) {
	bin := build(t)
	u := pgtest.NewDatabase(t) // as the tests' server URL's role, a superuser
	conn, err := pgx.Connect(context.Background(), u)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var su string
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT rolname FROM pg_roles WHERE rolname = current_user AND rolsuper").Scan(&su))

	for _, args := range [][]string{{"up"}, {"goto", "3"}, {"down"}, {"down", "1"}} {
		r := runBin(t, bin, u, args...)
		require.Equal(t, 1, r.code, "%v as a superuser: %s%s", args, r.stdout, r.stderr)
		require.Empty(t, r.stdout)
		for _, want := range []string{
			fmt.Sprintf("refusing to migrate as the superuser %q", su),
			"SECURITY DEFINER function of rl would run with superuser rights",
			"Create an ordinary owner role (no SUPERUSER) that owns the database and migrate as it",
			"ALTER DATABASE app OWNER TO rl_owner",
			`"Installing without a superuser"`,
			"nothing was changed",
			fmt.Sprintf("-allow-superuser runs %s as a superuser anyway", args[0]),
		} {
			require.Contains(t, r.stderr, want, "%v", args)
		}
	}
	r := runBin(t, bin, u, "version")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "none\n", r.stdout, "a refused up migrated nothing")
	var schema *string
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT to_regnamespace('rl')::text").Scan(&schema))
	require.Nil(t, schema, "a refused up created schema rl")

	r = runBin(t, bin, u, "-allow-superuser", "up")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("migrated up: version %d\n", migrations.Latest), r.stdout)
	require.Contains(t, r.stderr, fmt.Sprintf("rl-migrate: warning: running as the superuser %q (-allow-superuser)", su))
	require.Contains(t, r.stderr, "SECURITY DEFINER function of rl will run with superuser rights")
	require.Contains(t, r.stderr, "the owner of schema rl should be an ordinary role")

	r = runBin(t, bin, u, "force", fmt.Sprint(migrations.Latest))
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stderr, "force runs no migration: no check")
}

// TestCommandOrdinaryOwner: as an ordinary role that owns the database
// (the documented way) up, down and goto say nothing on stderr.
func TestCommandOrdinaryOwner(t *testing.T) {
	bin := build(t)
	_, owner := pgtest.NewOwnedDatabase(t)
	for _, c := range []struct {
		args []string
		out  string
	}{
		{[]string{"up"}, fmt.Sprintf("migrated up: version %d\n", migrations.Latest)},
		{[]string{"down", "1"}, fmt.Sprintf("migrated down: version %d\n", migrations.Latest-1)},
		{[]string{"goto", fmt.Sprint(migrations.Latest)}, fmt.Sprintf("migrated: version %d\n", migrations.Latest)},
		{[]string{"-allow-superuser", "up"}, fmt.Sprintf("no change: version %d\n", migrations.Latest)},
	} {
		r := runBin(t, bin, owner, c.args...)
		require.Equal(t, 0, r.code, "%v: %s", c.args, r.stderr)
		require.Equal(t, c.out, r.stdout, "%v", c.args)
		require.Empty(t, r.stderr, "%v as an ordinary owner", c.args)
	}
}
