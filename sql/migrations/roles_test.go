package migrations_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/pgtest"
)

// The attacks of issue 18 against the roles and the definer rights, each as
// a tenant would try it with real login roles set up as sql/README.md says.

// reachableRoles lists every role the login can SET ROLE to on PostgreSQL
// 15 (each role it is a member of, directly or through others), by name.
func reachableRoles(t *testing.T, conn *pgx.Conn, login string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		WITH RECURSIVE up(oid) AS (
			SELECT m.roleid FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = $1
			UNION
			SELECT m.roleid FROM pg_auth_members m JOIN up ON up.oid = m.member)
		SELECT r.rolname FROM up JOIN pg_roles r ON r.oid = up.oid ORDER BY 1`, login)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// TestSetRoleNeverWidens: a tenant that SETs ROLE to any role it can reach
// (rl_app, an application group role, a group of that group) is still held
// to its prefixes on every entry point: the single, multi and batch
// functions, peek, settle, reset and the trigger. Before 0012, SET ROLE rl_app made
// it unrestricted (rl_reset of another tenant's key returned 1).
func TestSetRoleNeverWidens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewMigrated(t)
	owner := connect(t, u)
	// An application group role with rl_app's rights, and a group above it:
	// roles a tenant's login is commonly granted, listed nowhere.
	outer, _ := newRole(t, u, false, "outer", []string{"rl_app"}, u)
	appGroup, _ := newRole(t, u, false, "appgrp", []string{"rl_app", outer}, u)
	roleA, urlA := newRole(t, u, true, "sa", []string{"rl_app", appGroup}, u)
	roleB, urlB := newRole(t, u, true, "sb", []string{"rl_app"}, u)
	_, err := owner.Exec(ctx, fmt.Sprintf(`INSERT INTO rl.tenants (role, key_prefix) VALUES ('%s', 'a:'), ('%s', 'b:')`,
		roleA, roleB))
	require.NoError(t, err)

	// A table of the owner's (trusted) whose trigger charges 'b:' || k, into
	// which A may insert: the key is B's.
	_, err = owner.Exec(ctx, `CREATE TABLE victim_trg (k text);
		CREATE TRIGGER rl BEFORE INSERT ON victim_trg FOR EACH ROW
			EXECUTE FUNCTION rl.enforce_limit('k', 'fixed_window', '3', '1 hour', '3', 'b:');
		GRANT INSERT ON victim_trg TO PUBLIC`)
	require.NoError(t, err)

	b := connect(t, urlB)
	_, err = b.Exec(ctx, `SELECT rl.rl_allow('b:victim', 'fixed_window', 3, '1 hour'),
		rl.rl_allow('b:victim', 'fixed_window', 3, '1 hour', name => 'public.victim_trg')`)
	require.NoError(t, err)
	rows := func() string {
		var s string
		require.NoError(t, owner.QueryRow(ctx, `SELECT coalesce(string_agg(format('%s %s %s %s %s', name, algorithm, t, x,
			expires_at), '; ' ORDER BY name), '') FROM rl.state WHERE key = 'b:victim'`).Scan(&s))
		return s
	}
	before := rows()
	require.NotEmpty(t, before)

	calls := []string{
		`SELECT rl.rl_allow('b:victim', 'fixed_window', 3, '1 hour', cost => 3)`,
		`SELECT rl.rl_allow_us('b:victim', 'fixed_window', 3, 3600000000, cost => 3)`,
		`SELECT rl.rl_peek('b:victim', 'fixed_window', 3, '1 hour')`,
		`SELECT rl.rl_peek_us('b:victim', 'fixed_window', 3, 3600000000)`,
		`SELECT * FROM rl.rl_allow_multi('b:victim', '[{"name": "default", "algorithm": "fixed_window", "limit": 3, "window": "1 hour"}]', cost => 3)`,
		`SELECT * FROM rl.rl_peek_multi('b:victim', '[{"name": "default", "algorithm": "fixed_window", "limit": 3, "window": "1 hour"}]')`,
		`SELECT * FROM rl.rl_decide_multi('b:victim', '{default}', '{1}', '{3}', '{3600000000}', '{0}', cost => 3)`,
		`SELECT * FROM rl.rl_decide_multi('b:victim', '{default,x}', '{1,1}', '{3,3}', '{3600000000,3600000000}', '{0,0}', cost => 3)`,
		`SELECT rl.rl_settle('b:victim', 'fixed_window', 3, '1 hour', -1)`,
		`SELECT rl.rl_settle_us('b:victim', 'fixed_window', 3, 3600000000, 5)`,
		`SELECT * FROM rl.rl_settle_multi('b:victim', '[{"name": "default", "algorithm": "fixed_window", "limit": 3, "window": "1 hour"}]', -1)`,
		`SELECT * FROM rl.rl_settle_decide('b:victim', '{default,x}', '{1,1}', '{3,3}', '{3600000000,3600000000}', '{0,0}', -1)`,
		`SELECT rl.rl_reset('b:victim')`,
		`SELECT rl.rl_reset('b:victim', 'default')`,
		`INSERT INTO victim_trg VALUES ('victim')`,
	}
	batch := `SELECT error_code, error_message FROM rl.rl_decide_batch('{b:victim}', '{default}', '{1}', '{3}', '{3600000000}',
		'{0}', costs => '{3}')`
	settleBatch := `SELECT error_code, error_message FROM rl.rl_decide_batch('{b:victim}', '{default}', '{1}', '{3}', '{3600000000}',
		'{0}', costs => '{-3}', settle => '{true}')`

	a := connect(t, urlA)
	reach := reachableRoles(t, owner, roleA)
	require.Contains(t, reach, "rl_app")
	require.Contains(t, reach, appGroup)
	require.Contains(t, reach, outer)
	for _, role := range append([]string{"NONE"}, reach...) {
		_, err := a.Exec(ctx, "SET ROLE "+role)
		require.NoError(t, err, role)
		for _, q := range calls {
			_, err := a.Exec(ctx, q)
			require.Equal(t, "42501", sqlState(err), "SET ROLE %s; %s: %v", role, q, err)
			require.ErrorContains(t, err, "may not use key 'b:victim'", "SET ROLE %s; %s", role, q)
			require.ErrorContains(t, err, roleA, "the message names the login, the tenant held to")
		}
		var code, msg string
		require.NoError(t, a.QueryRow(ctx, batch).Scan(&code, &msg), role)
		require.Equal(t, "42501", code, "SET ROLE %s; rl_decide_batch: %s", role, msg)
		require.NoError(t, a.QueryRow(ctx, settleBatch).Scan(&code, &msg), role)
		require.Equal(t, "42501", code, "SET ROLE %s; rl_decide_batch (settle): %s", role, msg)
		// Its own keys still work as whatever role it acts as.
		_, err = a.Exec(ctx, `SELECT rl.rl_allow('a:own', 'fixed_window', 3, '1 hour')`)
		require.NoError(t, err, "SET ROLE %s: own key", role)
		require.Equal(t, before, rows(), "SET ROLE %s changed B's state", role)
	}

	// A superuser session acting as A (SET ROLE) is still A, and as rl_app is
	// rl_app (unrestricted, as any untrusted role listed nowhere): SET ROLE
	// restricts a trusted login, never widens a tenant.
	_, err = owner.Exec(ctx, "SET ROLE "+roleA)
	require.NoError(t, err)
	_, err = owner.Exec(ctx, calls[2])
	require.Equal(t, "42501", sqlState(err), "%v", err)
	_, err = owner.Exec(ctx, "SET ROLE rl_app")
	require.NoError(t, err)
	_, err = owner.Exec(ctx, calls[2])
	require.NoError(t, err)
	var honoured bool
	require.NoError(t, owner.QueryRow(ctx, `SELECT (rl.rl_peek('b:victim', 'fixed_window', 3, '1 hour', now_us => 1)).now_us = 1`).
		Scan(&honoured))
	require.False(t, honoured, "a superuser acting as rl_app is not trusted")
	_, err = owner.Exec(ctx, "RESET ROLE")
	require.NoError(t, err)
}

// TestDefinerRunsNoCallerCode: the trigger reads the inserted row with the
// inserting role's rights. A role with the default TEMP privilege defines an
// enum type, a function and a cast to json in pg_temp, puts the type in a
// temporary table with the trigger, and inserts: before 0012 the trigger
// (SECURITY DEFINER) ran to_jsonb(NEW), and with it the caller's function,
// as the owner of schema rl, which then wrote itself a row in rl.tenants.
func TestDefinerRunsNoCallerCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewMigrated(t)
	owner := connect(t, u)
	roleA, urlA := newRole(t, u, true, "da", []string{"rl_app"}, u)
	roleB, _ := newRole(t, u, true, "db", []string{"rl_app"}, u)
	_, err := owner.Exec(ctx, fmt.Sprintf(`INSERT INTO rl.tenants (role, key_prefix) VALUES ('%s', 'a:'), ('%s', 'b:')`,
		roleA, roleB))
	require.NoError(t, err)
	tenants := func() string {
		var s string
		require.NoError(t, owner.QueryRow(ctx, `SELECT string_agg(role::text || ' ' || key_prefix, ', ' ORDER BY 1) FROM rl.tenants`).
			Scan(&s))
		return s
	}
	want := tenants()

	a := connect(t, urlA)
	for _, q := range []string{
		`CREATE TYPE pg_temp.e AS ENUM ('x')`,
		`CREATE TABLE pg_temp.seen (who text, ok boolean)`,
		// The caller's code: as the owner of rl it could write rl.tenants.
		`CREATE FUNCTION pg_temp.evil(pg_temp.e) RETURNS json LANGUAGE plpgsql AS $$
		BEGIN
			BEGIN
				INSERT INTO rl.tenants (role, key_prefix) VALUES (session_user::regrole, 'b:');
				INSERT INTO pg_temp.seen VALUES (current_user, true);
			EXCEPTION WHEN insufficient_privilege THEN
				INSERT INTO pg_temp.seen VALUES (current_user, false);
			END;
			RETURN '"x"'::json;
		END $$`,
		`CREATE CAST (pg_temp.e AS json) WITH FUNCTION pg_temp.evil(pg_temp.e)`,
		`CREATE TEMP TABLE t (k pg_temp.e)`,
		`CREATE TRIGGER rl BEFORE INSERT ON pg_temp.t FOR EACH ROW
			EXECUTE FUNCTION rl.enforce_limit('k', 'fixed_window', '5', '1 minute', '1', 'a:')`,
		`INSERT INTO pg_temp.t VALUES ('x')`,
	} {
		_, err := a.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	var who string
	var ok bool
	require.NoError(t, a.QueryRow(ctx, `SELECT who, ok FROM pg_temp.seen`).Scan(&who, &ok))
	require.Equal(t, roleA, who, "the caller's cast ran as %s, not as the inserting role", who)
	require.False(t, ok, "the caller's code wrote rl.tenants")
	require.Equal(t, want, tenants())
	// The row was charged as A, on A's key.
	var n int64
	require.NoError(t, owner.QueryRow(ctx, `SELECT x FROM rl.state WHERE key = 'a:x'`).Scan(&n))
	require.Equal(t, int64(1), n)
}

// definerListStart and definerListEnd delimit docs/postgresql.md's list of the
// SECURITY DEFINER functions, which TestDefinerFunctions holds the catalog
// to.
const (
	definerListStart = "<!-- definer functions: checked by TestDefinerFunctions -->"
	definerListEnd   = "<!-- end of definer functions -->"
)

// TestDefinerFunctions holds every SECURITY DEFINER function in schema rl
// to the rules in docs/postgresql.md ("Definer rights"): it is on the page's
// list and the list has nothing else; its search_path is pinned to
// pg_catalog, rl, pg_temp (pg_temp last); its arguments and result are of
// types from pg_catalog or rl (no polymorphic or caller-defined type to
// dispatch on); a body calls rl's functions by qualified name only, runs no
// dynamic SQL (EXECUTE) and calls
// nothing that reads a caller-defined row (to_jsonb, to_json, row_to_json,
// format of a record); and no function in rl is executable by PUBLIC.
func TestDefinerFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	readme, err := os.ReadFile("../../docs/postgresql.md")
	require.NoError(t, err)
	doc := string(readme)
	i, j := strings.Index(doc, definerListStart), strings.Index(doc, definerListEnd)
	require.True(t, i >= 0 && j > i, "docs/postgresql.md has no definer list between %q and %q", definerListStart, definerListEnd)
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^- `(rl\\.[^`]+)`").FindAllStringSubmatch(doc[i:j], -1) {
		listed = append(listed, m[1])
	}
	sort.Strings(listed)

	rows, err := db.Query(ctx, `
		SELECT p.oid::regprocedure::text, l.lanname, coalesce(p.proconfig, '{}'), p.prosrc,
		       (SELECT coalesce(array_agg(DISTINCT n.nspname::text), '{}')
		          FROM unnest(p.proargtypes::oid[] || p.prorettype) AS a(t)
		          JOIN pg_type ty ON ty.oid = a.t JOIN pg_namespace n ON n.oid = ty.typnamespace),
		       (SELECT coalesce(bool_or(ty.typtype = 'p' AND ty.typname NOT IN ('void', 'trigger', 'record')), false)
		          FROM unnest(p.proargtypes::oid[] || p.prorettype) AS a(t) JOIN pg_type ty ON ty.oid = a.t)
		  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
		 WHERE p.pronamespace = 'rl'::regnamespace AND p.prosecdef
		 ORDER BY 1`)
	require.NoError(t, err)
	type fn struct {
		sig, lang, src string
		config, nsps   []string
		poly           bool
	}
	fns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fn, error) {
		var f fn
		err := r.Scan(&f.sig, &f.lang, &f.config, &f.src, &f.nsps, &f.poly)
		return f, err
	})
	require.NoError(t, err)
	rows, err = db.Query(ctx, `SELECT DISTINCT proname::text FROM pg_proc WHERE pronamespace = 'rl'::regnamespace`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	rlFunc := map[string]bool{}
	for _, n := range names {
		rlFunc[n] = true
	}
	call := regexp.MustCompile(`(?:^|[^.\w"])([a-z_][a-z0-9_]*)\s*\(`)
	var found []string
	dynamic := regexp.MustCompile(`(?i)\bEXECUTE\b`)
	rowReaders := regexp.MustCompile(`(?i)\b(to_jsonb?|row_to_json|hstore)\s*\(`)
	for _, f := range fns {
		found = append(found, f.sig)
		require.Contains(t, f.config, "search_path=pg_catalog, rl, pg_temp", "%s: search_path not pinned", f.sig)
		for _, c := range f.config {
			if strings.HasPrefix(c, "search_path=") {
				require.True(t, strings.HasSuffix(c, ", pg_temp"), "%s: pg_temp must come last: %s", f.sig, c)
			}
		}
		require.Contains(t, []string{"sql", "plpgsql"}, f.lang, f.sig)
		for _, n := range f.nsps {
			require.Contains(t, []string{"pg_catalog", "rl"}, n, "%s: argument or result type from schema %s", f.sig, n)
		}
		require.False(t, f.poly, "%s: a polymorphic argument dispatches on the caller's type", f.sig)
		require.False(t, dynamic.MatchString(f.src), "%s: dynamic SQL (EXECUTE) in definer code", f.sig)
		require.False(t, rowReaders.MatchString(f.src), "%s: reads a row of the caller's types", f.sig)
		for _, m := range call.FindAllStringSubmatch(f.src, -1) {
			require.False(t, rlFunc[m[1]], "%s: calls %s( without the schema rl.", f.sig, m[1])
		}
	}
	require.Equal(t, listed, found, "docs/postgresql.md's definer list differs from the catalog")

	// The trigger function itself runs with the caller's rights.
	var secdef bool
	require.NoError(t, db.QueryRow(ctx, `SELECT prosecdef FROM pg_proc WHERE oid = 'rl.enforce_limit()'::regprocedure`).Scan(&secdef))
	require.False(t, secdef, "rl.enforce_limit() must be SECURITY INVOKER")

	var public []string
	require.NoError(t, db.QueryRow(ctx, `
		SELECT coalesce(array_agg(p.oid::regprocedure::text ORDER BY 1), '{}') FROM pg_proc p
		 WHERE p.pronamespace = 'rl'::regnamespace AND has_function_privilege('public', p.oid, 'EXECUTE')`).Scan(&public))
	require.Empty(t, public, "functions in rl executable by PUBLIC")
}

// TestOrdinaryOwner: the package's shared database was migrated by an
// ordinary role (TestMain), and everything in schema rl is that role's, so
// every vector and test here ran against definer-rights functions that no
// mistake can turn into a superuser's.
func TestOrdinaryOwner(t *testing.T) {
	t.Parallel()
	var owners []string
	require.NoError(t, db.QueryRow(context.Background(), `
		SELECT array_agg(DISTINCT r.rolname::text || CASE WHEN r.rolsuper OR r.rolcreaterole OR r.rolcreatedb THEN ' (privileged)' ELSE '' END)
		  FROM (SELECT nspowner AS o FROM pg_namespace WHERE nspname = 'rl'
		        UNION ALL SELECT proowner FROM pg_proc WHERE pronamespace = 'rl'::regnamespace
		        UNION ALL SELECT relowner FROM pg_class WHERE relnamespace = 'rl'::regnamespace
		        UNION ALL SELECT typowner FROM pg_type WHERE typnamespace = 'rl'::regnamespace) x
		  JOIN pg_roles r ON r.oid = x.o`).Scan(&owners))
	require.Len(t, owners, 1, "one owner for schema rl and everything in it: %v", owners)
	require.Regexp(t, `^rltest_[0-9a-f]+_owner$`, owners[0])
}
