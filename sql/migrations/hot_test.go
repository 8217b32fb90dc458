package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/pgtest"
)

// TestHOT: ordinary decisions leave rl.state's indexed columns alone
// (expires_at moves in steps of 2^26 µs, migration 0013), so PostgreSQL
// applies their updates as HOT updates. A database of its own: it reads the
// table's statistics.
func TestHOT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewMigrated(t)
	conn := connect(t, u)
	const t0 = int64(26333 << 26) // a multiple of the grain, in 2026
	for alg := range 6 {
		for i := range int64(20) {
			_, err := conn.Exec(ctx, `SELECT rl.rl_allow_us('hot', rl.algorithm_name($1), 1000, 60000000,
				name => rl.algorithm_name($1), now_us => $2)`, alg+1, t0+i*1000)
			require.NoError(t, err)
		}
	}
	_, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
	require.NoError(t, err)
	var upd, hot int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
		WHERE relid = 'rl.state'::regclass`).Scan(&upd, &hot))
	require.Equal(t, int64(6*19), upd, "the first decision of each limit inserts its row, the others update it")
	t.Logf("HOT updates: %d of %d", hot, upd)
	require.GreaterOrEqual(t, hot*10, upd*9, "HOT updates: %d of %d", hot, upd)
}
