package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/await"

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
			key := uniqueKey("once:" + a.String())
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

// TestEvalOnceWaiter: a take that waits for the row while another decision
// writes it decides again on the row's latest version (migration 0015: its
// first decision, on the row as its snapshot had it, is stale), and its
// decision is the core's after the other one, for every algorithm (the
// leaky bucket's delay included): the path of a hot key's waiters, where
// rl._eval runs four times.
func TestEvalOnceWaiter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const t0 = int64(1767225600000000)
	for _, a := range core.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			key := uniqueKey("waiter:" + a.String())
			l := core.Limit{Algorithm: a, Limit: 10, Window: 1_000_000}
			take := `SELECT allowed, lim, remaining, reset_after_us, retry_after_us, delay_us, next_after_us
				FROM rl.rl_allow_us($1, $2, 10, 1000000, 2, now_us => $3)`
			var d core.Decision
			scan := func(r pgx.Row) error {
				return r.Scan(&d.Allowed, &d.Limit, &d.Remaining, &d.ResetAfter, &d.RetryAfter, &d.Delay, &d.NextAfter)
			}
			require.NoError(t, scan(db.QueryRow(ctx, take, key, a.String(), t0))) // the row exists
			holder, err := db.Begin(ctx)
			require.NoError(t, err)
			defer holder.Rollback(ctx)
			require.NoError(t, scan(holder.QueryRow(ctx, take, key, a.String(), t0+1000)))

			waiter, err := db.Acquire(ctx)
			require.NoError(t, err)
			defer waiter.Release()
			var pid int32
			require.NoError(t, waiter.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
			type result struct {
				d     core.Decision
				evals int64
				err   error
			}
			done := make(chan result, 1)
			go func() {
				var r result
				defer func() { done <- r }()
				tx, err := waiter.Begin(ctx)
				if r.err = err; err != nil {
					return
				}
				defer tx.Rollback(ctx)
				if _, r.err = tx.Exec(ctx, `SET LOCAL track_functions = 'pl'`); r.err != nil {
					return
				}
				var before, after int64
				q := `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_xact_user_functions WHERE funcid = 'rl._eval'::regproc`
				if r.err = tx.QueryRow(ctx, q).Scan(&before); r.err != nil {
					return
				}
				if r.err = tx.QueryRow(ctx, take, key, a.String(), t0+2000).Scan(&r.d.Allowed, &r.d.Limit, &r.d.Remaining,
					&r.d.ResetAfter, &r.d.RetryAfter, &r.d.Delay, &r.d.NextAfter); r.err != nil {
					return
				}
				if r.err = tx.QueryRow(ctx, q).Scan(&after); r.err != nil {
					return
				}
				r.evals = after - before
				r.err = tx.Commit(ctx)
			}()
			await.Until(t, "the waiter to wait for the row", func() bool {
				var waiting bool
				err := db.QueryRow(ctx, `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity
					WHERE pid = $1`, pid).Scan(&waiting)
				return err == nil && waiting
			})
			require.NoError(t, holder.Commit(ctx))
			got := <-done
			require.NoError(t, got.err)

			s := core.State{Log: make([]int64, 0, 10)}
			var want core.Decision
			for _, now := range []int64{t0, t0 + 1000, t0 + 2000} {
				want, s, err = core.Take(l, s, now, 2)
				require.NoError(t, err)
			}
			require.Equal(t, want, got.d)
			require.True(t, got.d.Allowed)
			require.Equal(t, int64(4), got.evals, "rl._eval on the snapshot, then in WHERE, SET and for the decision")
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
