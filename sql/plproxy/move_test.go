package plproxy_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/plproxy"
	"github.com/rlcore/rl/sql/plproxy/plproxytest"
)

// TestMovePartition follows docs/scaling.md, "Adding servers": partition 2
// of 4 moves from shard 0 to a new server. While it moves, its keys fail
// and every other key keeps deciding; afterwards its keys decide on the new
// server with the states they had, and nothing of it is left on shard 0.
func TestMovePartition(t *testing.T) {
	t.Parallel() // a cluster of its own (plproxytest.New)
	const parts, moved = 4, 2
	c := plproxytest.New(t, 2, parts) // p0, p2 on shard 0; p1, p3 on shard 1
	newShard := pgtest.NewMigrated(t)

	router := pool(t, c.Router, 4)
	decide := func(k string) error {
		_, err := router.Exec(ctx, "SELECT rl.rl_allow($1, 'fixed_window', 100, '1 hour', now_us => $2)", k, t0)
		return err
	}
	remaining := func(k string) int64 {
		var n int64
		require.NoError(t, router.QueryRow(ctx, "SELECT remaining FROM rl.rl_peek($1, 'fixed_window', 100, '1 hour', cost => 0, now_us => $2)", k, t0).Scan(&n))
		return n
	}
	var keys []string
	inMoved := 0
	for i := range 80 {
		k := fmt.Sprintf("move:%d", i)
		keys = append(keys, k)
		for range 1 + i%3 {
			require.NoError(t, decide(k))
		}
		if plproxy.Partition(k, parts) == moved {
			inMoved++
		}
	}
	require.Greater(t, inMoved, 5)
	before := map[string]int64{}
	for _, k := range keys {
		before[k] = remaining(k)
	}

	rc, err := pgx.Connect(ctx, c.Router)
	require.NoError(t, err)
	defer rc.Close(ctx)
	// 1. Pause the partition: point it at a database that does not exist.
	_, err = rc.Exec(ctx, fmt.Sprintf("ALTER SERVER rl_shards OPTIONS (SET p%d 'dbname=rl_paused_p%d host=127.0.0.1')", moved, moved))
	require.NoError(t, err)
	for _, k := range keys {
		if plproxy.Partition(k, parts) == moved {
			require.Error(t, decide(k), "%s: its partition is paused", k)
		} else {
			require.NoError(t, decide(k), "%s: another partition keeps deciding", k)
			before[k]--
		}
	}
	// 2. Copy the partition's rows to the new server and delete them from
	// the old one, under a lock that waits for calls still in flight.
	require.NoError(t, moveRows(ctx, c.Shards[0], newShard, parts, moved))
	// 3. Point the partition at the new server.
	cs, _, _, err := plproxy.ConnString(newShard)
	require.NoError(t, err)
	_, err = rc.Exec(ctx, fmt.Sprintf("ALTER SERVER rl_shards OPTIONS (SET p%d '%s')", moved, cs))
	require.NoError(t, err)

	for _, k := range keys {
		require.Equal(t, before[k], remaining(k), "%s keeps its state", k)
	}
	require.Zero(t, count(t, c.Shards[0], "SELECT count(*) FROM rl.state WHERE hashtext(key) & $1 = $2", parts-1, moved))
	require.Equal(t, int64(inMoved), count(t, newShard, "SELECT count(*) FROM rl.state"))
	require.Positive(t, count(t, c.Shards[0], "SELECT count(*) FROM rl.state"), "partition 0 stays")
	for _, k := range keys {
		require.NoError(t, decide(k))
	}
}

// moveRows is step 2 of the procedure: in one transaction on the old shard,
// lock rl.state against writers (waiting for those in flight), copy the
// partition's rows into the new shard and commit that, delete them from the
// old one, commit.
func moveRows(ctx context.Context, from, to string, parts, p int) error {
	src, err := pgx.Connect(ctx, from)
	if err != nil {
		return err
	}
	defer src.Close(ctx)
	dst, err := pgx.Connect(ctx, to)
	if err != nil {
		return err
	}
	defer dst.Close(ctx)
	return pgx.BeginFunc(ctx, src, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "LOCK TABLE rl.state IN SHARE MODE"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "SELECT key, name, algorithm, t, x, y, log, expires_at FROM rl.state WHERE hashtext(key) & $1 = $2", parts-1, p)
		if err != nil {
			return err
		}
		n, err := dst.CopyFrom(ctx, pgx.Identifier{"rl", "state"}, []string{"key", "name", "algorithm", "t", "x", "y", "log", "expires_at"},
			pgx.CopyFromFunc(func() ([]any, error) {
				if !rows.Next() {
					return nil, rows.Err()
				}
				return rows.Values()
			}))
		rows.Close()
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "DELETE FROM rl.state WHERE hashtext(key) & $1 = $2", parts-1, p)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != n {
			return fmt.Errorf("copied %d rows, deleting %d", n, tag.RowsAffected())
		}
		return nil
	})
}
