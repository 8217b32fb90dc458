package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
)

// TestAllowExample is the README's first example.
func TestAllowExample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := uniqueKey("user")
	type dec struct {
		allowed                                        bool
		lim, remaining, reset, retry, delay, now, next int64
	}
	call := func() dec {
		var d dec
		require.NoError(t, db.QueryRow(ctx, `SELECT * FROM rl.rl_allow($1, 'token_bucket', 100, '1 minute')`, key).
			Scan(&d.allowed, &d.lim, &d.remaining, &d.reset, &d.retry, &d.delay, &d.now, &d.next))
		return d
	}
	before := time.Now().UnixMicro()
	d := call()
	require.True(t, d.allowed)
	require.Equal(t, int64(100), d.lim)
	require.Equal(t, int64(99), d.remaining)
	require.Equal(t, int64(600000), d.reset, "one token comes back in 60s/100")
	require.Zero(t, d.retry)
	require.Equal(t, int64(600000), d.next, "the next token too")
	require.InDelta(t, before, d.now, float64(10*time.Second/time.Microsecond), "database clock")
	var stored int64
	require.NoError(t, db.QueryRow(ctx, `SELECT expires_at FROM rl.state WHERE key = $1`, key).Scan(&stored))
	require.Equal(t, expiresAt(d.now, d.reset), stored, "the time the state is fresh again, rounded up to 2^26 µs")
}

func TestAlgorithmNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Every name core.ParseAlgorithm accepts, and some it refuses: the SQL
	// functions agree with it.
	for _, name := range []string{"fixed_window", "fixed", "sliding_window", "sliding", "sliding_window_counter",
		"sliding_log", "log", "sliding_window_log", "token_bucket", "token", "leaky_bucket", "leaky", "gcra",
		"Token_Bucket", "", "fixed-window", "gcra ", "7"} {
		want, perr := core.ParseAlgorithm(name)
		var got int32
		err := db.QueryRow(ctx, `SELECT rl.algorithm_id($1)`, name).Scan(&got)
		if perr != nil {
			require.Equal(t, "RL001", sqlState(err), "%q", name)
			continue
		}
		require.NoError(t, err, name)
		require.Equal(t, int32(want), got, name)
		var canon string
		require.NoError(t, db.QueryRow(ctx, `SELECT rl.algorithm_name($1)`, got).Scan(&canon))
		require.Equal(t, want.String(), canon)
		var allowed bool
		require.NoError(t, db.QueryRow(ctx, `SELECT allowed FROM rl.rl_allow($1, $2, 5, '1 minute')`,
			uniqueKey("alg"), name).Scan(&allowed))
		require.True(t, allowed, name)
	}
}

// TestErrors: every documented SQLSTATE with its message.
func TestErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	long := strings.Repeat("é", 129)      // 258 bytes
	unknown := len(core.Algorithms()) + 1 // the first number that is no algorithm
	for _, tc := range []struct {
		query, state, message, detail string
		args                          []any
	}{
		{`SELECT rl.rl_allow('k', 'bogus', 5, '1 minute')`, "RL001", fmt.Sprintf("ratelimit: algorithm 'bogus': unknown (want %s)", allAlgorithms("")), "", nil},
		{fmt.Sprintf(`SELECT rl.decide(%d, 5, 1000, 0, 0, 0, 0, 0, '{}', 0, 1)`, unknown), "RL001", fmt.Sprintf("ratelimit: algorithm %d: unknown (want %s)", unknown, allAlgorithms("numbers")), "", nil},
		{`SELECT rl.rl_allow('k', 'gcra', 0, '1 minute')`, "RL002", fmt.Sprintf("ratelimit: limit 0: outside [1, %d] for %s", core.MaxLimit, core.GCRA), "", nil},
		{`SELECT rl.rl_allow('k', 'log', 4097, '1 minute')`, "RL002", fmt.Sprintf("ratelimit: limit 4097: outside [1, %d] for %s", core.MaxLogLimit, core.SlidingLog), "", nil},
		{`SELECT rl.rl_allow('k', 'gcra', 5, '-1 minute')`, "RL003", fmt.Sprintf("ratelimit: window '-00:01:00': outside [1 µs, %d µs]", core.MaxWindow), "", nil},
		{`SELECT rl.rl_allow_us('k', 'gcra', 5, 0)`, "RL003", fmt.Sprintf("ratelimit: window 0 µs: outside [1, %d] µs", core.MaxWindow), "", nil},
		{`SELECT rl.rl_allow('k', 'gcra', 0, '-1 minute')`, "RL002", "", "", nil}, // the limit is checked first
		{`SELECT rl.rl_allow('k', 'gcra', 5, '40 years')`, "RL003", fmt.Sprintf("ratelimit: window '40 years': outside [1 µs, %d µs]", core.MaxWindow), "", nil},
		{`SELECT rl.rl_allow('k', 'fixed', 5, '1 minute', rate => 3)`, "RL004",
			fmt.Sprintf("ratelimit: rate 3: must be 0 or absent for %s (rate applies to %s, %s and %s)", core.FixedWindow, core.TokenBucket, core.LeakyBucket, core.GCRA), "", nil},
		{`SELECT rl.rl_allow('k', 'token', 5, '1 minute', rate => -2)`, "RL004", fmt.Sprintf("ratelimit: rate -2: outside [0, %d] for %s", core.MaxLimit, core.TokenBucket), "", nil},
		{`SELECT rl.rl_allow('k', 'gcra', 1099511627776, '1 day')`, "RL005",
			fmt.Sprintf("ratelimit: limit %d × window %d µs: too large for %s (limit × window in µs must be at most %d)", core.MaxLimit, int64(24*time.Hour/time.Microsecond), core.GCRA, core.MaxUnits), "", nil},
		{`SELECT rl.rl_allow('k', 'gcra', 5, '1 minute', cost => -1)`, "RL006", fmt.Sprintf("ratelimit: cost -1: outside [0, %d]", core.MaxCost), "", nil},
		{`SELECT rl.rl_allow('k', 'gcra', 5, '1 minute', now_us => -1)`, "RL007", fmt.Sprintf("ratelimit: time -1 µs: outside [0, %d] µs since the Unix epoch", core.MaxTime), "", nil},
		{`SELECT rl.decide(4, 5, 1000, 0, 4, -1, 0, 0, '{}', 0, 1)`, "RL008",
			fmt.Sprintf("ratelimit: stored state (algorithm %d, t -1, x 0, y 0, 0 log entries, l 0, w 0, r 0) is corrupt for %s", core.TokenBucket, core.TokenBucket), "", nil},
		// Recorded parameters that are no valid limit of the state's algorithm.
		{`SELECT rl.decide(4, 5, 1000, 0, 4, 0, 0, 0, '{}', 0, 1, 'take', 5, 1000, 0)`, "RL008",
			fmt.Sprintf("ratelimit: stored state (algorithm %d, t 0, x 0, y 0, 0 log entries, l 5, w 1000, r 0) is corrupt for %s", core.TokenBucket, core.TokenBucket), "", nil},
		{`SELECT rl.decide(1, 5, 1000, 0, 1, 0, 1, 0, '{}', 0, 1, 'take', 5, 1000, 5)`, "RL008", "", "", nil}, // a rate recorded for a window algorithm
		{`SELECT rl.decide(1, 5, 1000, 0, 0, 0, 0, 0, '{}', 0, 1, 'take', 5, 1000, 0)`, "RL008", "", "", nil}, // parameters recorded in a fresh state
		{`SELECT rl.decide(4, 5, 1000, 0, 0, 0, 0, 0, '{}', 0, -1099511627777, 'settle')`, "RL006",
			fmt.Sprintf("ratelimit: settle delta -%d: outside [-%d, %d]", core.MaxCost+1, core.MaxCost, core.MaxCost), "", nil},
		{`SELECT rl.rl_settle('k', 'gcra', 5, '1 minute', NULL)`, "RL006", "", "", nil},
		{`SELECT rl.rl_settle_multi('k', '[{"name":"a","algorithm":"gcra","limit":1,"window_us":1},{"name":"b","algorithm":"gcra","limit":1,"window_us":0}]', 1)`,
			"RL003", "", "limit index 1 (name 'b')", nil},
		{`SELECT rl.decide(6, 5, 1000, 0, 6, 5, 0, 6, '{}', 0, 1)`, "RL008", "", "", nil}, // y, the admission time, after the TAT
		{`SELECT rl.decide(3, 5, 1000, 0, 3, 0, 0, 0, '{2,1}', 0, 1)`, "RL008", "", "", nil},
		{`SELECT rl.decide(3, 5, 1000, 0, 3, 0, 0, 0, '{1,NULL}', 0, 1)`, "RL008", "", "", nil},
		{`SELECT rl.decide(3, 5, 1000, 0, 3, 0, 0, 0, '{{1},{2}}', 0, 1)`, "RL008", "", "", nil},
		{`SELECT rl.decide_all('{}', NULL, 0, 1)`, "RL010", core.ErrLimits.Error() + " (ErrLimits)", "limit index 0", nil},
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
		{`SELECT rl.rl_allow_multi('k', '[{"name":"a","algorithm":"gcra","limit":5,"window_us":1},{"name":"b","algorithm":"tokn","limit":5,"window_us":1}]')`, "RL001",
			fmt.Sprintf("ratelimit: limits[1].algorithm 'tokn': unknown (want %s)", allAlgorithms("")), "limit index 1 (name 'b')", nil},
		{`SELECT rl.rl_decide_multi('k', '{a,b}', '{4,9}', '{5,5}', '{1,1}', '{0,0}')`, "RL001",
			fmt.Sprintf("ratelimit: algorithm 9: unknown (want %s)", allAlgorithms("numbers")), "limit index 1 (name 'b')", nil},
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

// allAlgorithms lists the algorithms as the SQL errors do, from core's names:
// "fixed_window, ..., leaky_bucket or gcra", or with their numbers.
func allAlgorithms(numbers string) string {
	var b strings.Builder
	algs := core.Algorithms()
	for i, a := range algs {
		switch {
		case i == len(algs)-1:
			b.WriteString(" or ")
		case i > 0:
			b.WriteString(", ")
		}
		if numbers != "" {
			fmt.Fprintf(&b, "%d ", a)
		}
		b.WriteString(a.String())
	}
	return b.String()
}

// TestConstants: the bounds the SQL functions use are core's.
func TestConstants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var got [8]int64
	require.NoError(t, db.QueryRow(ctx, `SELECT rl._max_time(), rl._max_window(), rl._max_limit(), rl._max_cost(),
		rl._max_log_limit(), rl._max_units(), rl._max_state_value(), rl._lock_tries()`).Scan(
		&got[0], &got[1], &got[2], &got[3], &got[4], &got[5], &got[6], &got[7]))
	require.Equal(t, [8]int64{core.MaxTime, core.MaxWindow, core.MaxLimit, core.MaxCost, core.MaxLogLimit,
		core.MaxUnits, core.MaxStateValue, 100}, got)
	for a := core.Algorithm(0); int(a) <= len(core.Algorithms())+1; a++ { // 0 and one past the last are unknown
		var name string
		require.NoError(t, db.QueryRow(ctx, `SELECT rl.algorithm_name($1)`, int32(a)).Scan(&name))
		require.Equal(t, a.String(), name)
	}
}

// TestParamsChangeSQL: the case of the issue through rl_allow: a key limited
// to 1 per year, switched to 10 per second. The row records the parameters
// that wrote it (l, w, r), so the one unit used carries over: 9 of 10 are
// left at once, and the 10th comes back 0.1 s after the old admission, the
// retry exact (core's TestGCRAYearToSecond). A legacy row (l, w, r 0,
// written before migration 17) is clamped instead: it waits 0.1 s, not a
// year.
func TestParamsChangeSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const t0 = int64(1767225600000000)
	const year, sec = int64(365 * 24 * time.Hour / time.Microsecond), int64(time.Second / time.Microsecond)
	var allowed bool
	var retry int64
	q := `SELECT allowed, retry_after_us FROM rl.rl_allow_us($1, 'gcra', $2, $3, cost => $4, now_us => $5)`

	key := uniqueKey("carry")
	require.NoError(t, db.QueryRow(ctx, q, key, 1, year, 1, t0).Scan(&allowed, &retry))
	require.True(t, allowed)
	var l, w, r int64
	require.NoError(t, db.QueryRow(ctx, `SELECT l, w, r FROM rl.state WHERE key = $1`, key).Scan(&l, &w, &r))
	require.Equal(t, [3]int64{1, year, 1}, [3]int64{l, w, r}, "the parameters that wrote the row")
	require.NoError(t, db.QueryRow(ctx, q, key, 10, sec, 10, t0+1).Scan(&allowed, &retry))
	require.False(t, allowed, "the unit used carries over")
	require.Equal(t, sec/10-1, retry)
	require.NoError(t, db.QueryRow(ctx, q, key, 10, sec, 9, t0+1).Scan(&allowed, &retry))
	require.True(t, allowed, "9 of 10 left at once")

	key = uniqueKey("clamp")
	require.NoError(t, db.QueryRow(ctx, q, key, 1, year, 1, t0).Scan(&allowed, &retry))
	require.True(t, allowed)
	_, err := db.Exec(ctx, `UPDATE rl.state SET l = 0, w = 0, r = 0 WHERE key = $1`, key)
	require.NoError(t, err)
	require.NoError(t, db.QueryRow(ctx, q, key, 10, sec, 1, t0+1).Scan(&allowed, &retry))
	require.False(t, allowed)
	require.Equal(t, sec/10-1, retry)
	require.NoError(t, db.QueryRow(ctx, q, key, 10, sec, 1, t0+1+retry-1).Scan(&allowed, &retry))
	require.False(t, allowed)
	require.Equal(t, int64(1), retry)
	require.NoError(t, db.QueryRow(ctx, q, key, 10, sec, 1, t0+sec/10).Scan(&allowed, &retry))
	require.True(t, allowed)
}
