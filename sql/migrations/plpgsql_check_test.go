package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/migrations"
)

// A plpgsqlFinding is one row of plpgsql_check_function_tb.
type plpgsqlFinding struct {
	Function  string // regprocedure
	Line      int    // 0: the function as a whole
	Level     string // error, warning, warning extra, performance, security, compatibility
	SQLState  string
	Message   string
	Detail    string
	Hint      string
	Statement string
	Query     string
}

// fails reports whether f fails TestPlpgsqlCheck. Errors do: code that
// fails when it runs (a missing column, a wrong type, a wrong number of
// values). Security findings do: plpgsql_check's are dynamic SQL (EXECUTE)
// built from text not passed through quote_ident, quote_literal or format,
// which a definer-rights function must never run (sql/README.md).
//
// The rest is ignored, but logged with -v; none of it changes what a
// function does:
//   - warning (other_warnings): unused variables (an i declared beside FOR
//     loops, which declare their own), and a cast through text such as
//     created text[] := '{}' (PL/pgSQL evaluates the literal as text, then
//     converts it);
//   - warning extra (extra_warnings): unused parameters (rl._sliding_retry
//     keeps the signature of core.slidingRetry, which it ports), and OUT
//     parameters of a composite type beside others;
//   - performance and compatibility warnings are not asked for: the hidden
//     integer-to-bigint casts are the port's on purpose (algorithm numbers
//     are integers, the words bigints), and "marked as VOLATILE, should be
//     IMMUTABLE" is advice on planning, not an error.
func (f plpgsqlFinding) fails() bool {
	return f.Level == "error" || f.Level == "security"
}

func (f plpgsqlFinding) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s line %d: %s %s: %s", f.Function, f.Line, f.Level, f.SQLState, f.Message)
	for _, kv := range [][2]string{{"detail", f.Detail}, {"hint", f.Hint}, {"statement", f.Statement}, {"query", f.Query}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "\n\t%s: %s", kv[0], kv[1])
		}
	}
	return b.String()
}

// plpgsqlAllowed are the failing findings accepted on purpose, keyed by
// function (as regprocedure prints it under an empty search_path) and
// message, each with its reason. Keep it tiny: fix the function when you
// can. An entry that matches nothing fails the test, so none outlives its
// reason.
var plpgsqlAllowed = map[[2]string]string{}

// TestPlpgsqlCheck runs plpgsql_check over every PL/pgSQL function of the
// schema rl, trigger functions on a table of their own, with the security
// checks on, and fails on every error and security finding not in
// plpgsqlAllowed. It needs the extension on the server: Debian's
// postgresql-15-plpgsql-check, which scripts/test-setup.sh (make test) installs.
func TestPlpgsqlCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewDatabase(t)
	if err := migrations.Up(ctx, u); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	conn := connect(t, u)
	if _, err := conn.Exec(ctx, "CREATE EXTENSION plpgsql_check"); err != nil {
		t.Fatalf("CREATE EXTENSION plpgsql_check: %v\n"+
			"install it on the server: the Debian package postgresql-15-plpgsql-check (bash scripts/test-setup.sh, as root)", err)
	}
	// The table every trigger function is checked on: rl.enforce_limit reads
	// its row as JSON, so any table will do.
	if _, err := conn.Exec(ctx, "CREATE SCHEMA plpgsql_check_target; CREATE TABLE plpgsql_check_target.rows (key text, cost bigint)"); err != nil {
		t.Fatal(err)
	}
	// A function of rl that silenced plpgsql_check itself would hide a finding
	// from this test: only plpgsqlAllowed may accept one.
	rows, err := conn.Query(ctx, `
		SELECT p.oid::regprocedure::text FROM pg_proc p
		 WHERE p.pronamespace = 'rl'::regnamespace
		   AND (p.prosrc ~* 'plpgsql_check' OR array_to_string(p.proconfig, ' ') ~* 'plpgsql_check')
		 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	silencing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range silencing {
		t.Errorf("%s mentions plpgsql_check (a pragma or an option): accept findings in plpgsqlAllowed instead", fn)
	}

	t.Run("finds", func(t *testing.T) {
		// An error and an injectable EXECUTE must fail, or the check below
		// would pass for nothing.
		if _, err := conn.Exec(ctx, `
			CREATE SCHEMA plpgsql_check_canary;
			CREATE FUNCTION plpgsql_check_canary.error() RETURNS bigint LANGUAGE plpgsql
				AS $$BEGIN RETURN (SELECT count(*) FROM plpgsql_check_canary.missing); END$$;
			CREATE FUNCTION plpgsql_check_canary.injection(p text) RETURNS void LANGUAGE plpgsql
				AS $$BEGIN EXECUTE 'SELECT ' || p; END$$;`); err != nil {
			t.Fatal(err)
		}
		findings, checked, err := plpgsqlCheck(ctx, conn, "plpgsql_check_canary", "plpgsql_check_target.rows")
		if err != nil {
			t.Fatal(err)
		}
		if checked != 2 {
			t.Errorf("checked %d functions of plpgsql_check_canary, want 2", checked)
		}
		for _, fn := range []string{"plpgsql_check_canary.error()", "plpgsql_check_canary.injection(text)"} {
			found := false
			for _, f := range findings {
				found = found || f.Function == fn && f.fails()
			}
			if !found {
				t.Errorf("no failing finding for %s; got %v", fn, findings)
			}
		}
	})

	findings, checked, err := plpgsqlCheck(ctx, conn, "rl", "plpgsql_check_target.rows")
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("the schema rl has no PL/pgSQL function to check")
	}
	used := map[[2]string]bool{}
	for _, f := range findings {
		key := [2]string{f.Function, f.Message}
		switch {
		case !f.fails():
			t.Logf("ignored: %v", f)
		case plpgsqlAllowed[key] != "":
			used[key] = true
			t.Logf("allowed (%s): %v", plpgsqlAllowed[key], f)
		default:
			t.Errorf("plpgsql_check: %v", f)
		}
	}
	for key := range plpgsqlAllowed {
		if !used[key] {
			t.Errorf("plpgsqlAllowed: no finding %q in %s anymore: remove the entry", key[1], key[0])
		}
	}
	t.Logf("plpgsql_check: %d PL/pgSQL functions of rl checked, %d findings", checked, len(findings))
}

// plpgsqlCheck runs plpgsql_check_function_tb over every PL/pgSQL function
// of schema, trigger functions on the table triggerTable, and returns the
// findings and how many functions it checked. It asks for errors, other and
// extra warnings and security warnings (performance and compatibility
// warnings are not asked for: see plpgsqlFinding.fails), with fatal_errors
// off, so every error of a function is listed, and in-comment options off,
// so no comment in a body can silence a check.
//
// The check runs under an empty search_path: a function that names an
// object of rl without the schema, relying on the caller's search_path,
// fails (functions with a SET search_path clause are checked under theirs).
func plpgsqlCheck(ctx context.Context, conn *pgx.Conn, schema, triggerTable string) ([]plpgsqlFinding, int, error) {
	var ext string
	if err := conn.QueryRow(ctx, `SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
		WHERE e.extname = 'plpgsql_check'`).Scan(&ext); err != nil {
		return nil, 0, fmt.Errorf("plpgsql_check: find the extension's schema: %w", err)
	}
	if _, err := conn.Exec(ctx, "SET search_path = ''"); err != nil {
		return nil, 0, fmt.Errorf("plpgsql_check: %w", err)
	}
	rows, err := conn.Query(ctx, `
		SELECT p.oid, p.oid::pg_catalog.regprocedure::pg_catalog.text, p.prorettype = 'pg_catalog.trigger'::pg_catalog.regtype
		  FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
		 WHERE p.pronamespace = $1::pg_catalog.regnamespace AND l.lanname = 'plpgsql'
		 ORDER BY p.oid::pg_catalog.regprocedure::pg_catalog.text`, schema)
	if err != nil {
		return nil, 0, fmt.Errorf("plpgsql_check: list the functions of %s: %w", schema, err)
	}
	type function struct {
		OID       uint32
		Signature string
		Trigger   bool
	}
	fns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[function])
	if err != nil {
		return nil, 0, fmt.Errorf("plpgsql_check: list the functions of %s: %w", schema, err)
	}
	var findings []plpgsqlFinding
	for _, fn := range fns {
		relid := "0"
		if fn.Trigger {
			relid = triggerTable
		}
		rows, err := conn.Query(ctx, `
			SELECT r.functionid::pg_catalog.oid::pg_catalog.regprocedure::pg_catalog.text, coalesce(r.lineno, 0),
			       coalesce(r.level, ''), coalesce(r.sqlstate, ''), coalesce(r.message, ''), coalesce(r.detail, ''),
			       coalesce(r.hint, ''), coalesce(r.statement, ''), coalesce(r.query, '')
			  FROM `+ext+`.plpgsql_check_function_tb($1::pg_catalog.oid::pg_catalog.regprocedure,
			           relid => $2::pg_catalog.regclass, fatal_errors => false,
			           other_warnings => true, extra_warnings => true, security_warnings => true,
			           performance_warnings => false, compatibility_warnings => false,
			           use_incomment_options => false) r`, fn.OID, relid)
		if err != nil {
			return nil, 0, fmt.Errorf("plpgsql_check: %s: %w", fn.Signature, err)
		}
		fs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[plpgsqlFinding])
		if err != nil {
			return nil, 0, fmt.Errorf("plpgsql_check: %s: %w", fn.Signature, err)
		}
		findings = append(findings, fs...)
	}
	return findings, len(fns), nil
}
