package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/pgstore"
	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/store"
)

// century is 100 years in µs.
const century = int64(100 * 365 * 24 * 3600 * 1_000_000)

// newRole creates a role named rltest_<random>_<suffix> (LOGIN with a random
// password, or NOLOGIN), member of the roles in memberOf, and returns its
// name and the URL of dbURL with it as the user (the password is in the
// URL, so the server may use trust or password authentication). The role is
// dropped when t ends, after DROP OWNED BY in the databases of dropIn.
func newRole(t *testing.T, dbURL string, login bool, suffix string, memberOf []string, dropIn ...string) (string, string) {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	name := "rltest_" + hex.EncodeToString(b) + "_" + suffix
	_, _ = rand.Read(b)
	pw := hex.EncodeToString(b)
	su := connect(t, pgtest.URL())
	kind := "NOLOGIN"
	if login {
		kind = "LOGIN PASSWORD '" + pw + "'"
	}
	_, err := su.Exec(ctx, "CREATE ROLE "+name+" "+kind)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, d := range dropIn {
			c, err := pgx.Connect(ctx, d)
			if err != nil {
				t.Errorf("drop role %s: %v", name, err)
				return
			}
			_, err = c.Exec(ctx, "DROP OWNED BY "+name)
			c.Close(ctx)
			if err != nil {
				t.Errorf("drop owned by %s: %v", name, err)
			}
		}
		c, err := pgx.Connect(ctx, pgtest.URL())
		if err != nil {
			t.Errorf("drop role %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP ROLE "+name); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	for _, m := range memberOf {
		_, err := su.Exec(ctx, "GRANT "+m+" TO "+name)
		require.NoError(t, err)
	}
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.User = url.UserPassword(name, pw)
	return name, u.String()
}

// serverNow is the database clock in µs.
func serverNow(t *testing.T, conn *pgx.Conn) int64 {
	t.Helper()
	var now int64
	require.NoError(t, conn.QueryRow(context.Background(),
		`SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`).Scan(&now))
	return now
}

// TestRequestTimeUntrusted: an rl_app role passing a time a century ahead
// (now_us, or SET rl.now_us) decides on the database clock; nothing at that
// time is stored, so the key is not locked for a century. A trusted role
// (a member of rl_admin, or the owner) is still believed.
func TestRequestTimeUntrusted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner := connect(t, dbURL)
	_, appURL := newRole(t, dbURL, true, "app", []string{"rl_app"}, dbURL)
	_, adminURL := newRole(t, dbURL, true, "admin", []string{"rl_admin"}, dbURL)
	app := connect(t, appURL)
	admin := connect(t, adminURL)

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	run := hex.EncodeToString(b)
	const hour = int64(3_600_000_000)
	now := serverNow(t, owner)
	future := now + century

	// Each way of passing a time: the call decides at the server's time, and
	// a later call at the server's time waits at most the hour of the limit.
	for _, tc := range []struct {
		name  string
		setup string // run first on the session (a SET), reset after
		q     string // $1 key, $2 future time
	}{
		{"rl_allow", "", `SELECT allowed, now_us FROM rl.rl_allow($1, 'gcra', 1, '1 hour', now_us => $2)`},
		{"rl_allow_us", "", `SELECT allowed, now_us FROM rl.rl_allow_us($1, 'gcra', 1, 3600000000, now_us => $2)`},
		{"rl_allow_multi", "", `SELECT allowed, now_us FROM rl.rl_allow_multi($1,
			'[{"name": "default", "algorithm": "gcra", "limit": 1, "window": "1 hour"}]', now_us => $2)`},
		{"rl_decide_multi", "", `SELECT allowed, now_us FROM rl.rl_decide_multi($1, '{default}', '{6}', '{1}',
			'{3600000000}', '{0}', 1, $2)`},
		{"rl_decide_multi_two", "", `SELECT bool_and(allowed), min(now_us) FROM rl.rl_decide_multi($1,
			'{default,other}', '{6,1}', '{1,5}', '{3600000000,3600000000}', '{0,0}', 1, $2)`},
		{"SET rl.now_us", "SET rl.now_us = '%d'", `SELECT allowed, now_us FROM rl.rl_allow($1, 'gcra', 1, '1 hour') WHERE $2::bigint IS NOT NULL`},
		{"rl_settle", "", `SELECT allowed, now_us FROM rl.rl_settle($1, 'gcra', 1, '1 hour', 1, now_us => $2)`},
		{"rl_settle_us", "", `SELECT allowed, now_us FROM rl.rl_settle_us($1, 'gcra', 1, 3600000000, 1, now_us => $2)`},
		{"rl_settle_multi", "", `SELECT allowed, now_us FROM rl.rl_settle_multi($1,
			'[{"name": "default", "algorithm": "gcra", "limit": 1, "window": "1 hour"}]', 1, now_us => $2)`},
		{"rl_settle_decide", "", `SELECT bool_and(allowed), min(now_us) FROM rl.rl_settle_decide($1,
			'{default,other}', '{6,1}', '{1,5}', '{3600000000,3600000000}', '{0,0}', 1, $2)`},
		{"SET rl.now_us settle", "SET rl.now_us = '%d'", `SELECT allowed, now_us FROM rl.rl_settle($1, 'gcra', 1, '1 hour', 1) WHERE $2::bigint IS NOT NULL`},
	} {
		key := "time:" + run + ":" + tc.name
		if tc.setup != "" {
			_, err := app.Exec(ctx, fmt.Sprintf(tc.setup, future))
			require.NoError(t, err)
		}
		var (
			allowed bool
			at      int64
		)
		require.NoError(t, app.QueryRow(ctx, tc.q, key, future).Scan(&allowed, &at), tc.name)
		require.True(t, allowed, tc.name)
		require.Less(t, at, now+hour, "%s: decided at the caller's time", tc.name)
		require.GreaterOrEqual(t, at, now, tc.name)
		if tc.setup != "" {
			_, err := app.Exec(ctx, "RESET rl.now_us")
			require.NoError(t, err)
		}
		// The row (as the owner sees it) expires within the hour.
		var exp int64
		require.NoError(t, owner.QueryRow(ctx, `SELECT max(expires_at) FROM rl.state WHERE key = $1`, key).Scan(&exp))
		require.Less(t, exp, serverNow(t, owner)+hour+expiryGrain+1, "%s: expires_at at the caller's time", tc.name)
		// The next call on the server's clock: denied for under an hour, not a century.
		var retry int64
		require.NoError(t, app.QueryRow(ctx,
			`SELECT retry_after_us FROM rl.rl_allow($1, 'gcra', 1, '1 hour')`, key).Scan(&retry))
		require.Positive(t, retry, tc.name)
		require.LessOrEqual(t, retry, hour, "%s: locked beyond the limit's hour", tc.name)
	}

	// Peeking with a time: the answer is at the server's time too.
	var at int64
	require.NoError(t, app.QueryRow(ctx, `SELECT now_us FROM rl.rl_peek('time:'||$1::text, 'gcra', 1, '1 hour', now_us => $2)`,
		run, future).Scan(&at))
	require.Less(t, at, now+hour)
	require.NoError(t, app.QueryRow(ctx, `SELECT now_us FROM rl.rl_peek_us('time:'||$1::text, 'gcra', 1, 3600000000, now_us => 5)`,
		run).Scan(&at))
	require.GreaterOrEqual(t, at, now, "a time in the past is ignored as well")

	// Trusted: rl_admin's and the owner's times are honoured.
	for _, c := range []*pgx.Conn{admin, owner} {
		require.NoError(t, c.QueryRow(ctx, `SELECT now_us FROM rl.rl_allow('trusted:'||$1::text, 'gcra', 1, '1 hour', now_us => $2)`,
			run, future).Scan(&at))
		require.Equal(t, future, at)
		require.NoError(t, c.QueryRow(ctx, `SELECT now_us FROM rl.rl_settle('trusted:'||$1::text, 'gcra', 1, '1 hour', -1, now_us => $2)`,
			run, future).Scan(&at))
		require.Equal(t, future, at)
		_, err := c.Exec(ctx, fmt.Sprintf("SET rl.now_us = '%d'", future+1))
		require.NoError(t, err)
		require.NoError(t, c.QueryRow(ctx, `SELECT now_us FROM rl.rl_peek('trusted:'||$1::text, 'gcra', 1, '1 hour')`,
			run).Scan(&at))
		require.Equal(t, future+1, at)
		_, err = c.Exec(ctx, "RESET rl.now_us")
		require.NoError(t, err)
	}

	// A superuser session acting as rl_app (SET ROLE) is rl_app.
	_, err := owner.Exec(ctx, "SET ROLE rl_app")
	require.NoError(t, err)
	require.NoError(t, owner.QueryRow(ctx, `SELECT now_us FROM rl.rl_peek('x', 'gcra', 1, '1 hour', now_us => $1)`,
		future).Scan(&at))
	require.Less(t, at, now+hour)
	_, err = owner.Exec(ctx, "RESET ROLE")
	require.NoError(t, err)
}

// TestExpireTrustedOnly: rl_expire deletes every tenant's idle rows at the
// time it is given, so rl_app may not run it; rl_admin and the owner may.
func TestExpireTrustedOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewMigrated(t)
	owner := connect(t, u)
	_, appURL := newRole(t, u, true, "app", []string{"rl_app"}, u)
	_, adminURL := newRole(t, u, true, "admin", []string{"rl_admin"}, u)
	app := connect(t, appURL)
	admin := connect(t, adminURL)

	_, err := owner.Exec(ctx, `SELECT rl.rl_allow('live:' || i, 'fixed', 5, '1 hour') FROM generate_series(1, 10) i`)
	require.NoError(t, err)
	count := func() (n int64) {
		require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM rl.state`).Scan(&n))
		return n
	}
	for _, q := range []string{
		`SELECT rl.rl_expire(253402300799999999, NULL)`,
		`SELECT rl.rl_expire()`,
	} {
		_, err := app.Exec(ctx, q)
		require.Equal(t, "42501", sqlState(err), "%s: %v", q, err)
	}
	require.Equal(t, int64(10), count(), "rl_app deleted rows")

	// Even with EXECUTE granted by mistake, the function checks the caller.
	_, err = owner.Exec(ctx, `GRANT EXECUTE ON FUNCTION rl.rl_expire(bigint, integer) TO rl_app`)
	require.NoError(t, err)
	_, err = app.Exec(ctx, `SELECT rl.rl_expire(253402300799999999, NULL)`)
	require.Equal(t, "42501", sqlState(err), "%v", err)
	require.ErrorContains(t, err, "rl.rl_expire is for the owner of schema rl and members of rl_admin")
	_, err = owner.Exec(ctx, `REVOKE EXECUTE ON FUNCTION rl.rl_expire(bigint, integer) FROM rl_app`)
	require.NoError(t, err)
	require.Equal(t, int64(10), count())

	var n int64
	require.NoError(t, admin.QueryRow(ctx, `SELECT rl.rl_expire()`).Scan(&n))
	require.Zero(t, n, "nothing is idle on the clock")
	require.NoError(t, admin.QueryRow(ctx, `SELECT rl.rl_expire(253402300799999999, NULL)`).Scan(&n))
	require.Equal(t, int64(10), n, "rl_admin is trusted with the time")
}

// TestTenants: two tenant roles, each limited to its key prefix by
// rl.tenants, logged in as themselves. Neither can charge, peek, reset or
// lock the other's keys through any entry point (the table functions,
// rl.lock_states, pgstore's SQL and Go paths, the trigger), and each can use
// its own.
func TestTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewMigrated(t)
	owner := connect(t, u)
	roleA, urlA := newRole(t, u, true, "ta", []string{"rl_app"}, u)
	roleB, urlB := newRole(t, u, true, "tb", []string{"rl_app"}, u)
	group, _ := newRole(t, u, false, "tgrp", nil, u)
	_, urlC := newRole(t, u, true, "tc", []string{"rl_app", group}, u)
	_, urlPlain := newRole(t, u, true, "plain", []string{"rl_app"}, u)
	_, adminURL := newRole(t, u, true, "admin", []string{"rl_admin"}, u)
	_, err := owner.Exec(ctx, fmt.Sprintf(`INSERT INTO rl.tenants (role, key_prefix) VALUES
		('%s', 'a:'), ('%s', 'b:'), ('%s', 'shared-b:'), ('%s', 'c:')`, roleA, roleB, roleB, group))
	require.NoError(t, err)
	a, b, c := connect(t, urlA), connect(t, urlB), connect(t, urlC)

	// B has state on its keys; A's attempts must leave it exactly as it is.
	for _, k := range []string{"b:1", "shared-b:1"} {
		_, err = b.Exec(ctx, `SELECT rl.rl_allow($1, 'token_bucket', 10, '1 hour'),
			rl.rl_allow($1, 'fixed', 10, '1 hour', name => 'other')`, k)
		require.NoError(t, err)
	}
	rows := func(key string) string {
		var s string
		require.NoError(t, owner.QueryRow(ctx, `SELECT coalesce(string_agg(format('%s %s %s %s %s %s %s', name, algorithm, t, x, y,
			log, expires_at), '; ' ORDER BY name), '') FROM rl.state WHERE key = $1`, key).Scan(&s))
		return s
	}
	before := rows("b:1")
	require.NotEmpty(t, before)

	// Every entry point that names a key, as tenant A: own key fine, B's
	// key, a key of no tenant and an empty-prefix trick all refused.
	calls := []string{
		`SELECT rl.rl_allow($1, 'token_bucket', 10, '1 hour')`,
		`SELECT rl.rl_allow_us($1, 'token_bucket', 10, 3600000000, cost => 10)`,
		`SELECT rl.rl_peek($1, 'token_bucket', 10, '1 hour', cost => 0)`,
		`SELECT rl.rl_peek_us($1, 'token_bucket', 10, 3600000000)`,
		`SELECT * FROM rl.rl_allow_multi($1, '[{"name": "default", "algorithm": "token_bucket", "limit": 10, "window": "1 hour"}]')`,
		`SELECT * FROM rl.rl_peek_multi($1, '[{"name": "default", "algorithm": "token_bucket", "limit": 10, "window": "1 hour"}]')`,
		`SELECT * FROM rl.rl_decide_multi($1, '{default}', '{4}', '{10}', '{3600000000}', '{0}')`,
		`SELECT * FROM rl.rl_decide_multi($1, '{default}', '{4}', '{10}', '{3600000000}', '{0}', take => false)`,
		`SELECT * FROM rl.rl_decide_multi($1, '{default,other}', '{4,1}', '{10,10}', '{3600000000,3600000000}', '{0,0}')`,
		`SELECT rl.rl_settle($1, 'token_bucket', 10, '1 hour', 2)`,
		`SELECT rl.rl_settle_us($1, 'token_bucket', 10, 3600000000, -1)`,
		`SELECT * FROM rl.rl_settle_multi($1, '[{"name": "default", "algorithm": "token_bucket", "limit": 10, "window": "1 hour"}]', 1)`,
		`SELECT * FROM rl.rl_settle_decide($1, '{default,other}', '{4,1}', '{10,10}', '{3600000000,3600000000}', '{0,0}', -1)`,
		`SELECT rl.rl_reset($1, 'other')`,
		`SELECT rl.rl_reset($1)`,
	}
	for _, q := range calls {
		_, err := a.Exec(ctx, q, "a:1")
		require.NoError(t, err, "own key: %s", q)
		for _, k := range []string{"b:1", "shared-b:1", "x:1", "a", "A:1", "b:1a:"} {
			_, err := a.Exec(ctx, q, k)
			require.Equal(t, "42501", sqlState(err), "%s on %q: %v", q, k, err)
		}
	}
	_, err = a.Exec(ctx, calls[0], "b:1")
	require.ErrorContains(t, err, "may not use key 'b:1'")
	require.Equal(t, before, rows("b:1"), "A changed B's state")
	require.Equal(t, "", rows("x:1"), "a refused call created a row")

	// An invalid key is still RL011, checked first.
	_, err = a.Exec(ctx, calls[0], "")
	require.Equal(t, "RL011", sqlState(err), "%v", err)

	// A member of a tenant role (group) is that tenant.
	_, err = c.Exec(ctx, calls[0], "c:1")
	require.NoError(t, err)
	_, err = c.Exec(ctx, calls[0], "a:1")
	require.Equal(t, "42501", sqlState(err), "%v", err)

	// A superuser session acting as A (SET ROLE) is A.
	_, err = owner.Exec(ctx, "SET ROLE "+roleA)
	require.NoError(t, err)
	_, err = owner.Exec(ctx, calls[2], "b:1")
	require.Equal(t, "42501", sqlState(err), "%v", err)
	_, err = owner.Exec(ctx, "RESET ROLE")
	require.NoError(t, err)

	// Roles listed nowhere, rl_admin and the owner use any key.
	for _, uu := range []string{urlPlain, adminURL} {
		_, err := connect(t, uu).Exec(ctx, calls[2], "b:1")
		require.NoError(t, err)
	}
	_, err = owner.Exec(ctx, calls[2], "b:1")
	require.NoError(t, err)

	// The rows themselves and the locking path of the Go decider: no table
	// access, and rl.lock_states is for trusted roles, so A can neither lock,
	// create nor write rows, its own or B's.
	for _, q := range []string{
		`SELECT * FROM rl.lock_states('b:1', '{default}')`,
		`SELECT * FROM rl.lock_states('a:lock', '{default}')`,
		`SELECT * FROM rl.state WHERE key = 'b:1'`,
		`UPDATE rl.state SET t = 0 WHERE key = 'b:1'`,
		`DELETE FROM rl.state WHERE key = 'b:1'`,
		`INSERT INTO rl.tenants VALUES ('` + roleA + `', 'b:')`,
		`DELETE FROM rl.tenants`,
	} {
		_, err := a.Exec(ctx, q)
		require.Equal(t, "42501", sqlState(err), "%s: %v", q, err)
	}
	require.Equal(t, "", rows("a:lock"))
	_, err = owner.Exec(ctx, `GRANT EXECUTE ON FUNCTION rl.lock_states(text, text[]) TO rl_app`)
	require.NoError(t, err)
	_, err = a.Exec(ctx, `SELECT * FROM rl.lock_states('b:1', '{default}')`)
	require.Equal(t, "42501", sqlState(err), "EXECUTE granted by mistake: %v", err)
	_, err = owner.Exec(ctx, `REVOKE EXECUTE ON FUNCTION rl.lock_states(text, text[]) FROM rl_app`)
	require.NoError(t, err)

	// pgstore as tenant A: the SQL path on its own key works and on B's is
	// refused; the Go path (lock_states, then UPDATE) is refused outright.
	req := func(key string, op store.Op) store.Request {
		return store.Request{Key: key, Op: op, Cost: 1,
			Policy: store.MustPolicy([]string{"default"}, core.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: 3_600_000_000})}
	}
	poolA := pgtest.Pool(t, urlA)
	sqlA, err := pgstore.New(poolA, pgstore.Config{Mode: pgstore.ModeSQL, RequestClock: true})
	require.NoError(t, err)
	defer sqlA.Close()
	goA, err := pgstore.New(poolA, pgstore.Config{Mode: pgstore.ModeGo})
	require.NoError(t, err)
	defer goA.Close()
	_, d, err := sqlA.Decide(ctx, req("a:store", store.Take), nil)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	for _, s := range []*pgstore.Store{sqlA, goA} {
		for _, op := range []store.Op{store.Take, store.Peek} {
			_, _, err := s.Decide(ctx, req("b:1", op), nil)
			require.ErrorContains(t, err, "42501")
		}
		require.ErrorContains(t, s.Reset(ctx, "", "b:1", nil), "42501")
		require.ErrorContains(t, s.Reset(ctx, "", "b:1", []string{"default", "other"}), "42501")
	}
	_, _, err = goA.Decide(ctx, req("a:go", store.Take), nil)
	require.ErrorContains(t, err, "42501", "the Go path needs rl_admin")
	require.Equal(t, before, rows("b:1"), "A changed B's state")

	// rl_admin may use the Go path: lock_states, then UPDATE rl.state.
	goAdmin, err := pgstore.New(pgtest.Pool(t, adminURL), pgstore.Config{Mode: pgstore.ModeGo})
	require.NoError(t, err)
	defer goAdmin.Close()
	for range 2 {
		_, d, err = goAdmin.Decide(ctx, req("b:go", store.Take), nil)
		require.NoError(t, err)
	}
	require.Equal(t, int64(8), d.Remaining)

	// The trigger: A owns a table in a schema of its own. Its trigger may
	// name A's keys only; B inserting into it (with A's grant) is held to
	// both prefixes; the owner inserting is held to A's, the table owner's.
	_, err = owner.Exec(ctx, "CREATE SCHEMA "+roleA+" AUTHORIZATION "+roleA)
	require.NoError(t, err)
	_, err = a.Exec(ctx, `
		CREATE TABLE `+roleA+`.posts (id bigserial, who text);
		CREATE TRIGGER own BEFORE INSERT ON `+roleA+`.posts FOR EACH ROW WHEN (NEW.who LIKE 'a:%')
			EXECUTE FUNCTION rl.enforce_limit('who', 'fixed', '100', '1 hour', '1', '', 'posts');
		CREATE TRIGGER theirs BEFORE INSERT ON `+roleA+`.posts FOR EACH ROW WHEN (NEW.who NOT LIKE 'a:%')
			EXECUTE FUNCTION rl.enforce_limit('who', 'fixed', '100', '1 hour', '1', 'b:', 'default');
		GRANT USAGE ON SCHEMA `+roleA+` TO `+roleB+`;
		GRANT INSERT ON `+roleA+`.posts TO `+roleB+`;
		GRANT USAGE ON SEQUENCE `+roleA+`.posts_id_seq TO `+roleB)
	require.NoError(t, err)
	insert := func(c *pgx.Conn, who string) error {
		_, err := c.Exec(ctx, `INSERT INTO `+roleA+`.posts (who) VALUES ($1)`, who)
		return err
	}
	require.NoError(t, insert(a, "a:1"))
	for _, tc := range []struct {
		conn *pgx.Conn
		who  string
	}{
		{a, "1"},      // key b:1 from A: refused (A's prefix)
		{a, "x"},      // key b:x
		{b, "a:2"},    // key a:2 from B: refused (B's prefix)
		{b, "1"},      // key b:1 from B into A's table: refused (the owner's, A's)
		{owner, "1"},  // the owner inserting: held to the table owner's prefix
		{owner, "a:"}, // not a tenant problem: 'a:' → key 'a:' is A's
	} {
		err := insert(tc.conn, tc.who)
		if tc.who == "a:" {
			require.NoError(t, err)
			continue
		}
		require.Equal(t, "42501", sqlState(err), "insert %q: %v", tc.who, err)
	}
	require.Equal(t, before, rows("b:1"), "the trigger changed B's state")
	require.Equal(t, "", rows("b:x"))
}

// TestTenantRefusedBeforeLocking: a tenant naming another tenant's key is
// refused (42501) before any row is touched, so a row another session holds
// locked neither delays the refusal nor turns it into a lock timeout
// (55P03): the wait would show as 55P03 under lock_timeout. 0010's fast
// path of rl.rl_decide_multi locked the row first and looked at rl.tenants
// after; 0011 looks first.
func TestTenantRefusedBeforeLocking(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewMigrated(t)
	owner := connect(t, u)
	roleA, urlA := newRole(t, u, true, "lka", []string{"rl_app"}, u)
	_, err := owner.Exec(ctx, `INSERT INTO rl.tenants (role, key_prefix) VALUES ($1, 'a:')`, roleA)
	require.NoError(t, err)
	// B's rows exist (the fast path only runs on an existing row) and
	// another session holds them locked.
	_, err = owner.Exec(ctx, `SELECT rl.rl_allow('b:1', 'token_bucket', 10, '1 hour'),
		rl.rl_allow('b:1', 'fixed', 10, '1 hour', name => 'other')`)
	require.NoError(t, err)
	holder := connect(t, u)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT FROM rl.state WHERE key = 'b:1' FOR UPDATE) l`).Scan(&n))
	require.Equal(t, 2, n)

	a := connect(t, urlA)
	_, err = a.Exec(ctx, `SET lock_timeout = '500ms'`)
	require.NoError(t, err)
	for _, q := range []string{
		`SELECT rl.rl_allow($1, 'token_bucket', 10, '1 hour')`,
		`SELECT rl.rl_allow_us($1, 'token_bucket', 10, 3600000000)`,
		`SELECT rl.rl_peek($1, 'token_bucket', 10, '1 hour')`,
		`SELECT * FROM rl.rl_allow_multi($1, '[{"name": "default", "algorithm": "token_bucket", "limit": 10, "window": "1 hour"}]')`,
		`SELECT * FROM rl.rl_peek_multi($1, '[{"name": "default", "algorithm": "token_bucket", "limit": 10, "window": "1 hour"}]')`,
		`SELECT * FROM rl.rl_decide_multi($1, '{default}', '{4}', '{10}', '{3600000000}', '{0}')`,
		`SELECT * FROM rl.rl_decide_multi($1, '{default}', '{4}', '{10}', '{3600000000}', '{0}', cost => 0)`,
		`SELECT * FROM rl.rl_decide_multi($1, '{default}', '{4}', '{10}', '{3600000000}', '{0}', take => false)`,
		`SELECT * FROM rl.rl_decide_multi($1, '{default,other}', '{4,1}', '{10,10}', '{3600000000,3600000000}', '{0,0}')`,
		`SELECT rl.rl_reset($1, 'other')`,
		`SELECT rl.rl_reset($1)`,
	} {
		_, err := a.Exec(ctx, q, "b:1")
		require.Equal(t, "42501", sqlState(err), "%s: %v", q, err)
	}
	// rl_decide_batch gives the request its 42501 row and locks nothing:
	// the other request, on A's own key, is decided.
	rows, err := a.Query(ctx, `SELECT req, coalesce(error_code, ''), allowed
		FROM rl.rl_decide_batch('{b:1,a:1}', '{default,default}', '{4,4}', '{10,10}', '{3600000000,3600000000}', '{0,0}')
		ORDER BY req`)
	require.NoError(t, err)
	type row struct {
		Request int
		Code    string
		Allowed bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	require.Equal(t, []row{{0, "42501", false}, {1, "", true}}, got)
	require.NoError(t, tx.Rollback(ctx))
}

// TestNullRate: a NULL rate is ErrRate, as a NULL limit is ErrLimit, in every
// function; a missing rate (a default) is still 0.
func TestNullRate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, dbURL)
	for _, q := range []string{
		`SELECT rl.rl_allow('nr', 'token_bucket', 10, '1 minute', rate => NULL)`,
		`SELECT rl.rl_allow_us('nr', 'fixed', 10, 60000000, rate => NULL)`,
		`SELECT rl.rl_peek('nr', 'gcra', 10, '1 minute', rate => NULL)`,
		`SELECT rl.rl_peek_us('nr', 'sliding_log', 10, 60000000, rate => NULL)`,
		`SELECT * FROM rl.rl_allow_multi('nr', '[{"name": "a", "algorithm": "gcra", "limit": 3, "window_us": 1000000, "rate": null}]')`,
		`SELECT * FROM rl.rl_peek_multi('nr', '[{"name": "a", "algorithm": "fixed", "limit": 3, "window_us": 1000000},
			{"name": "b", "algorithm": "gcra", "limit": 3, "window_us": 1000000, "rate": null}]')`,
		`SELECT * FROM rl.rl_decide_multi('nr', '{a}', '{6}', '{3}', '{1000000}', '{NULL}')`,
		`SELECT * FROM rl.rl_decide_multi('nr', '{a,b}', '{6,4}', '{3,3}', '{1000000,1000000}', '{0,NULL}')`,
		`SELECT * FROM rl.decide(6, 3, 1000000, NULL, 0, 0, 0, 0, '{}', 0, 1)`,
		`SELECT * FROM rl.decide_all(ARRAY[ROW(6, 3, 1000000, NULL)]::rl.limit_spec[], NULL, 0, 1)`,
	} {
		_, err := conn.Exec(ctx, q)
		require.Equal(t, "RL004", sqlState(err), "%s: %v", q, err)
	}
	// The check order is the core's: the algorithm, limit and window first.
	_, err := conn.Exec(ctx, `SELECT * FROM rl.decide(6, 0, 1000000, NULL, 0, 0, 0, 0, '{}', 0, 1)`)
	require.Equal(t, "RL002", sqlState(err), "%v", err)
	for _, q := range []string{
		`SELECT rl.rl_peek('nr', 'token_bucket', 10, '1 minute')`,
		`SELECT * FROM rl.rl_peek_multi('nr', '[{"name": "a", "algorithm": "gcra", "limit": 3, "window_us": 1000000}]')`,
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
}

// previousRelease is the schema version of the last release. Bump it when a
// release ships migrations.Latest.
const previousRelease = 6

// TestMigrationHistory: a database of the previous release, in use, migrated
// up ends with the same catalog as a fresh one; and each down migration
// restores the catalog of the version before it exactly.
func TestMigrationHistory(t *testing.T) {
	t.Parallel()
	require.Less(t, previousRelease, migrations.Latest+1)
	ctx := context.Background()
	fresh := pgtest.NewDatabase(t)
	require.NoError(t, migrations.Up(ctx, fresh))

	old := pgtest.NewDatabase(t)
	m, err := migrations.Open(ctx, old)
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Goto(ctx, previousRelease))
	oldConn := connect(t, old)
	_, err = oldConn.Exec(ctx, `SELECT rl.rl_allow('k' || i, 'gcra', 5, '1 minute') FROM generate_series(1, 20) i`)
	require.NoError(t, err)
	// Up one migration at a time, noting each version's catalog.
	at := map[int]map[string]string{previousRelease: catalog(t, old)}
	for v := previousRelease + 1; v <= migrations.Latest; v++ {
		require.NoError(t, m.Steps(ctx, 1))
		at[v] = catalog(t, old)
	}
	requireSameCatalog(t, catalog(t, fresh), at[migrations.Latest], "previous release migrated up vs fresh")
	var n int64
	require.NoError(t, oldConn.QueryRow(ctx, `SELECT count(*) FROM rl.state`).Scan(&n))
	require.Equal(t, int64(20), n, "the state survives the upgrade")

	// Each down migration restores the catalog of the version before it.
	for v := migrations.Latest - 1; v >= previousRelease; v-- {
		require.NoError(t, m.Steps(ctx, -1))
		requireSameCatalog(t, at[v], catalog(t, old), fmt.Sprintf("migrated down to %d vs up to %d", v, v))
	}
}

// catalog describes everything the migrations create in schema rl, one
// line per object: functions with their definitions, owners, effective
// privileges and comments; tables, types, columns, defaults, constraints
// and indexes; the schema's privileges.
func catalog(t *testing.T, u string) map[string]string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
SELECT 'schema rl', format('owner %s acl %s comment %s', n.nspowner::regrole,
       (SELECT string_agg(e, ',' ORDER BY e) FROM (SELECT format('%s:%s:%s', a.grantee::regrole, a.privilege_type, a.is_grantable) e
          FROM aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a) x),
       obj_description(n.oid, 'pg_namespace'))
  FROM pg_namespace n WHERE n.nspname = 'rl'
UNION ALL
SELECT 'function ' || p.oid::regprocedure, format(E'owner %s acl %s comment %s\n%s', p.proowner::regrole,
       (SELECT string_agg(e, ',' ORDER BY e) FROM (SELECT format('%s:%s:%s', a.grantee::regrole, a.privilege_type, a.is_grantable) e
          FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a) x),
       obj_description(p.oid, 'pg_proc'), pg_get_functiondef(p.oid))
  FROM pg_proc p WHERE p.pronamespace = 'rl'::regnamespace
UNION ALL
SELECT 'relation ' || c.relname, format('kind %s owner %s persistence %s options %s acl %s comment %s', c.relkind,
       c.relowner::regrole, c.relpersistence, c.reloptions,
       (SELECT string_agg(e, ',' ORDER BY e) FROM (SELECT format('%s:%s:%s', a.grantee::regrole, a.privilege_type, a.is_grantable) e
          FROM aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a) x),
       obj_description(c.oid, 'pg_class'))
  FROM pg_class c WHERE c.relnamespace = 'rl'::regnamespace
UNION ALL
SELECT 'column ' || c.relname || '.' || a.attname, format('%s %s notnull %s default %s acl %s comment %s', a.attnum,
       format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attacl,
       col_description(c.oid, a.attnum))
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
 WHERE c.relnamespace = 'rl'::regnamespace
UNION ALL
SELECT 'index ' || i.indexrelid::regclass, pg_get_indexdef(i.indexrelid)
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE c.relnamespace = 'rl'::regnamespace
UNION ALL
SELECT 'constraint ' || co.conrelid::regclass || '.' || co.conname, pg_get_constraintdef(co.oid)
  FROM pg_constraint co WHERE co.connamespace = 'rl'::regnamespace
UNION ALL
SELECT 'type ' || ty.oid::regtype, format('type %s comment %s', ty.typtype, obj_description(ty.oid, 'pg_type'))
  FROM pg_type ty WHERE ty.typnamespace = 'rl'::regnamespace AND ty.typelem = 0
UNION ALL
SELECT 'trigger ' || tg.tgname, pg_get_triggerdef(tg.oid)
  FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid WHERE c.relnamespace = 'rl'::regnamespace
   AND NOT tg.tgisinternal`) // a foreign key's triggers: named by OID, compared as its constraint
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		require.NoError(t, rows.Scan(&k, &v))
		require.NotContains(t, out, k)
		out[k] = v
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, out)
	return out
}

func requireSameCatalog(t *testing.T, want, got map[string]string, what string) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: %s missing", what, k)
			continue
		}
		if g != w {
			t.Errorf("%s: %s differs:\nwant %s\ngot  %s", what, k, w, g)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s is extra", what, k)
		}
	}
}
