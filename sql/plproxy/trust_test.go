package plproxy_test

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/sql/plproxy"
	"github.com/rlcore/rl/sql/plproxy/plproxytest"
)

// sharedTrust are the functions the router copies from a node, verbatim:
// who the caller is, who is trusted, who is a tenant, the request time, and
// the trigger's caller-rights half.
var sharedTrust = []string{"_now", "_check_key", "_trusted", "_tenant_role", "_caller", "_request_now",
	"_check_tenant_key", "_require_trusted", "enforce_limit", "_key_problem", "_tenant_problem"}

// routerOwn are the functions the copies call that the router defines its
// own way: rl._clock (NULL: the key's shard decides on its clock) and
// rl._enforce_limit (the trigger's definer half, deciding on the shard).
var routerOwn = []string{"_clock", "_enforce_limit"}

// functionDefs returns pg_get_functiondef of every function of schema rl
// named in names, by signature, whitespace collapsed.
func functionDefs(t *testing.T, u string, names []string) map[string]string {
	t.Helper()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid)
		FROM pg_proc p WHERE p.pronamespace = 'rl'::regnamespace AND p.proname = ANY ($1)`, names)
	require.NoError(t, err)
	defs := map[string]string{}
	for rows.Next() {
		var sig, def string
		require.NoError(t, rows.Scan(&sig, &def))
		defs[sig] = strings.Join(strings.Fields(def), " ")
	}
	require.NoError(t, rows.Err())
	return defs
}

// tableDef describes rl.tenants: its columns and constraints.
func tableDef(t *testing.T, u string) []string {
	t.Helper()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
		  FROM pg_attribute a WHERE a.attrelid = 'rl.tenants'::regclass AND a.attnum > 0 AND NOT a.attisdropped
		UNION ALL
		SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c WHERE c.conrelid = 'rl.tenants'::regclass
		ORDER BY 1`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

var rlCall = regexp.MustCompile(`\brl\.(_?[a-z_]+)\(`)

// TestTrustFunctionsMatchNode: the router's trust functions are a migrated
// node's, definition for definition (pg_get_functiondef, whitespace
// collapsed), and its rl.tenants has the node's columns and constraints:
// one rule, kept in one place, cannot drift. Every rl function they call is
// copied too, or is one the router defines its own way (routerOwn).
func TestTrustFunctionsMatchNode(t *testing.T) {
	c := plproxytest.New(t, 1, 0)
	node, router := functionDefs(t, c.Shards[0], sharedTrust), functionDefs(t, c.Router, sharedTrust)
	require.Len(t, node, len(sharedTrust), "one node definition per name: %v", node)
	for sig, def := range node {
		require.Equal(t, def, router[sig], "%s differs between a node and the router: copy the node's into router.sql", sig)
		for _, m := range rlCall.FindAllStringSubmatch(def, -1) {
			if !slices.Contains(routerOwn, m[1]) {
				require.Contains(t, sharedTrust, m[1], "%s calls rl.%s, which the router does not copy", sig, m[1])
			}
		}
	}
	require.Equal(t, tableDef(t, c.Shards[0]), tableDef(t, c.Router), "rl.tenants")
}

// roleURL is u with the user replaced by role.
func roleURL(t *testing.T, u, role string) string {
	t.Helper()
	pu, err := url.Parse(u)
	require.NoError(t, err)
	pu.User = url.User(role)
	return pu.String()
}

// entry is a public function of the router, called on key $1 at request
// time $2 (NULL: none), returning the time it decided at.
type entry struct {
	name string
	sql  string
}

const limits = `'[{"name": "default", "algorithm": "fixed_window", "limit": 3, "window": "1 hour"}]'`

// timed are the entry points that take a request time; each locks its key
// for the window (cost = limit) when it takes or settles.
var timed = []entry{
	{"rl_allow", "SELECT now_us FROM rl.rl_allow($1, 'fixed_window', 3, '1 hour', 3, now_us => $2)"},
	{"rl_allow_us", "SELECT now_us FROM rl.rl_allow_us($1, 'fixed_window', 3, 3600000000, 3, now_us => $2)"},
	{"rl_peek", "SELECT now_us FROM rl.rl_peek($1, 'fixed_window', 3, '1 hour', 3, now_us => $2)"},
	{"rl_peek_us", "SELECT now_us FROM rl.rl_peek_us($1, 'fixed_window', 3, 3600000000, 3, now_us => $2)"},
	{"rl_allow_multi", "SELECT max(now_us) FROM rl.rl_allow_multi($1, " + limits + ", 3, $2)"},
	{"rl_peek_multi", "SELECT max(now_us) FROM rl.rl_peek_multi($1, " + limits + ", 3, $2)"},
	{"rl_decide_multi", "SELECT max(now_us) FROM rl.rl_decide_multi($1, '{default}', '{1}', '{3}', '{3600000000}', '{0}', 3, $2)"},
	{"rl_decide_batch", "SELECT max(now_us) FROM rl.rl_decide_batch(ARRAY[$1::text], '{default}', '{1}', '{3}', '{3600000000}', '{0}', '{3}', NULL, ARRAY[$2::bigint])"},
	{"rl_settle", "SELECT now_us FROM rl.rl_settle($1, 'fixed_window', 3, '1 hour', 3, now_us => $2)"},
	{"rl_settle_us", "SELECT now_us FROM rl.rl_settle_us($1, 'fixed_window', 3, 3600000000, 3, now_us => $2)"},
	{"rl_settle_multi", "SELECT max(now_us) FROM rl.rl_settle_multi($1, " + limits + ", 3, $2)"},
	{"rl_settle_decide", "SELECT max(now_us) FROM rl.rl_settle_decide($1, '{default}', '{1}', '{3}', '{3600000000}', '{0}', 3, $2)"},
}

// decideAt calls e on key as the session of conn, passing at as now_us
// (setting false) or as SET rl.now_us (setting true), and returns the time
// the call decided at.
func decideAt(conn *pgx.Conn, e entry, key string, at int64, setting bool) (int64, error) {
	var got int64
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		arg := &at
		if setting {
			if _, err := tx.Exec(ctx, "SELECT set_config('rl.now_us', $1, true)", fmt.Sprint(at)); err != nil {
				return err
			}
			arg = nil
		}
		return tx.QueryRow(ctx, e.sql, key, arg).Scan(&got)
	})
	return got, err
}

// trustRig is a router cluster and two shard clusters of their own, with
// the roles of a real setup: the shard login rl_shard (an ordinary role on
// the shards), and on the router app_plain (rl_app), ops (rl_admin), the
// tenants shop_a (prefix a:) and shop_b (b:), and shops, a group of shop_a's
// with rl_app, not a tenant; a table orders with the trigger; the victim key
// b:victim, taken once by shop_b.
type trustRig struct {
	router string   // the router database, as postgres
	shards []string // the shard databases, as postgres
}

const (
	shardLogin = "rl_shard"
	victim     = "b:victim"
)

func newTrustRig(t *testing.T) *trustRig {
	bin := pgBin(t)
	r := &trustRig{}
	var logins []string
	for range 2 {
		c := startCluster(t, bin)
		u := c.url("postgres")
		require.NoError(t, migrations.Up(ctx, u))
		r.exec(t, u, "CREATE ROLE "+shardLogin+" LOGIN IN ROLE rl_app")
		r.shards = append(r.shards, u)
		logins = append(logins, roleURL(t, u, shardLogin))
	}
	r.router = startCluster(t, bin).url("postgres")
	// What earlier versions of Apply left: a mapping for PUBLIC with the
	// shards' owner, USAGE for rl_app and rl_admin.
	require.NoError(t, plproxy.Apply(ctx, r.router, plproxy.Config{Shards: logins}))
	r.exec(t, r.router, `DROP USER MAPPING FOR postgres SERVER rl_shards;
		CREATE USER MAPPING FOR PUBLIC SERVER rl_shards OPTIONS (user 'postgres');
		GRANT USAGE ON FOREIGN SERVER rl_shards TO rl_app, rl_admin;
		GRANT EXECUTE ON FUNCTION rl._proxy_rl_allow(text, text, bigint, interval, bigint, bigint, text, bigint) TO rl_app`)
	require.NoError(t, plproxy.Apply(ctx, r.router, plproxy.Config{Shards: logins}))
	r.exec(t, r.router, `CREATE ROLE app_plain LOGIN IN ROLE rl_app;
		CREATE ROLE ops LOGIN IN ROLE rl_admin;
		CREATE ROLE shop_a LOGIN IN ROLE rl_app;
		CREATE ROLE shop_b LOGIN IN ROLE rl_app;
		CREATE ROLE shops NOLOGIN IN ROLE rl_app;
		GRANT shops TO shop_a;
		INSERT INTO rl.tenants (role, key_prefix) VALUES ('shop_a', 'a:'), ('shop_b', 'b:');
		CREATE TABLE public.orders (shop text NOT NULL);
		CREATE TRIGGER orders_rate_limit BEFORE INSERT ON public.orders
			FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit('shop', 'fixed_window', '3', '1 hour', '3');
		GRANT INSERT ON public.orders TO rl_app`)
	b := r.connect(t, "shop_b")
	_, err := b.Exec(ctx, "SELECT rl.rl_allow($1, 'fixed_window', 3, '1 hour')", victim)
	require.NoError(t, err)
	require.NotEmpty(t, r.rows(t, victim), "the victim's row is on its shard")
	return r
}

func (r *trustRig) exec(t *testing.T, u, sql string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err)
}

// connect opens a session on the router as role.
func (r *trustRig) connect(t *testing.T, role string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, roleURL(t, r.router, role))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}

// rows returns key's rows on every shard, as text.
func (r *trustRig) rows(t *testing.T, key string) string {
	t.Helper()
	var all []string
	for _, s := range r.shards {
		conn, err := pgx.Connect(ctx, s)
		require.NoError(t, err)
		var rows string
		err = conn.QueryRow(ctx, "SELECT coalesce(string_agg(s::text, ';' ORDER BY s.name), '') FROM rl.state s WHERE s.key = $1", key).Scan(&rows)
		conn.Close(ctx)
		require.NoError(t, err)
		all = append(all, rows)
	}
	return strings.Join(all, "|")
}

// expiresAt returns the latest expires_at of key's rows on the shards (0:
// none).
func (r *trustRig) expiresAt(t *testing.T, key string) int64 {
	t.Helper()
	var latest int64
	for _, s := range r.shards {
		latest = max(latest, count(t, s, "SELECT coalesce(max(expires_at), 0) FROM rl.state WHERE key = $1", key))
	}
	return latest
}

// shardLoginTrusted grants or revokes rl_admin to the shard login on every
// shard: the operator's opt-in to the router's trusted callers' times.
func (r *trustRig) shardLoginTrusted(t *testing.T, trusted bool) {
	stmt := "REVOKE rl_admin FROM " + shardLogin
	if trusted {
		stmt = "GRANT rl_admin TO " + shardLogin
	}
	for _, s := range r.shards {
		r.exec(t, s, stmt)
	}
}

// requireShardClock: every call of role through every timed entry point,
// with a request time a century ahead as an argument and as SET rl.now_us,
// decides at the shard's clock, and the key it takes is locked for the
// window at most, not for the century.
func (r *trustRig) requireShardClock(t *testing.T, role, prefix string) {
	t.Helper()
	conn := r.connect(t, role)
	far := time.Now().AddDate(100, 0, 0).UnixMicro()
	for _, setting := range []bool{false, true} {
		for _, e := range timed {
			key := fmt.Sprintf("%stime:%s:%d:%t", prefix, e.name, time.Now().UnixNano(), setting)
			before := time.Now().UnixMicro()
			got, err := decideAt(conn, e, key, far, setting)
			require.NoError(t, err, "%s as %s", e.name, role)
			after := time.Now().UnixMicro()
			require.InDelta(t, (before+after)/2, got, float64(time.Minute.Microseconds()),
				"%s as %s (rl.now_us set: %t) decided at %d, not at the shard's clock", e.name, role, setting, got)
			require.Less(t, r.expiresAt(t, key), after+2*time.Hour.Microseconds(),
				"%s as %s (rl.now_us set: %t) locked %s past the window", e.name, role, setting, key)
		}
	}
	// The trigger, with rl.now_us set.
	key := fmt.Sprintf("%stime:trigger:%d", prefix, time.Now().UnixNano())
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('rl.now_us', $1, true)", fmt.Sprint(far)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO public.orders (shop) VALUES ($1)", key)
		return err
	})
	require.NoError(t, err)
	require.Less(t, r.expiresAt(t, key), time.Now().Add(2*time.Hour).UnixMicro(), "the trigger as %s", role)
}

// requireRefused: err is the router's refusal of a tenant's foreign key.
func requireRefused(t *testing.T, err error, what string) {
	t.Helper()
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe, what)
	require.Equal(t, "42501", pe.Code, "%s: %s", what, pe.Message)
	require.Contains(t, pe.Message, "may not use key", what)
}

// TestRouterTrust attacks a router over two shard servers, each server
// started by the test, with the roles of a real setup (see trustRig). It
// fails, never skips, when the servers cannot start or PL/Proxy is missing.
func TestRouterTrust(t *testing.T) {
	r := newTrustRig(t)
	victimRows := r.rows(t, victim)

	// Apply over a router of an earlier version: no PUBLIC mapping, no
	// USAGE on the server for anyone but the owner, the PL/Proxy functions
	// executable by nobody.
	t.Run("apply", func(t *testing.T) {
		conn := r.connect(t, "postgres")
		var maps []string
		rows, err := conn.Query(ctx, "SELECT usename || ' ' || array_to_string(umoptions, ',') FROM pg_user_mappings WHERE srvname = 'rl_shards'")
		require.NoError(t, err)
		maps, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{"postgres user=" + shardLogin}, maps, "only the owner is mapped, to the shard login")
		for _, role := range []string{"public", "rl_app", "rl_admin", "app_plain", "ops", "shop_a"} {
			var usage bool
			require.NoError(t, conn.QueryRow(ctx, "SELECT has_server_privilege($1, 'rl_shards', 'USAGE')", role).Scan(&usage))
			require.False(t, usage, "%s has USAGE on rl_shards", role)
		}
		rows, err = conn.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
			WHERE l.lanname = 'plproxy' AND p.pronamespace = 'rl'::regnamespace
			  AND (has_function_privilege('rl_app', p.oid, 'EXECUTE') OR has_function_privilege('rl_admin', p.oid, 'EXECUTE'))`)
		require.NoError(t, err)
		granted, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Empty(t, granted, "PL/Proxy functions executable by rl_app or rl_admin")
		require.Equal(t, int64(14), count(t, r.router, "SELECT count(*) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE l.lanname = 'plproxy'"))
		_, err = r.connect(t, "app_plain").Exec(ctx, "SELECT rl._proxy_rl_allow('k', 'gcra', 1, '1 hour', 1, 0, 'default', 1)")
		requireCode(t, err, "42501")
	})

	// The default: the shard login is an ordinary role on the shards.
	t.Run("untrusted callers decide at the shard's clock", func(t *testing.T) {
		r.requireShardClock(t, "app_plain", "")
		r.requireShardClock(t, "shop_a", "a:")
	})
	t.Run("a trusted router role decides at the shard's clock through an ordinary shard login", func(t *testing.T) {
		r.requireShardClock(t, "ops", "")
		_, err := r.connect(t, "ops").Exec(ctx, "SELECT rl.rl_expire(now_us => 1, batch => 1)")
		requireCode(t, err, "42501") // refused by the shards
	})

	// A tenant names another tenant's key through every entry point, as
	// every role it can SET ROLE to: refused, and the victim's rows are
	// untouched.
	t.Run("tenant", func(t *testing.T) {
		conn := r.connect(t, "shop_a")
		rows, err := conn.Query(ctx, "SELECT rolname FROM pg_roles WHERE pg_has_role('shop_a', oid, 'MEMBER') ORDER BY 1")
		require.NoError(t, err)
		reach, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{"rl_app", "shop_a", "shops"}, reach)
		for _, role := range append([]string{""}, reach...) {
			set := "RESET ROLE"
			if role != "" {
				set = "SET ROLE " + pgx.Identifier{role}.Sanitize()
			}
			_, err := conn.Exec(ctx, set)
			require.NoError(t, err)
			var ok bool
			require.NoError(t, conn.QueryRow(ctx, "SELECT allowed FROM rl.rl_allow('a:mine', 'gcra', 1000, '1 hour')").Scan(&ok),
				"%s: its own key", set)
			require.True(t, ok)
			for _, e := range timed {
				if e.name == "rl_decide_batch" {
					continue
				}
				_, err := decideAt(conn, e, victim, 0, false)
				requireRefused(t, err, set+": "+e.name)
			}
			_, err = conn.Exec(ctx, "SELECT rl.rl_reset($1)", victim)
			requireRefused(t, err, set+": rl_reset")
			_, err = conn.Exec(ctx, "INSERT INTO public.orders (shop) VALUES ($1)", victim)
			requireRefused(t, err, set+": the trigger")
			_, err = conn.Exec(ctx, "SELECT rl.rl_expire()")
			requireCode(t, err, "42501")
			// A batch: its own request decided, the foreign one refused in
			// its row, as on one node.
			rows, err := conn.Query(ctx, `SELECT req, coalesce(error_code, ''), coalesce(error_message, '') FROM rl.rl_decide_batch(
				ARRAY['a:batch', $1], '{default,default}', '{4,4}', '{1000,1000}', '{3600000000,3600000000}', '{0,0}')`, victim)
			require.NoError(t, err)
			type row struct {
				Req        int32
				Code, Text string
			}
			got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
			require.NoError(t, err)
			require.Equal(t, []row{{0, "", ""}, {1, "42501", "ratelimit: role shop_a may not use key 'b:victim'"}}, got, set)
		}
		require.Equal(t, victimRows, r.rows(t, victim), "the victim's rows changed")
	})

	// The operator's opt-in: rl_admin for the shard login on the shards.
	// The router's trusted roles' times are honoured; everyone else's still
	// are not: the router is the trust boundary.
	t.Run("trusted shard login", func(t *testing.T) {
		r.shardLoginTrusted(t, true)
		defer r.shardLoginTrusted(t, false)
		r.requireShardClock(t, "app_plain", "")
		r.requireShardClock(t, "shop_a", "a:")
		_, err := r.connect(t, "app_plain").Exec(ctx, "SELECT rl.rl_expire(now_us => 1, batch => 1)")
		requireCode(t, err, "42501")
		_, err = r.connect(t, "shop_a").Exec(ctx, "SELECT rl.rl_reset($1)", victim)
		requireRefused(t, err, "rl_reset through a trusted shard login")
		require.Equal(t, victimRows, r.rows(t, victim), "the victim's rows changed")
		conn := r.connect(t, "ops")
		for _, setting := range []bool{false, true} {
			for _, e := range timed {
				key := fmt.Sprintf("ops:%s:%t", e.name, setting)
				got, err := decideAt(conn, e, key, t0, setting)
				require.NoError(t, err, e.name)
				require.Equal(t, t0, got, "%s as ops (rl.now_us set: %t)", e.name, setting)
			}
		}
		_, err = conn.Exec(ctx, "SELECT rl.rl_expire(now_us => 1, batch => 1)")
		require.NoError(t, err)
	})
}

// TestRouterDefinerRules holds the router's definer-rights code to the rules
// of sql/README.md, "Definer rights", as on a node: every SECURITY DEFINER
// function pins its search_path with pg_temp last, and plpgsql_check (the
// Debian package postgresql-15-plpgsql-check, installed by scripts/test-setup.sh) finds no
// error and no security finding in any PL/pgSQL function of the router,
// checked under an empty search_path.
func TestRouterDefinerRules(t *testing.T) {
	c := plproxytest.New(t, 1, 0)
	conn, err := pgx.Connect(ctx, c.Router)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p
		WHERE p.pronamespace = 'rl'::regnamespace AND p.prosecdef
		  AND NOT coalesce(array_to_string(p.proconfig, ' ') ~ '^search_path=pg_catalog(, rl)?, pg_temp$', false)`)
	require.NoError(t, err)
	unpinned, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, unpinned, "SECURITY DEFINER without SET search_path = pg_catalog[, rl], pg_temp")

	_, err = conn.Exec(ctx, "CREATE EXTENSION plpgsql_check; CREATE TABLE public.check_rows (key text); SET search_path = ''")
	require.NoError(t, err, "install plpgsql_check on the server: bash scripts/test-setup.sh")
	rows, err = conn.Query(ctx, `
		SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text || ' line ' || coalesce(r.lineno, 0) || ': ' || r.level
		       || ' ' || coalesce(r.sqlstate, '') || ': ' || coalesce(r.message, '')
		  FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang AND l.lanname = 'plpgsql',
		       LATERAL public.plpgsql_check_function_tb(p.oid,
		           relid => CASE WHEN p.prorettype = 'pg_catalog.trigger'::pg_catalog.regtype
		                         THEN 'public.check_rows'::pg_catalog.regclass ELSE 0::pg_catalog.regclass END,
		           fatal_errors => false, other_warnings => true, extra_warnings => true, security_warnings => true,
		           performance_warnings => false, compatibility_warnings => false, use_incomment_options => false) r
		 WHERE p.pronamespace = 'rl'::pg_catalog.regnamespace AND r.level IN ('error', 'security')`)
	require.NoError(t, err)
	findings, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, findings)
}
