package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/await"
)

var retryDetail = regexp.MustCompile(`^Retry after (\d+) s \((\d+) µs\)`)

// TestTrigger: at most 5 comments per window per user. The trigger runs on
// the database clock (an inserter must not choose the time), so the window
// is short and exact: a sliding log of 5 per 2 seconds.
func TestTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, dbURL)
	_, err := conn.Exec(ctx, `
		CREATE TABLE comments_trg (id bigserial PRIMARY KEY, user_id bigint, body text NOT NULL);
		CREATE TRIGGER comments_rate_limit
			BEFORE INSERT ON comments_trg
			FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit('user_id', 'sliding_log', '5', '2 seconds')`)
	require.NoError(t, err)
	insert := func(user int) error {
		_, err := conn.Exec(ctx, `INSERT INTO comments_trg (user_id, body) VALUES ($1, 'hello')`, user)
		return err
	}
	// Six comments within the window: the sixth is refused. A loaded
	// machine may take longer than the window for them; then the sixth is
	// rightly admitted, and the test tries again with another user: it
	// waits for a run that fits, and only a run that fits (client time, an
	// upper bound of the server's between the first and the sixth) must
	// refuse the sixth.
	var (
		user int
		err6 error
	)
	await.Until(t, "six comments within the trigger's 2 s window", func() bool {
		user++
		start := time.Now()
		for i := range 5 {
			require.NoError(t, insert(user), "comment %d", i+1)
		}
		// rl.now_us does not move the trigger's clock.
		_, err := conn.Exec(ctx, "SET rl.now_us = '253402300799999999'")
		require.NoError(t, err)
		err6 = insert(user)
		_, err = conn.Exec(ctx, "RESET rl.now_us")
		require.NoError(t, err)
		if err6 == nil {
			require.GreaterOrEqual(t, time.Since(start), 2*time.Second, "a sixth comment within the window was admitted")
			return false
		}
		return true
	})
	err = err6
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "%v", err)
	require.Equal(t, "RL429", pe.Code)
	require.Equal(t, "rate limit exceeded", pe.Message)
	m := retryDetail.FindStringSubmatch(pe.Detail)
	require.NotNil(t, m, pe.Detail)
	secs, _ := strconv.ParseInt(m[1], 10, 64)
	us, _ := strconv.ParseInt(m[2], 10, 64)
	require.Positive(t, us)
	require.LessOrEqual(t, us, int64(2_000_000))
	require.Equal(t, (us+999999)/1000000, secs)
	require.Contains(t, pe.Detail, "limit public.comments_trg: 5 per 2 seconds")
	require.Contains(t, pe.Hint, "Wait "+m[1]+" seconds")

	require.NoError(t, insert(-1), "another user has a limit of its own")

	// After the retry-after, the user may comment again (a loaded machine
	// only makes the wait longer).
	time.Sleep(time.Duration(us+1000) * time.Microsecond)
	require.NoError(t, insert(user))

	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM comments_trg WHERE user_id = $1`, user).Scan(&n))
	require.Equal(t, 6, n)
	// The state row: key = the column value, name = schema.table.
	require.True(t, exists(t, conn, `SELECT FROM rl.state WHERE key = $1 AND name = 'public.comments_trg'`, strconv.Itoa(user)))

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
			FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit('owner', 'token_bucket', '10', '1 hour', '4', 'user:', 'uploads')`)
	require.NoError(t, err)
	require.NoError(t, insert0(ctx, conn, `INSERT INTO uploads_trg VALUES ('ann''s "key"; DROP TABLE x', 1)`))
	require.NoError(t, insert0(ctx, conn, `INSERT INTO uploads_trg VALUES ('ann''s "key"; DROP TABLE x', 1)`))
	err = insert0(ctx, conn, `INSERT INTO uploads_trg VALUES ('ann''s "key"; DROP TABLE x', 1)`)
	require.Equal(t, "RL429", sqlState(err), "cost 4 of 10: the third is denied")
	var x int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT x FROM rl.state WHERE key = $1 AND name = 'uploads'`,
		`user:ann's "key"; DROP TABLE x`).Scan(&x))
	require.InDelta(t, 8*3600_000000, x, 3600_000000/10*2, "two costs of 4 (of 10 per hour), minus a few ms of refill")

	for _, tc := range []struct {
		args, state, message string
	}{
		{`'nosuchcol', 'gcra', '5', '1 minute'`, "42703", `argument 1 (key_column): the table has no column nosuchcol`},
		{`'owner', 'gcra', 'five', '1 minute'`, "22023", `argument 3 (limit): 'five' is not an integer`},
		{`'owner', 'gcra'`, "22023", "has 2 arguments"},
		{`'owner', 'gcra_', '5', '1 minute'`, "RL001",
			fmt.Sprintf(`argument 2 (algorithm): 'gcra_' is not an algorithm (want %s)`, allAlgorithms(""))},
		{`'owner', 'gcra', '0', '1 minute'`, "RL002", fmt.Sprintf(`argument 3 (limit): limit 0: outside [1, %d] for %s`, core.MaxLimit, core.GCRA)},
		{`'owner', 'gcra', '5', '0 seconds'`, "RL003", fmt.Sprintf(`argument 4 (window): '0 seconds': outside [1 µs, %d µs]`, core.MaxWindow)},
		{`'owner', 'gcra', '5', '1 minit'`, "22023", `argument 4 (window): '1 minit' is not an interval such as '1 minute'`},
		{`'owner', 'gcra', '5', '1 minute', '-1'`, "RL006", fmt.Sprintf(`argument 5 (cost): cost -1: outside [0, %d]`, core.MaxCost)},
		{`'owner', 'gcra', '5', '1 minute', 'x'`, "22023", `argument 5 (cost): 'x' is not an integer`},
	} {
		_, err := conn.Exec(ctx, `DROP TRIGGER IF EXISTS bad ON uploads_trg;
			DROP TRIGGER IF EXISTS uploads_limit ON uploads_trg;
			CREATE TRIGGER bad BEFORE INSERT ON uploads_trg FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit(`+tc.args+`)`)
		require.NoError(t, err)
		err = insert0(ctx, conn, `INSERT INTO uploads_trg VALUES ('bob', 1)`)
		require.Equal(t, tc.state, sqlState(err), "%s: %v", tc.args, err)
		require.Contains(t, err.Error(), tc.message, tc.args)
		require.Contains(t, err.Error(), "trigger bad on ", tc.args)
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
