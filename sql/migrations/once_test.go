package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
)

// TestEvalOnce: the common calls evaluate the algorithm step (rl._eval)
// once per decision (migration 0015; 0014's take on one limit evaluated it
// three times), counted by
// PostgreSQL's function statistics (track_functions) within a transaction:
// a take and a peek on an existing row through every single-call function,
// and batches of several keys and of one key.
func TestEvalOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const now = int64(1767225600000000)
	for _, a := range core.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			key := "once:" + a.String()
			keys := []string{key + ":1", key + ":2", key + ":3"}
			for _, k := range append([]string{key}, keys...) { // the rows exist: the common call
				_, err := db.Exec(ctx, `SELECT rl.rl_allow_us($1, $2, 1000, 60000000, now_us => $3)`, k, a.String(), now)
				require.NoError(t, err)
			}
			calls := []struct {
				name  string
				sql   string
				evals int64
			}{
				{"rl_allow", `SELECT allowed FROM rl.rl_allow($1, $2, 1000, '1 minute')`, 1},
				{"rl_allow_us", `SELECT allowed FROM rl.rl_allow_us($1, $2, 1000, 60000000)`, 1},
				{"rl_peek", `SELECT allowed FROM rl.rl_peek($1, $2, 1000, '1 minute')`, 1},
				{"rl_peek_us", `SELECT allowed FROM rl.rl_peek_us($1, $2, 1000, 60000000)`, 1},
				{"rl_decide_multi", `SELECT allowed FROM rl.rl_decide_multi($1, '{default}', ARRAY[rl.algorithm_id($2)],
					'{1000}', '{60000000}', '{0}')`, 1},
				{"rl_decide_multi peek", `SELECT allowed FROM rl.rl_decide_multi($1, '{default}', ARRAY[rl.algorithm_id($2)],
					'{1000}', '{60000000}', '{0}', take => false)`, 1},
				{"rl_decide_batch, three keys", `SELECT allowed FROM rl.rl_decide_batch(ARRAY[$1 || ':1', $1 || ':2', $1 || ':3'],
					'{default,default,default}', array_fill(rl.algorithm_id($2), ARRAY[3]), '{1000,1000,1000}',
					'{60000000,60000000,60000000}', '{0,0,0}')`, 3},
				{"rl_decide_batch, one key", `SELECT allowed FROM rl.rl_decide_batch(ARRAY[$1, $1, $1],
					'{default,default,default}', array_fill(rl.algorithm_id($2), ARRAY[3]), '{1000,1000,1000}',
					'{60000000,60000000,60000000}', '{0,0,0}')`, 3},
			}
			for _, c := range calls {
				tx, err := db.Begin(ctx)
				require.NoError(t, err)
				_, err = tx.Exec(ctx, `SET LOCAL track_functions = 'pl'`)
				require.NoError(t, err)
				before := evals(t, tx)
				rows, err := tx.Query(ctx, c.sql, key, a.String())
				require.NoError(t, err)
				n := 0
				for rows.Next() {
					var allowed bool
					require.NoError(t, rows.Scan(&allowed))
					require.True(t, allowed, c.name)
					n++
				}
				require.NoError(t, rows.Err())
				require.Equal(t, c.evals, int64(n), c.name)
				require.Equal(t, c.evals, evals(t, tx)-before, "%s: rl._eval calls", c.name)
				require.NoError(t, tx.Commit(ctx))
			}
		})
	}
}

// evals returns the calls of rl._eval counted in tx's session so far.
func evals(t *testing.T, tx pgx.Tx) int64 {
	t.Helper()
	var n int64
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT coalesce(sum(calls), 0)::bigint
		FROM pg_stat_xact_user_functions WHERE funcid = 'rl._eval'::regproc`).Scan(&n))
	return n
}
