package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/migrations"
)

// TestShardsAndRouter: -shards migrates every shard; router installs the
// PL/Proxy router over them, mapping its functions' owner alone to the
// shard login, and a decision then runs through it.
func TestShardsAndRouter(t *testing.T) {
	bin := build(t)
	s0, s1, r := pgtest.NewDatabase(t), pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	shards := s0 + "," + s1

	res := runBin(t, bin, r, "-shards", shards, "-allow-superuser", "up")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, fmt.Sprintf("shard 0 (%s): migrated up: version %d\nshard 1 (%s): migrated up: version %d\n",
		s0, migrations.Latest, s1, migrations.Latest), res.stdout)
	res = runBin(t, bin, "", "-shards", shards, "version")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, fmt.Sprintf("shard 0 (%s): %d\nshard 1 (%s): %d\n", s0, migrations.Latest, s1, migrations.Latest), res.stdout)
	res = runBin(t, bin, "", "-shards", shards, "-allow-superuser", "up")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, fmt.Sprintf("shard 1 (%s): no change: version %d\n", s1, migrations.Latest))

	res = runBin(t, bin, r, "-shards", shards, "-partitions", "4", "router")
	require.Equal(t, 0, res.code, res.stderr)
	require.True(t, strings.HasPrefix(res.stdout, "router ready: 4 partitions on 2 shards (server rl_shards)\n  p0: dbname="), res.stdout)
	require.Equal(t, 5, strings.Count(res.stdout, "\n"))

	conn, err := pgx.Connect(context.Background(), r)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var allowed bool
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT allowed FROM rl.rl_allow('user:1', 'gcra', 1, '1 minute')").Scan(&allowed))
	require.True(t, allowed)
	// The owner of the router's functions alone reaches the shards.
	var mapped []string
	require.NoError(t, conn.QueryRow(context.Background(),
		"SELECT array_agg(usename::text) FROM pg_user_mappings WHERE srvname = 'rl_shards'").Scan(&mapped))
	require.Equal(t, []string{"postgres"}, mapped)

	// Again: the same partitions, repointed; another count is refused.
	res = runBin(t, bin, "", "-database", r, "-shards", s1+","+s0, "-partitions", "4", "router")
	require.Equal(t, 0, res.code, res.stderr)
	res = runBin(t, bin, r, "-shards", shards, "-partitions", "8", "router")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "has 4 partitions, not 8")
	// Never into a shard.
	res = runBin(t, bin, s0, "-shards", shards, "router")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "it is a shard or a single node")
}

func TestShardsErrors(t *testing.T) {
	bin := build(t)
	good := pgtest.NewDatabase(t)
	down := "postgres://u:hunter2@127.0.0.1:1/db?sslmode=disable"
	for _, tc := range []struct {
		name   string
		env    string
		args   []string
		code   int
		stderr string
	}{
		{"router without shards", good, []string{"router"}, 2, "router needs -shards"},
		{"router argument", good, []string{"-shards", good, "router", "x"}, 2, "router takes no argument"},
		{"partitions without router", "", []string{"-shards", good, "-partitions", "4", "up"}, 2, "-partitions is for the router command"},
		{"database and shards", "", []string{"-database", good, "-shards", good, "up"}, 2, "give -database or -shards, not both"},
		{"empty shard", "", []string{"-shards", good + ",", "up"}, 2, "an empty URL"},
		{"not a power of two", good, []string{"-shards", good + "," + good, "-partitions", "3", "router"}, 1, "want a power of two"},
		{"router unreachable", "postgres://u:hunter2@127.0.0.1:1/r?sslmode=disable", []string{"-shards", good, "router"}, 1,
			"router postgres://u:xxxxx@127.0.0.1:1/r?sslmode=disable"},
		{"shard passwords differ", good, []string{"-shards", down + ",postgres://u:s3cret@h/db", "router"}, 1, "shard 1 names another user or password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runBin(t, bin, tc.env, tc.args...)
			require.Equal(t, tc.code, r.code, "%s%s", r.stdout, r.stderr)
			require.Contains(t, r.stderr, tc.stderr)
			require.NotContains(t, r.stderr+r.stdout, "hunter2", "the password is never printed")
		})
	}

	// A shard that fails does not stop the others; the status says it.
	r := runBin(t, bin, "", "-timeout", "2s", "-shards", down+","+good, "-allow-superuser", "up")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stdout, "shard 0 (postgres://u:xxxxx@127.0.0.1:1/db?sslmode=disable): failed\n")
	require.Contains(t, r.stdout, fmt.Sprintf("shard 1 (%s): migrated up: version %d\n", good, migrations.Latest))
	require.Contains(t, r.stderr, "cannot open database postgres://u:xxxxx@127.0.0.1:1/db")
	require.NotContains(t, r.stderr+r.stdout, "hunter2")
}
