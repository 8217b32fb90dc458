package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/migrations"
)

// TestPromisesUpDown: 0008 on a database in use at 7 and back. GCRA rows
// written at 7 (y = 0) are read as before at 8; rows written at 8 carry
// their admission time in y, which 7 would report as corrupt (RL008), so
// the down migration clears it and 7 decides them again.
func TestPromisesUpDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewDatabase(t)
	m, err := migrations.Open(ctx, u)
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Goto(ctx, 7))
	conn := connect(t, u)
	const t0 = int64(1767225600000000)
	take := func(key string, now int64) (allowed bool, retry int64) {
		t.Helper()
		require.NoError(t, conn.QueryRow(ctx,
			`SELECT allowed, retry_after_us FROM rl.rl_allow_us($1, 'gcra', 2, 1000000, now_us => $2)`,
			key, now).Scan(&allowed, &retry))
		return allowed, retry
	}
	ok, _ := take("at7", t0)
	require.True(t, ok)
	require.NoError(t, m.Goto(ctx, 8))
	ok, _ = take("at7", t0+1)
	require.True(t, ok, "a state of 7 is read at 8")
	ok, retry := take("at7", t0+2)
	require.False(t, ok)
	require.Equal(t, int64(500_000-2), retry)
	ok, _ = take("at8", t0)
	require.True(t, ok)
	var y int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT y FROM rl.state WHERE key = 'at8'`).Scan(&y))
	require.Equal(t, t0, y, "8 keeps the admission time")

	require.NoError(t, m.Goto(ctx, 7))
	require.NoError(t, conn.QueryRow(ctx, `SELECT y FROM rl.state WHERE key = 'at8'`).Scan(&y))
	require.Zero(t, y, "down clears it")
	ok, _ = take("at8", t0+1)
	require.True(t, ok, "7 decides a state written at 8")
	ok, _ = take("at8", t0+2)
	require.False(t, ok)
	require.NoError(t, m.Goto(ctx, 8))
}
