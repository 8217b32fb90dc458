package migrations_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestAllowExample is the README's first example.
func TestAllowExample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := uniqueKey("user")
	type dec struct {
		allowed                                  bool
		lim, remaining, reset, retry, delay, now int64
	}
	call := func() dec {
		var d dec
		require.NoError(t, db.QueryRow(ctx, `SELECT * FROM rl.rl_allow($1, 'token_bucket', 100, '1 minute')`, key).
			Scan(&d.allowed, &d.lim, &d.remaining, &d.reset, &d.retry, &d.delay, &d.now))
		return d
	}
	before := time.Now().UnixMicro()
	d := call()
	require.True(t, d.allowed)
	require.Equal(t, int64(100), d.lim)
	require.Equal(t, int64(99), d.remaining)
	require.Equal(t, int64(600000), d.reset, "one token comes back in 60s/100")
	require.Zero(t, d.retry)
	require.InDelta(t, before, d.now, float64(10*time.Second/time.Microsecond), "database clock")
	var stored int64
	require.NoError(t, db.QueryRow(ctx, `SELECT expires_at FROM rl.state WHERE key = $1`, key).Scan(&stored))
	require.Equal(t, d.now+d.reset, stored)
}

func TestAlgorithmNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, id := range map[string]int{
		"fixed_window": 1, "fixed": 1,
		"sliding_window": 2, "sliding": 2, "sliding_window_counter": 2,
		"sliding_log": 3, "log": 3, "sliding_window_log": 3,
		"token_bucket": 4, "token": 4,
		"leaky_bucket": 5, "leaky": 5,
		"gcra": 6,
	} {
		var got int
		require.NoError(t, db.QueryRow(ctx, `SELECT rl.algorithm_id($1)`, name).Scan(&got))
		require.Equal(t, id, got, name)
		var canon string
		require.NoError(t, db.QueryRow(ctx, `SELECT rl.algorithm_name($1)`, id).Scan(&canon))
		require.Equal(t, id, map[string]int{"fixed_window": 1, "sliding_window": 2, "sliding_log": 3,
			"token_bucket": 4, "leaky_bucket": 5, "gcra": 6}[canon])
		var allowed bool
		require.NoError(t, db.QueryRow(ctx, `SELECT allowed FROM rl.rl_allow($1, $2, 5, '1 minute')`,
			uniqueKey("alg"), name).Scan(&allowed))
		require.True(t, allowed, name)
	}
	_, err := db.Exec(ctx, `SELECT rl.algorithm_id('Token_Bucket')`)
	require.Equal(t, "RL001", sqlState(err))
}

// TestErrors: every documented SQLSTATE with its message.
func TestErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	long := strings.Repeat("é", 129) // 258 bytes
	for _, tc := range []struct {
		query, state, message, detail string
		args                          []any
	}{
		{`SELECT rl.rl_allow('k', 'bogus', 5, '1 minute')`, "RL001", "ratelimit: unknown algorithm (ErrAlgorithm)", "", nil},
		{`SELECT rl.rl_allow('k', 'gcra', 0, '1 minute')`, "RL002", "ratelimit: limit out of range (ErrLimit)", "", nil},
		{`SELECT rl.rl_allow('k', 'log', 4097, '1 minute')`, "RL002", "ratelimit: limit out of range (ErrLimit)", "", nil},
		{`SELECT rl.rl_allow('k', 'gcra', 5, '-1 minute')`, "RL003", "ratelimit: window out of range (ErrWindow)", "", nil},
		{`SELECT rl.rl_allow('k', 'gcra', 5, '40 years')`, "RL003", "ratelimit: window out of range (ErrWindow)", "", nil},
		{`SELECT rl.rl_allow('k', 'fixed', 5, '1 minute', rate => 3)`, "RL004", "ratelimit: rate out of range (ErrRate)", "", nil},
		{`SELECT rl.rl_allow('k', 'gcra', 1099511627776, '1 day')`, "RL005", "ratelimit: limit × window too large (ErrUnits)", "", nil},
		{`SELECT rl.rl_allow('k', 'gcra', 5, '1 minute', cost => -1)`, "RL006", "ratelimit: cost out of range (ErrCost)", "", nil},
		{`SELECT rl.rl_allow('k', 'gcra', 5, '1 minute', now_us => -1)`, "RL007", "ratelimit: time out of range (ErrTime)", "", nil},
		{`SELECT rl.decide(4, 5, 1000, 0, 4, -1, 0, 0, '{}', 0, 1)`, "RL008", "ratelimit: corrupt state (ErrState)", "", nil},
		{`SELECT rl.decide(3, 5, 1000, 0, 3, 0, 0, 0, '{2,1}', 0, 1)`, "RL008", "", "", nil},
		{`SELECT rl.decide(3, 5, 1000, 0, 3, 0, 0, 0, '{1,NULL}', 0, 1)`, "RL008", "", "", nil},
		{`SELECT rl.decide(3, 5, 1000, 0, 3, 0, 0, 0, '{{1},{2}}', 0, 1)`, "RL008", "", "", nil},
		{`SELECT rl.decide_all('{}', NULL, 0, 1)`, "RL010", "ratelimit: bad limit list (ErrLimits)", "limit index 0", nil},
		{`SELECT rl.decide_all(ARRAY[ROW(4,5,1000,0), ROW(4,5,0,0)]::rl.limit_spec[], NULL, 0, 1)`, "RL003", "", "limit index 1", nil},
		{`SELECT rl.decide_all(ARRAY[ROW(4,5,1000,0)]::rl.limit_spec[], '{}', 0, 1)`, "RL010", "", "", nil},
		{`SELECT rl.decide(4, 5, 1000, 0, 0, 0, 0, 0, '{}', 0, 1, 'taek')`, "22023", "", "", nil},
		{`SELECT rl.rl_allow_multi('k', '{}')`, "RL010", "", "limits must be a non-empty JSON array of objects", nil},
		{`SELECT rl.rl_allow_multi('k', '[]')`, "RL010", "", "", nil},
		{`SELECT rl.rl_allow_multi('k', '[1]')`, "RL010", "", "limits[0] is not a JSON object", nil},
		{`SELECT rl.rl_allow_multi('k', '[{"algorithm":"gcra"}]')`, "RL010", "", `limits[0] has no "name" string`, nil},
		{`SELECT rl.rl_allow_multi('k', '[{"name":"a","algorithm":"gcra","limit":1,"window_us":1},{"name":"a"}]')`, "RL010", "", `limits[1]: duplicate name 'a'`, nil},
		{`SELECT rl.rl_allow_multi('k', '[{"name":"a","algorithm":"gcra","limit":1.5,"window_us":1}]')`, "22023", "", "", nil},
		{`SELECT rl.rl_allow_multi('k', '[{"name":"a","algorithm":"gcra","limit":"5","window_us":1}]')`, "22023", "", "", nil},
		{`SELECT rl.rl_allow_multi('k', '[{"name":"a","algorithm":"gcra","limit":5,"window":5}]')`, "22023", "", "", nil},
		{`SELECT rl.rl_allow_multi('k', '[{"name":"a","algorithm":"gcra","limit":5,"window":"1 s"},{"name":"b","algorithm":"gcra","limit":5,"window_us":1e30}]')`, "RL003", "", "limit index 1 (name 'b')", nil},
		{`SELECT rl.rl_allow_multi('k', '[{"name":"","algorithm":"gcra","limit":5,"window_us":1}]')`, "RL011", "", "", nil},
		{`SELECT rl.rl_allow('', 'gcra', 5, '1 minute')`, "RL011", "ratelimit: invalid key: it must be 1 to 256 bytes", "The key is 0 bytes long.", nil},
		{`SELECT rl.rl_allow(NULL, 'gcra', 5, '1 minute')`, "RL011", "", "The key is NULL.", nil},
		{`SELECT rl.rl_allow($1, 'gcra', 5, '1 minute')`, "RL011", "", "The key is 258 bytes long.", []any{long}},
		{`SELECT rl.rl_allow('k', 'gcra', 5, '1 minute', name => '')`, "RL011", "ratelimit: invalid limit name: it must be 1 to 256 bytes", "", nil},
		{`SELECT rl.rl_reset('')`, "RL011", "", "", nil},
		{`SELECT rl.rl_decide_multi('k', '{a,b}', '{4}', '{5,5}', '{1,1}', '{0,0}')`, "RL010", "", "limit index 0: the parameter arrays differ in length", nil},
		{`SELECT rl.rl_decide_multi('k', '{a,a}', '{4,4}', '{5,5}', '{1,1}', '{0,0}')`, "RL010", "", "limit index 1: duplicate name 'a'", nil},
		{`SELECT rl.rl_decide_multi('k', '{}', '{}', '{}', '{}', '{}')`, "RL010", "", "", nil},
		{`SELECT rl.rl_decide_multi('k', '{a,""}', '{4,4}', '{5,5}', '{1,1}', '{0,0}')`, "RL011", "", "", nil},
		{`SELECT rl.rl_expire(0, 0)`, "22023", "", "", nil},
	} {
		_, err := db.Exec(ctx, tc.query, tc.args...)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, tc.query)
		require.Equal(t, tc.state, pe.Code, "%s: %v", tc.query, err)
		if tc.message != "" {
			require.Equal(t, tc.message, pe.Message, tc.query)
		}
		if tc.detail != "" {
			require.Equal(t, tc.detail, pe.Detail, tc.query)
		}
	}
	// 256 bytes is fine, and keys are data: any characters.
	for _, key := range []string{strings.Repeat("é", 128), "'; DROP TABLE rl.state; --", "\\x00 \t\n ☃", "%s %L"} {
		_, err := db.Exec(ctx, `SELECT rl.rl_allow($1, 'gcra', 5, '1 minute')`, key)
		require.NoError(t, err, key)
	}
}

func TestWindowsAndClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, dbURL)
	for iv, us := range map[string]int64{
		"1 second": 1_000_000, "1 minute": 60_000_000, "1 hour": 3_600_000_000, "1 day": 86_400_000_000,
		"1 month": 30 * 86_400_000_000, "1.5 seconds": 1_500_000, "1 microsecond": 1,
	} {
		var got int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT rl._interval_us($1::interval)`, iv).Scan(&got))
		require.Equal(t, us, got, iv)
	}
	// rl_allow (interval) and rl_allow_us decide alike.
	var a, b int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT reset_after_us FROM rl.rl_allow('w1', 'gcra', 7, '1 minute', now_us => 5)`).Scan(&a))
	require.NoError(t, conn.QueryRow(ctx, `SELECT reset_after_us FROM rl.rl_allow_us('w2', 'gcra', 7, 60000000, now_us => 5)`).Scan(&b))
	require.Equal(t, a, b)

	// rl.now_us replaces the clock when now_us is NULL.
	_, err := conn.Exec(ctx, `SET rl.now_us = '1767225600000000'`)
	require.NoError(t, err)
	var now int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT now_us FROM rl.rl_peek('w3', 'gcra', 7, '1 minute')`).Scan(&now))
	require.Equal(t, int64(1767225600000000), now)
	require.NoError(t, conn.QueryRow(ctx, `SELECT now_us FROM rl.rl_peek('w3', 'gcra', 7, '1 minute', now_us => 3)`).Scan(&now))
	require.Equal(t, int64(3), now, "an explicit now_us wins")
	_, err = conn.Exec(ctx, `SET rl.now_us = 'soon'`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT rl.rl_peek('w3', 'gcra', 7, '1 minute')`)
	require.Equal(t, "22023", sqlState(err))
	_, err = conn.Exec(ctx, `RESET rl.now_us`)
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, `SELECT now_us FROM rl.rl_peek('w3', 'gcra', 7, '1 minute')`).Scan(&now))
	require.InDelta(t, time.Now().UnixMicro(), now, float64(10*time.Second/time.Microsecond))
}

func TestResetAndNever(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := uniqueKey("reset")
	limits := `[{"name":"a","algorithm":"fixed","limit":2,"window":"1 minute"},
	            {"name":"b","algorithm":"sliding_log","limit":3,"window":"1 minute"}]`
	var ok bool
	require.NoError(t, db.QueryRow(ctx, `SELECT bool_and(allowed) FROM rl.rl_allow_multi($1, $2::jsonb, 2, 0)`, key, limits).Scan(&ok))
	require.True(t, ok)
	var retry int64
	var deciding string
	require.NoError(t, db.QueryRow(ctx, `SELECT name, retry_after_us FROM rl.rl_allow_multi($1, $2::jsonb, 3, 0) WHERE deciding`,
		key, limits).Scan(&deciding, &retry))
	require.Equal(t, int64(-1), retry, "cost 3 is above limit a: never")
	require.Equal(t, "a", deciding)

	var n int64
	require.NoError(t, db.QueryRow(ctx, `SELECT rl.rl_reset($1, 'a')`, key).Scan(&n))
	require.Equal(t, int64(1), n)
	require.NoError(t, db.QueryRow(ctx, `SELECT rl.rl_reset($1)`, key).Scan(&n))
	require.Equal(t, int64(1), n)
	require.NoError(t, db.QueryRow(ctx, `SELECT rl.rl_reset($1)`, key).Scan(&n))
	require.Zero(t, n)
}
