package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/await"

	"github.com/rlcore/rl/internal/testkit/pgtest"
)

// TestExpire runs in a database of its own: rl_expire sweeps the whole table.
func TestExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewMigrated(t)
	conn := connect(t, u)
	_, err := conn.Exec(ctx, "SET synchronous_commit = off")
	require.NoError(t, err)
	count := func() int64 {
		var n int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM rl.state`).Scan(&n))
		return n
	}
	expire := func(now int64, batch any) int64 {
		var n int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT rl.rl_expire($1, $2)`, now, batch).Scan(&n))
		return n
	}
	const t0 = int64(1767225600000000)
	// 100 idle-soon keys (1 s windows) and 10 live ones (1 hour).
	_, err = conn.Exec(ctx, `SELECT rl.rl_allow_us('idle:' || i, 'token_bucket', 10, 1000000, now_us => $1)
		FROM generate_series(1, 100) i`, t0)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT rl.rl_allow_us('live:' || i, 'sliding_window', 10, 3600000000, now_us => $1)
		FROM generate_series(1, 10) i`, t0)
	require.NoError(t, err)
	require.Equal(t, int64(110), count())
	require.Zero(t, expire(t0, nil), "nothing is idle yet")
	// expires_at is a bound: the time the state is fresh again rounded up
	// to a multiple of 2^26 µs (about 67 s). Not a microsecond before.
	idle := expiresAt(t0, 100_000) // a token back in 100 ms: fresh again
	require.Zero(t, expire(idle-1, nil), "nothing is deleted before its bound")
	require.Equal(t, int64(40), expire(idle, 40), "batch bounds one call")
	require.Equal(t, int64(60), expire(idle, nil))
	require.Equal(t, int64(10), count())
	var live int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM rl.state WHERE key LIKE 'live:%'`).Scan(&live))
	require.Equal(t, int64(10), live)

	// An expired row decides exactly like a fresh one: expiry loses nothing.
	var remaining int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT remaining FROM rl.rl_peek_us('idle:1', 'token_bucket', 10, 1000000, 0, 0, 'default', $1)`,
		idle).Scan(&remaining))
	require.Equal(t, int64(10), remaining)

	// A row locked by a decision in flight is skipped, without waiting.
	_, err = conn.Exec(ctx, `SELECT rl.rl_allow_us('locked', 'fixed', 1, 1000000, now_us => $1)`, t0)
	require.NoError(t, err)
	other := connect(t, u)
	tx, err := other.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM rl.state WHERE key = 'locked' FOR UPDATE`)
	require.NoError(t, err)
	later := t0 + 3_600_000_000*2 + expiryGrain // the live rows' windows, and the grain
	// The lock is held until the rollback below: an expiry that waited
	// for it would be seen waiting, and never answer.
	type answer struct {
		n   int64
		err error
	}
	swept := make(chan answer, 1)
	go func() {
		var a answer
		a.err = conn.QueryRow(ctx, `SELECT rl.rl_expire($1, NULL)`, later).Scan(&a.n)
		swept <- a
	}()
	var got answer
	await.Until(t, "the expiry to answer while a row is locked", func() bool {
		select {
		case got = <-swept:
			return true
		default:
		}
		require.False(t, waitsForLock(t, conn), "the expiry waits for the locked row")
		return false
	})
	require.NoError(t, got.err)
	require.Equal(t, int64(10), got.n, "the 10 live rows are now idle; the locked one is skipped")
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, int64(1), expire(later, nil))

	// Churn: many new keys a round, swept every round (a round is a window
	// and the grain of expires_at): the table stays bounded.
	const perRound = 300
	for round := range 20 {
		now := later + int64(round)*(expiryGrain+1_000_000)
		batch := &pgx.Batch{}
		batch.Queue(`SELECT rl.rl_allow_us('churn:' || $2::int || ':' || i, 'fixed_window', 5, 1000000, now_us => $1)
			FROM generate_series(1, $3) i`, now, round, perRound)
		batch.Queue(`SELECT rl.rl_expire($1)`, now)
		require.NoError(t, conn.SendBatch(ctx, batch).Close())
		require.LessOrEqual(t, count(), int64(perRound), "round %d", round)
	}
}
