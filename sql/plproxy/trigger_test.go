package plproxy_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/sql/plproxy/plproxytest"
)

// TestTriggerOnRouter: rl.enforce_limit on a table of the router database
// decides on the key's shard: the sixth comment a minute fails with RL429,
// each user's state lives on its shard, and (unlike on one node) a row
// admitted in a transaction that rolls back stays counted.
func TestTriggerOnRouter(t *testing.T) {
	t.Parallel() // a cluster of its own (plproxytest.New)
	c := plproxytest.New(t, 2, 0)
	conn, err := pgx.Connect(ctx, c.Router)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE comments (id bigserial PRIMARY KEY, user_id bigint, body text NOT NULL);
		CREATE TRIGGER comments_rate_limit BEFORE INSERT ON comments
			FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit('user_id', 'sliding_window', '5', '1 minute', '1', 'user:')`)
	require.NoError(t, err)
	insert := func(user int) error {
		_, err := conn.Exec(ctx, "INSERT INTO comments (user_id, body) VALUES ($1, 'hi')", user)
		return err
	}
	onShard := map[int]bool{}
	for user := range 6 {
		key := fmt.Sprintf("user:%d", user)
		onShard[c.ShardOf(key)] = true
		for range 5 {
			require.NoError(t, insert(user))
		}
		err := insert(user)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "RL429", pe.Code)
		require.Equal(t, "rate limit exceeded", pe.Message)
		require.Regexp(t, `^Retry after \d+ s \(\d+ µs\); limit public.comments: 5 per 1 minute\.$`, pe.Detail)
		for i, s := range c.Shards {
			require.Equal(t, b2i(i == c.ShardOf(key)),
				count(t, s, "SELECT count(*) FROM rl.state WHERE key = $1 AND name = 'public.comments'", key), key)
		}
	}
	require.Len(t, onShard, 2, "users on both shards")
	require.Equal(t, int64(30), count(t, c.Router, "SELECT count(*) FROM comments"))

	// The shard commits the decision on its own.
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO comments (user_id, body) VALUES (100, 'rolled back')")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	var rem int64
	require.NoError(t, conn.QueryRow(ctx, "SELECT remaining FROM rl.rl_peek('user:100', 'sliding_window', 5, '1 minute', name => 'public.comments', cost => 0)").Scan(&rem))
	require.Equal(t, int64(4), rem, "the rolled-back row was counted on the shard")

	// The trigger's errors are the single node's.
	_, err = conn.Exec(ctx, "INSERT INTO comments (user_id, body) VALUES (NULL, 'x')")
	requireCode(t, err, "RL011")
	_, err = conn.Exec(ctx, `CREATE TABLE bad (user_id bigint);
		CREATE TRIGGER bad BEFORE INSERT ON bad FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit('user_id', 'gcra', 'x', '1 minute')`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO bad VALUES (1)")
	requireCode(t, err, "22023")
}

// TestTriggerOnShard: the migrations' rl.enforce_limit on a table of a
// shard counts in that shard's own rl.state, in the inserting transaction
// (a rollback undoes it), whatever the key's partition: a key that belongs
// to another shard has there a state the router never sees.
func TestTriggerOnShard(t *testing.T) {
	t.Parallel() // a cluster of its own (plproxytest.New)
	c := plproxytest.New(t, 2, 0)
	key := "order:1"
	for i := 2; c.ShardOf(key) != 1; i++ { // a key of shard 1
		key = fmt.Sprintf("order:%d", i)
	}
	conn, err := pgx.Connect(ctx, c.Shards[0])
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL);
		CREATE TRIGGER orders_rate_limit BEFORE INSERT ON orders
			FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit('customer', 'fixed_window', '3', '1 hour')`)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO orders (customer) VALUES ($1)", key)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, count(t, c.Shards[0], "SELECT count(*) FROM rl.state WHERE key = $1", key), "rolled back with the row")
	for range 3 {
		_, err = conn.Exec(ctx, "INSERT INTO orders (customer) VALUES ($1)", key)
		require.NoError(t, err)
	}
	_, err = conn.Exec(ctx, "INSERT INTO orders (customer) VALUES ($1)", key)
	requireCode(t, err, "RL429")
	require.Equal(t, int64(1), count(t, c.Shards[0], "SELECT count(*) FROM rl.state WHERE key = $1", key), "counted locally")
	require.Zero(t, count(t, c.Shards[1], "SELECT count(*) FROM rl.state WHERE key = $1", key), "not on the key's shard")
}
