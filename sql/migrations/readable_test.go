package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
)

// readableNow is the request time of these tests: 2026-01-01 00:00:00 UTC.
const readableNow = int64(1767225600000000)

// TestStatesView: rl.states shows each state by its algorithm's name, its
// limit, and what a peek of cost 1 at the current time (rl.now_us here)
// answers, the same numbers rl_peek gives for that limit; rl_admin reads
// it, rl_app does not (it shows every tenant's keys).
func TestStatesView(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, dbURL)
	prefix := fmt.Sprintf("states:%d:", time.Now().UnixNano())
	_, err := conn.Exec(ctx, fmt.Sprintf("SET rl.now_us = '%d'", readableNow))
	require.NoError(t, err)
	for _, q := range []string{
		// Limited: all 3 taken.
		`SELECT rl.rl_allow($1 || 'a', 'token_bucket', 3, '1 minute', cost => 3)`,
		// Not limited: 1 of 5 taken.
		`SELECT rl.rl_allow($1 || 'b', 'sliding_log', 5, '2 seconds', name => 'log')`,
		// A state written before migration 17 (no l, w, r): NULLs.
		`INSERT INTO rl.state (key, name, algorithm, t, x) VALUES ($1 || 'legacy', 'default', 1, ` + fmt.Sprint(readableNow) + `, 1)`,
	} {
		_, err := conn.Exec(ctx, q, prefix)
		require.NoError(t, err, q)
	}
	type row struct {
		Key, Name, Algorithm string
		Lim                  *int64
		Win                  pgtype.Interval
		Rate, Remaining      *int64
		Limited              *bool
		RetryAt, ResetAt     *time.Time
		ExpiresAt, AsOf      time.Time
	}
	read := func(conn *pgx.Conn) ([]row, error) {
		rows, err := conn.Query(ctx, `SELECT key, name, algorithm, lim, win, rate, remaining, limited, retry_at, reset_at, expires_at, as_of
			FROM rl.states WHERE starts_with(key, $1) ORDER BY key`, prefix)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	}
	got, err := read(conn)
	require.NoError(t, err)
	require.Len(t, got, 3)

	// The numbers of rl_peek for the same limits at the same time: what
	// remains (cost 0) and whether a call of cost 1 passes.
	peek := func(q, key string) (remaining, reset int64, allowed bool, retry int64) {
		t.Helper()
		require.NoError(t, conn.QueryRow(ctx, `SELECT p0.remaining, p0.reset_after_us, p1.allowed, p1.retry_after_us
			FROM `+strings.ReplaceAll(q, "$cost", "0")+` p0, `+strings.ReplaceAll(q, "$cost", "1")+` p1`, key).Scan(&remaining, &reset, &allowed, &retry))
		return remaining, reset, allowed, retry
	}
	remA, resetA, allowedA, retryA := peek(`rl.rl_peek($1, 'token_bucket', 3, '1 minute', cost => $cost)`, prefix+"a")
	require.False(t, allowedA)
	a := got[0]
	require.Equal(t, prefix+"a", a.Key)
	require.Equal(t, "default", a.Name)
	require.Equal(t, core.TokenBucket.String(), a.Algorithm)
	require.Equal(t, int64(3), *a.Lim)
	require.Equal(t, int64(60_000_000), a.Win.Microseconds)
	require.Equal(t, int64(3), *a.Rate, "a token bucket's rate defaults to its limit")
	require.Equal(t, remA, *a.Remaining)
	require.True(t, *a.Limited)
	require.NotZero(t, retryA)
	require.Equal(t, readableNow+retryA, a.RetryAt.UnixMicro())
	require.Equal(t, readableNow+resetA, a.ResetAt.UnixMicro())
	require.Equal(t, readableNow, a.AsOf.UnixMicro())
	require.False(t, a.ExpiresAt.Before(*a.ResetAt), "expires_at is an upper bound of reset_at")

	b := got[1]
	require.Equal(t, core.SlidingLog.String(), b.Algorithm)
	require.Equal(t, "log", b.Name)
	require.Nil(t, b.Rate, "no rate for a window algorithm")
	remB, resetB, allowedB, _ := peek(`rl.rl_peek($1, 'sliding_log', 5, '2 seconds', cost => $cost, name => 'log')`, prefix+"b")
	require.True(t, allowedB)
	require.Equal(t, int64(4), remB, "1 of 5 taken")
	require.Equal(t, remB, *b.Remaining)
	require.Equal(t, readableNow+resetB, b.ResetAt.UnixMicro())
	require.False(t, *b.Limited)
	require.Nil(t, b.RetryAt, "retry_at is NULL when not limited")

	legacy := got[2]
	require.Equal(t, core.FixedWindow.String(), legacy.Algorithm)
	require.Nil(t, legacy.Lim)
	require.Nil(t, legacy.Remaining)
	require.Nil(t, legacy.Limited)

	// rl_admin reads it; rl_app does not.
	_, adminURL := newRole(t, dbURL, true, "states_admin", []string{"rl_admin"})
	admin := connect(t, adminURL)
	_, err = admin.Exec(ctx, fmt.Sprintf("SET rl.now_us = '%d'", readableNow))
	require.NoError(t, err)
	asAdmin, err := read(admin)
	require.NoError(t, err)
	require.Equal(t, got, asAdmin)
	_, appURL := newRole(t, dbURL, true, "states_app", []string{"rl_app"})
	_, err = read(connect(t, appURL))
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "rl_app reading rl.states: %v", err)
	require.Equal(t, "42501", pgErr.Code)
}

// TestReadable: rl.readable turns a decision's µs into intervals and
// timestamptz, NULL for never, and rl.us_to_interval and
// rl.us_to_timestamptz are exact to the µs.
func TestReadable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, dbURL)
	key := fmt.Sprintf("readable:%d", time.Now().UnixNano())
	_, err := conn.Exec(ctx, fmt.Sprintf("SET rl.now_us = '%d'", readableNow))
	require.NoError(t, err)

	type readable struct {
		Allowed                                  bool
		Lim, Remaining                           int64
		RetryAfter, ResetAfter, Delay, NextAfter *pgtype.Interval
		DecidedAt                                time.Time
		RetryAt, ResetAt                         *time.Time
	}
	one := func(q string, args ...any) readable {
		t.Helper()
		rows, err := conn.Query(ctx, q, args...)
		require.NoError(t, err, q)
		r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[readable])
		require.NoError(t, err, q)
		return r
	}
	// Denied: 3 of 3 taken, the next in 20 s.
	one(`SELECT r.* FROM rl.rl_allow($1, 'token_bucket', 3, '1 minute', cost => 3) d, rl.readable(d) r`, key)
	r := one(`SELECT r.* FROM rl.rl_allow($1, 'token_bucket', 3, '1 minute') d, rl.readable(d) r`, key)
	require.False(t, r.Allowed)
	require.Equal(t, int64(20_000_000), r.RetryAfter.Microseconds)
	require.Equal(t, int64(60_000_000), r.ResetAfter.Microseconds)
	require.Equal(t, readableNow, r.DecidedAt.UnixMicro())
	require.Equal(t, readableNow+20_000_000, r.RetryAt.UnixMicro())
	require.Equal(t, readableNow+60_000_000, r.ResetAt.UnixMicro())
	// Never: a cost above the limit is -1 µs, NULL here.
	r = one(`SELECT r.* FROM rl.rl_peek($1, 'token_bucket', 3, '1 minute', cost => 4) d, rl.readable(d) r`, key)
	require.False(t, r.Allowed)
	require.Nil(t, r.RetryAfter)
	require.Nil(t, r.RetryAt)

	// The multi-limit rows.
	var name string
	var retry *pgtype.Interval
	require.NoError(t, conn.QueryRow(ctx, `SELECT r.name, r.retry_after FROM rl.rl_peek_multi($1,
		'[{"name": "m", "algorithm": "token_bucket", "limit": 3, "window": "1 minute"}]', 4) d, rl.readable(d) r`, key).Scan(&name, &retry))
	require.Equal(t, "m", name)
	require.Nil(t, retry)

	for _, us := range []int64{0, 1, 999_999, 86_400_000_000, core.MaxWindow} {
		var iv pgtype.Interval
		var ts time.Time
		require.NoError(t, conn.QueryRow(ctx, `SELECT rl.us_to_interval($1), rl.us_to_timestamptz($2)`, us, readableNow+us).Scan(&iv, &ts))
		require.Equal(t, us, iv.Microseconds+int64(iv.Days)*86_400_000_000, "us_to_interval(%d)", us)
		require.Equal(t, readableNow+us, ts.UnixMicro(), "us_to_timestamptz(%d)", us)
	}
	var never *pgtype.Interval
	require.NoError(t, conn.QueryRow(ctx, `SELECT rl.us_to_interval(-1)`).Scan(&never))
	require.Nil(t, never)
}

// TestErrorsOneContextLine: an error of rl_allow, rl_peek or rl_settle
// (and their _us forms) for bad arguments is raised by the function called,
// so its CONTEXT is one line naming it, none of rl's internal functions,
// and its words are those TestErrors checks.
func TestErrorsOneContextLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, dbURL)
	for _, tc := range []struct{ query, function, state, message, detail, hint string }{
		{`SELECT rl.rl_allow('k', 'bogus', 5, '1 minute')`, "rl_allow", "RL001",
			fmt.Sprintf("ratelimit: algorithm 'bogus': unknown (want %s)", allAlgorithms("")), "",
			"The short names fixed, sliding, log, token and leaky are accepted too."},
		{`SELECT rl.rl_allow('k', 'gcra', 0, '1 minute')`, "rl_allow", "RL002",
			fmt.Sprintf("ratelimit: limit 0: outside [1, %d] for %s", core.MaxLimit, core.GCRA), "", ""},
		{`SELECT rl.rl_allow('k', 'gcra', 5, '0 s')`, "rl_allow", "RL003",
			fmt.Sprintf("ratelimit: window '00:00:00': outside [1 µs, %d µs]", core.MaxWindow), "", "The longest window is about 31.7 years."},
		{`SELECT rl.rl_allow('', 'gcra', 5, '1 minute')`, "rl_allow", "RL011",
			"ratelimit: invalid key: it must be 1 to 256 bytes", "The key is 0 bytes long.", ""},
		{`SELECT rl.rl_allow_us('k', 'gcra', 5, 0)`, "rl_allow_us", "RL003",
			fmt.Sprintf("ratelimit: window 0 µs: outside [1, %d] µs", core.MaxWindow), "", ""},
		{`SELECT rl.rl_peek('k', 'fixed', 5, '1 minute', rate => 3)`, "rl_peek", "RL004",
			fmt.Sprintf("ratelimit: rate 3: must be 0 or absent for %s (rate applies to %s, %s and %s)", core.FixedWindow, core.TokenBucket, core.LeakyBucket, core.GCRA), "", ""},
		{`SELECT rl.rl_peek_us('k', 'gcra', 5, 1000000, name => NULL)`, "rl_peek_us", "RL011",
			"ratelimit: invalid limit name: it must be 1 to 256 bytes", "The limit name is NULL.", ""},
		{`SELECT rl.rl_settle('k', 'gcra', 5, '1 minute', NULL)`, "rl_settle", "RL006",
			fmt.Sprintf("ratelimit: settle delta NULL: outside [-%d, %d]", core.MaxCost, core.MaxCost), "", ""},
		{`SELECT rl.rl_settle_us('k', 'gcra', 5, 1000000, 1, now_us => -1)`, "rl_settle_us", "RL007",
			fmt.Sprintf("ratelimit: time -1 µs: outside [0, %d] µs since the Unix epoch", core.MaxTime), "", ""},
	} {
		_, err := conn.Exec(ctx, tc.query)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%s: %v", tc.query, err)
		require.Equal(t, tc.state, pgErr.Code, tc.query)
		require.Equal(t, tc.message, pgErr.Message, tc.query)
		require.Equal(t, tc.detail, pgErr.Detail, tc.query)
		require.Equal(t, tc.hint, pgErr.Hint, tc.query)
		require.NotContains(t, pgErr.Where, "\n", "%s: more than one CONTEXT line", tc.query)
		require.True(t, strings.HasPrefix(pgErr.Where, "PL/pgSQL function "+tc.function+"("), "%s: CONTEXT %q", tc.query, pgErr.Where)
	}
}

// TestMultiErrorsOneContextLine: an error of a multi-limit or batch function
// (rl_allow_multi, rl_peek_multi, rl_settle_multi, rl_decide_multi,
// rl_settle_decide, rl_decide_batch) for bad arguments is raised by the
// function called, so its CONTEXT is one line naming it, with the words and
// SQLSTATE it had when a helper raised it. Rows already there (the one
// statement ways of rl_decide_multi) change nothing, and a limit's bad
// parameters are reported before an earlier limit's corrupt stored state,
// as Go's pgstore reports them.
func TestMultiErrorsOneContextLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, dbURL)
	key := fmt.Sprintf("multictx_%d", time.Now().UnixNano())
	// Rows for limits a and b of key (the one statement ways), and a
	// corrupt GCRA state (y after t) for limit c of key || 'bad'.
	_, err := conn.Exec(ctx, `SELECT count(*) FROM rl.rl_decide_multi($1, '{a,b}', '{6,6}', '{5,5}', '{60000000,60000000}', '{0,0}')`, key)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO rl.state (key, name, algorithm, t, x, y) VALUES ($1::text || 'bad', 'c', 6, 0, 0, 5)`, key)
	require.NoError(t, err)
	limit0 := fmt.Sprintf("ratelimit: limit 0: outside [1, %d] for %s", core.MaxLimit, core.GCRA)
	cost := fmt.Sprintf("ratelimit: cost -1: outside [0, %d]", core.MaxCost)
	delta := fmt.Sprintf("ratelimit: settle delta NULL: outside [-%d, %d]", core.MaxCost, core.MaxCost)
	now := fmt.Sprintf("ratelimit: time -1 µs: outside [0, %d] µs since the Unix epoch", core.MaxTime)
	limits := "ratelimit: bad limit list (ErrLimits)"
	gcra := `{"name": "a", "algorithm": "gcra", "limit": 5, "window": "1 minute"}`
	zero := `{"name": "b", "algorithm": "gcra", "limit": 0, "window": "1 minute"}`
	for _, tc := range []struct{ query, function, state, message, detail, hint string }{
		// rl_decide_multi: the way of 0011, the one statement ways (rows
		// there), the shadow way.
		{`SELECT * FROM rl.rl_decide_multi($1::text || 'new', '{a,b}', '{6,6}', '{5,0}', '{60000000,60000000}', '{0,0}')`,
			"rl_decide_multi", "RL002", limit0, "limit index 1 (name 'b')", ""},
		{`SELECT * FROM rl.rl_decide_multi($1, '{a,b}', '{6,6}', '{5,0}', '{60000000,60000000}', '{0,0}')`,
			"rl_decide_multi", "RL002", limit0, "limit index 1 (name 'b')", ""},
		{`SELECT * FROM rl.rl_decide_multi($1, '{a,b}', '{6,6}', '{5,5}', '{60000000,60000000}', '{0,0}', cost => -1)`,
			"rl_decide_multi", "RL006", cost, "limit index 0 (name 'a')", ""},
		{`SELECT * FROM rl.rl_decide_multi($1, '{a}', '{6}', '{5}', '{60000000}', '{0}', cost => -1)`,
			"rl_decide_multi", "RL006", cost, "limit index 0 (name 'a')", ""},
		{`SELECT * FROM rl.rl_decide_multi($1, '{a}', '{6}', '{5}', '{60000000}', '{0}', cost => -1, take => false)`,
			"rl_decide_multi", "RL006", cost, "limit index 0 (name 'a')", ""},
		{`SELECT * FROM rl.rl_decide_multi('', '{a}', '{6}', '{5}', '{60000000}', '{0}')`,
			"rl_decide_multi", "RL011", "ratelimit: invalid key: it must be 1 to 256 bytes", "The key is 0 bytes long.", ""},
		{`SELECT * FROM rl.rl_decide_multi($1, '{a,a}', '{6,6}', '{5,5}', '{60000000,60000000}', '{0,0}')`,
			"rl_decide_multi", "RL010", limits, "limit index 1: duplicate name 'a'", ""},
		{`SELECT * FROM rl.rl_decide_multi($1, '{a,b}', '{6}', '{5,5}', '{60000000,60000000}', '{0,0}')`,
			"rl_decide_multi", "RL010", limits, "limit index 0: the parameter arrays differ in length", ""},
		{`SELECT * FROM rl.rl_decide_multi($1, '{}', '{}', '{}', '{}', '{}')`,
			"rl_decide_multi", "RL010", limits, "limit index 0: no limits", ""},
		{`SELECT * FROM rl.rl_decide_multi($1, '{a,b}', '{6,6}', '{5,5}', '{60000000,60000000}', '{0,0}', shadows => '{t}')`,
			"rl_decide_multi", "RL010", limits, "limit index 0: shadows needs one flag per limit", ""},
		{`SELECT * FROM rl.rl_decide_multi($1, '{a,b}', '{6,6}', '{0,5}', '{60000000,0}', '{0,0}', shadows => '{f,t}')`,
			"rl_decide_multi", "RL003", fmt.Sprintf("ratelimit: window 0 µs: outside [1, %d] µs", core.MaxWindow), "limit index 1 (name 'b')", ""},
		// Parameters before state: c's corrupt state is found after b's limit.
		{`SELECT * FROM rl.rl_decide_multi($1::text || 'bad', '{c,b}', '{6,6}', '{5,0}', '{60000000,60000000}', '{0,0}')`,
			"rl_decide_multi", "RL002", limit0, "limit index 1 (name 'b')", ""},
		{`SELECT * FROM rl.rl_settle_decide($1, '{a,b}', '{6,6}', '{5,5}', '{60000000,60000000}', '{0,0}', NULL)`,
			"rl_settle_decide", "RL006", delta, "limit index 0 (name 'a')", ""},
		{`SELECT * FROM rl.rl_settle_decide($1, '{a,b}', '{6,6}', '{5,5}', '{60000000,60000000}', '{0,0}', 1, now_us => -1)`,
			"rl_settle_decide", "RL007", now, "limit index 0 (name 'a')", ""},
		{`SELECT * FROM rl.rl_allow_multi($1, '[` + gcra + `, ` + zero + `]')`,
			"rl_allow_multi", "RL002", limit0, "limit index 1 (name 'b')", ""},
		{`SELECT * FROM rl.rl_allow_multi($1, '[{"name": "a", "algorithm": "gcrx", "limit": 5, "window": "1 minute"}]')`,
			"rl_allow_multi", "RL001",
			fmt.Sprintf("ratelimit: limits[0].algorithm 'gcrx': unknown (want %s)", allAlgorithms("")), "limit index 0 (name 'a')",
			"The short names fixed, sliding, log, token and leaky, and the numbers 1 to 6, are accepted too."},
		{`SELECT * FROM rl.rl_allow_multi('', '[` + gcra + `]')`,
			"rl_allow_multi", "RL011", "ratelimit: invalid key: it must be 1 to 256 bytes", "The key is 0 bytes long.", ""},
		{`SELECT * FROM rl.rl_allow_multi($1, '[]')`,
			"rl_allow_multi", "RL010", limits, "limits must be a non-empty JSON array of objects", ""},
		{`SELECT * FROM rl.rl_peek_multi($1, '[{"name": "a", "algorithm": "gcra", "limit": 5.5, "window": "1 minute"}]')`,
			"rl_peek_multi", "22023", "ratelimit: limits[0].limit must be an integer, not 5.5", "", ""},
		{`SELECT * FROM rl.rl_peek_multi($1, '[` + gcra + `, {"name": "b", "algorithm": "gcra", "limit": 5, "window": "1 minute", "rate": "x"}]')`,
			"rl_peek_multi", "22023", `ratelimit: limits[1].rate must be an integer, not "x"`, "", ""},
		{`SELECT * FROM rl.rl_peek_multi($1, '[` + gcra + `, {"name": "a", "algorithm": "gcra", "limit": 5, "window": "1 minute"}]')`,
			"rl_peek_multi", "RL010", limits, "limits[1]: duplicate name 'a'", ""},
		{`SELECT * FROM rl.rl_settle_multi($1, '[{"name": "a", "algorithm": "gcra", "limit": 5, "window": 5}]', 1)`,
			"rl_settle_multi", "22023", `ratelimit: limits[0].window must be an interval string such as "1 minute"`, "", ""},
		{`SELECT * FROM rl.rl_settle_multi($1, '[{"name": "a", "algorithm": "gcra", "limit": 5, "window": "1 minute", "shadow": 1}]', 1)`,
			"rl_settle_multi", "RL010", limits, "limits[0].shadow must be true or false", ""},
		{`SELECT * FROM rl.rl_settle_multi($1, '[` + gcra + `]', NULL)`,
			"rl_settle_multi", "RL006", delta, "limit index 0 (name 'a')", ""},
		// A shadow settle checks the delta before the limits.
		{`SELECT * FROM rl.rl_settle_multi($1, '[{"name": "a", "algorithm": "gcra", "limit": 0, "window": "1 minute", "shadow": true}]', NULL)`,
			"rl_settle_multi", "RL006", delta, "limit index 0 (name 'a')", ""},
		{`SELECT * FROM rl.rl_decide_batch(ARRAY[$1::text], '{a,b}', '{6,6}', '{5,5}', '{60000000,60000000}', '{0,0}')`,
			"rl_decide_batch", "RL010", limits, "rl_decide_batch: without limit_counts, each request has one limit", ""},
		{`SELECT * FROM rl.rl_decide_batch(ARRAY[$1::text], '{a}', '{6}', '{5}', '{60000000}', '{0,0}')`,
			"rl_decide_batch", "RL010", limits, "rl_decide_batch: keys, costs, now_us, take and settle need one element per request, " +
				"names, algorithms, lims, windows_us, rates and shadows one per limit", ""},
		{`SELECT * FROM rl.rl_decide_batch(ARRAY[$1::text], '{a,b}', '{6,6}', '{5,5}', '{60000000,60000000}', '{0,0}', limit_counts => '{1}')`,
			"rl_decide_batch", "RL010", limits, "rl_decide_batch: limit_counts needs one count (0 or more) per request, adding up to the number of limits", ""},
	} {
		args := []any{key}
		if !strings.Contains(tc.query, "$1") {
			args = nil
		}
		_, err := conn.Exec(ctx, tc.query, args...)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%s: %v", tc.query, err)
		require.Equal(t, tc.state, pgErr.Code, tc.query)
		require.Equal(t, tc.message, pgErr.Message, tc.query)
		require.Equal(t, tc.detail, pgErr.Detail, tc.query)
		require.Equal(t, tc.hint, pgErr.Hint, tc.query)
		require.NotContains(t, pgErr.Where, "\n", "%s: more than one CONTEXT line", tc.query)
		require.True(t, strings.HasPrefix(pgErr.Where, "PL/pgSQL function "+tc.function+"("), "%s: CONTEXT %q", tc.query, pgErr.Where)
	}
	// The corrupt state alone is still an error (the decision finds it).
	_, err = conn.Exec(ctx, `SELECT * FROM rl.rl_decide_multi($1::text || 'bad', '{c,b}', '{6,6}', '{5,5}', '{60000000,60000000}', '{0,0}')`, key)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, "RL008", pgErr.Code)
	require.Equal(t, "limit index 0 (name 'c')", pgErr.Detail)
}

// TestCreateLimitTrigger: rl.create_limit_trigger refuses bad arguments at
// once, with the words of the error the first INSERT would raise on a
// trigger created by hand with them, and creates nothing; good ones give a
// trigger that limits. rl.check_limit_trigger checks a trigger made by hand
// the same way.
func TestCreateLimitTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, dbURL)
	table := fmt.Sprintf("trg_create_%d", time.Now().UnixNano())
	_, err := conn.Exec(ctx, `CREATE TABLE `+table+` (id bigserial PRIMARY KEY, user_id bigint, body text)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), `DROP TABLE `+table) })
	pgError := func(err error) *pgconn.PgError {
		t.Helper()
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "want a PostgreSQL error, got %v", err)
		return pgErr
	}
	triggers := func() int {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal`, table).Scan(&n))
		return n
	}
	for _, tc := range []struct {
		name string
		call string // the arguments of rl.create_limit_trigger after the table
		args string // the same as the trigger's arguments
	}{
		{"algorithm", `'user_id', 'tokn', 5, '1 minute'`, `'user_id', 'tokn', '5', '00:01:00'`},
		{"limit", `'user_id', 'sliding_log', 5000, '1 minute'`, `'user_id', 'sliding_log', '5000', '00:01:00'`},
		{"window", `'user_id', 'gcra', 5, '0 s'`, `'user_id', 'gcra', '5', '00:00:00'`},
		{"units", `'user_id', 'gcra', 1099511627776, '1 day'`, `'user_id', 'gcra', '1099511627776', '1 day'`},
		{"cost", `'user_id', 'gcra', 5, '1 minute', -1`, `'user_id', 'gcra', '5', '00:01:00', '-1'`},
		{"column", `'author', 'gcra', 5, '1 minute'`, `'author', 'gcra', '5', '00:01:00'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trigger := "rl_limit_" + tc.name
			_, err := conn.Exec(ctx, fmt.Sprintf(`SELECT rl.create_limit_trigger('%s', %s, trigger_name => '%s')`, table, tc.call, trigger))
			created := pgError(err)
			require.Zero(t, triggers(), "a trigger was created")
			require.NotContains(t, created.Where, "\n", "more than one CONTEXT line")
			// The same arguments by hand: the first INSERT fails with the same words.
			tx, err := conn.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			_, err = tx.Exec(ctx, fmt.Sprintf(`CREATE TRIGGER %s BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit(%s)`, trigger, table, tc.args))
			require.NoError(t, err)
			_, err = tx.Exec(ctx, `SAVEPOINT s`)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, fmt.Sprintf(`SELECT rl.check_limit_trigger('%s', '%s')`, table, trigger))
			checked := pgError(err)
			_, err = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, `INSERT INTO `+table+` (user_id, body) VALUES (1, 'x')`)
			inserted := pgError(err)
			for _, e := range []*pgconn.PgError{created, checked} {
				require.Equal(t, inserted.Code, e.Code)
				require.Equal(t, inserted.Message, e.Message)
				require.Equal(t, inserted.Detail, e.Detail)
				require.Equal(t, inserted.Hint, e.Hint)
			}
		})
	}

	// Good arguments: the trigger exists, checks clean and limits.
	var trigger string
	require.NoError(t, conn.QueryRow(ctx, fmt.Sprintf(`SELECT rl.create_limit_trigger('%s', 'user_id', 'fixed_window', 2, '1 hour', key_prefix => 'ü:', name => 'posts')`, table)).Scan(&trigger))
	require.Equal(t, "rl_limit_posts", trigger)
	var args []string
	require.NoError(t, conn.QueryRow(ctx, `SELECT rl.check_limit_trigger($1, $2)`, table, trigger).Scan(&args))
	require.Equal(t, []string{"user_id", "fixed_window", "2", "01:00:00", "1", "ü:", "posts"}, args)
	user := time.Now().UnixNano()
	for i := range 2 {
		_, err := conn.Exec(ctx, `INSERT INTO `+table+` (user_id, body) VALUES ($1, 'x')`, user)
		require.NoError(t, err, "insert %d", i+1)
	}
	_, err = conn.Exec(ctx, `INSERT INTO `+table+` (user_id, body) VALUES ($1, 'x')`, user)
	require.Equal(t, "RL429", pgError(err).Code)
	require.True(t, exists(t, conn, `SELECT FROM rl.state WHERE key = $1 AND name = 'posts'`, fmt.Sprintf("ü:%d", user)))

	// Not a trigger of rl.enforce_limit(), or not there.
	_, err = conn.Exec(ctx, `SELECT rl.check_limit_trigger($1, 'none')`, table)
	require.Equal(t, "42704", pgError(err).Code)
}

// TestKeyRule: SQL takes the keys the stores take, 1 to 256 bytes of any
// text (spaces and non-ASCII included), as rl.Limiter does with AnyKey; by
// default rl.Limiter takes printable ASCII without spaces only, a subset.
// SQL keeps the stores' rule because pgstore, and through it a Limiter
// with AnyKey, and triggers keying on any text column, write these keys.
func TestKeyRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, dbURL)
	anyKey, err := rl.New(rl.Config{AnyKey: true})
	require.NoError(t, err)
	defer anyKey.Close()
	printable, err := rl.New(rl.Config{})
	require.NoError(t, err)
	defer printable.Close()
	for _, tc := range []struct {
		key           string
		printableOnly bool // refused by the default Limiter, taken by SQL
	}{
		{"user:42", false},
		{strings.Repeat("k", 256), false},
		{"", false},
		{strings.Repeat("k", 257), false},
		{strings.Repeat("é", 128), true}, // 256 bytes
		{strings.Repeat("é", 129), true}, // 258 bytes
		{"user 42", true},
		{"ключ", true},
		{"tab\there", true},
	} {
		_, sqlErr := conn.Exec(ctx, `SELECT rl.rl_peek($1, 'gcra', 5, '1 minute')`, tc.key)
		if sqlErr != nil {
			var pgErr *pgconn.PgError
			require.True(t, errors.As(sqlErr, &pgErr), "%q: %v", tc.key, sqlErr)
			require.Equal(t, "RL011", pgErr.Code, "%q", tc.key)
		}
		goErr := anyKey.CheckKey(tc.key)
		require.Equal(t, goErr == nil, sqlErr == nil, "key %q: SQL and rl.Limiter with AnyKey disagree: %v / %v", tc.key, sqlErr, goErr)
		if tc.printableOnly && sqlErr == nil {
			require.ErrorIs(t, printable.CheckKey(tc.key), rl.ErrInvalidKey, "%q", tc.key)
		} else {
			require.Equal(t, goErr == nil, printable.CheckKey(tc.key) == nil, "%q", tc.key)
		}
	}
}
