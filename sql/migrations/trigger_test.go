package migrations_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

var retryDetail = regexp.MustCompile(`^Retry after (\d+) s \((\d+) µs\)`)

// TestTrigger: at most 5 comments a minute per user.
func TestTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, dbURL)
	_, err := conn.Exec(ctx, `
		CREATE TABLE comments_trg (id bigserial PRIMARY KEY, user_id bigint, body text NOT NULL);
		CREATE TRIGGER comments_rate_limit
			BEFORE INSERT ON comments_trg
			FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit('user_id', 'sliding_window', '5', '1 minute')`)
	require.NoError(t, err)

	const t0 = int64(1767225600000000) // on a minute boundary
	setNow := func(us int64) {
		_, err := conn.Exec(ctx, "SELECT set_config('rl.now_us', $1, false)", strconv.FormatInt(us, 10))
		require.NoError(t, err)
	}
	insert := func(user int) error {
		_, err := conn.Exec(ctx, `INSERT INTO comments_trg (user_id, body) VALUES ($1, 'hello')`, user)
		return err
	}
	setNow(t0)
	for i := range 5 {
		require.NoError(t, insert(1), "comment %d", i+1)
	}
	err = insert(1)
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "%v", err)
	require.Equal(t, "RL429", pe.Code)
	require.Equal(t, "rate limit exceeded", pe.Message)
	m := retryDetail.FindStringSubmatch(pe.Detail)
	require.NotNil(t, m, pe.Detail)
	secs, _ := strconv.ParseInt(m[1], 10, 64)
	us, _ := strconv.ParseInt(m[2], 10, 64)
	require.Positive(t, us)
	require.Equal(t, (us+999999)/1000000, secs)
	require.Contains(t, pe.Hint, "Wait "+m[1]+" seconds")

	require.NoError(t, insert(2), "another user has a limit of its own")

	// Retry-after is exact: 1 µs earlier is still denied, then it passes.
	setNow(t0 + us - 1)
	require.Error(t, insert(1))
	setNow(t0 + us)
	require.NoError(t, insert(1))

	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM comments_trg WHERE user_id = 1`).Scan(&n))
	require.Equal(t, 6, n)
	// The state row: key = the column value, name = schema.table.
	require.True(t, exists(t, conn, `SELECT FROM rl.state WHERE key = '1' AND name = 'public.comments_trg'`))

	// NULL keys are refused with RL011 (exempt them with a WHEN clause).
	err = insert0(ctx, conn, `INSERT INTO comments_trg (user_id, body) VALUES (NULL, 'x')`)
	require.Equal(t, "RL011", sqlState(err), "%v", err)
}

// TestTriggerArguments: cost, key prefix and limit name, and bad arguments.
func TestTriggerArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, dbURL)
	_, err := conn.Exec(ctx, `
		CREATE TABLE uploads_trg (owner text, size int);
		CREATE TRIGGER uploads_limit
			BEFORE INSERT ON uploads_trg
			FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit('owner', 'token_bucket', '10', '1 hour', '4', 'user:', 'uploads');
		SELECT set_config('rl.now_us', '1767225600000000', false)`)
	require.NoError(t, err)
	require.NoError(t, insert0(ctx, conn, `INSERT INTO uploads_trg VALUES ('ann''s "key"; DROP TABLE x', 1)`))
	require.NoError(t, insert0(ctx, conn, `INSERT INTO uploads_trg VALUES ('ann''s "key"; DROP TABLE x', 1)`))
	err = insert0(ctx, conn, `INSERT INTO uploads_trg VALUES ('ann''s "key"; DROP TABLE x', 1)`)
	require.Equal(t, "RL429", sqlState(err), "cost 4 of 10: the third is denied")
	var x int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT x FROM rl.state WHERE key = $1 AND name = 'uploads'`,
		`user:ann's "key"; DROP TABLE x`).Scan(&x))
	require.Equal(t, int64(8*3600_000000), x)

	for _, tc := range []struct {
		args, state string
	}{
		{`'nosuchcol', 'gcra', '5', '1 minute'`, "42703"},
		{`'owner', 'gcra', 'five', '1 minute'`, "22023"},
		{`'owner', 'gcra'`, "22023"},
		{`'owner', 'nope', '5', '1 minute'`, "RL001"},
		{`'owner', 'gcra', '5', '0 seconds'`, "RL003"},
		{`'owner', 'gcra', '5', '1 minute', '-1'`, "RL006"},
	} {
		_, err := conn.Exec(ctx, `DROP TRIGGER IF EXISTS bad ON uploads_trg;
			DROP TRIGGER IF EXISTS uploads_limit ON uploads_trg;
			CREATE TRIGGER bad BEFORE INSERT ON uploads_trg FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit(`+tc.args+`)`)
		require.NoError(t, err)
		err = insert0(ctx, conn, `INSERT INTO uploads_trg VALUES ('bob', 1)`)
		require.Equal(t, tc.state, sqlState(err), "%s: %v", tc.args, err)
	}
	_, err = conn.Exec(ctx, `DROP TRIGGER bad ON uploads_trg;
		CREATE TRIGGER bad AFTER INSERT ON uploads_trg FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit('owner', 'gcra', '5', '1 minute')`)
	require.NoError(t, err)
	err = insert0(ctx, conn, `INSERT INTO uploads_trg VALUES ('bob', 1)`)
	require.Equal(t, "42P17", sqlState(err), "%v", err)
}

func insert0(ctx context.Context, conn interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, q string) error {
	_, err := conn.Exec(ctx, q)
	return err
}
