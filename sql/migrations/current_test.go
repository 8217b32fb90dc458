package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/internal/sqlsrc"
	"github.com/rlcore/rl/sql/internal/sqltext"
	"github.com/rlcore/rl/sql/migrations"
)

// TestSourceMatchesMigrations: the schema the source builds (sql/src, the
// install script sqlsrc derives from it) is the schema the migrations
// build, object for object: functions with their definitions
// (pg_get_functiondef), comments, types, tables, columns, constraints,
// indexes, grants, owners (the renderer's text and the
// catalog of TestMigrationHistory). And the snapshot of the previous
// version (sql/versions), from which the generator derives the open
// version's migration and its down, is what the migrations build at that
// version.
func TestSourceMatchesMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tree, err := sqlsrc.LoadGenerated(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	install, err := tree.Install()
	if err != nil {
		t.Fatal(err)
	}
	migrated := pgtest.NewDatabase(t)
	if err := migrations.Up(ctx, migrated); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	requireSameSchema(t, "migrations 1.."+strconv.Itoa(migrations.Latest), migrated, "sql/src", install)

	base, snapshot, err := sqlsrc.Snapshot(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	old := pgtest.NewDatabase(t)
	m, err := migrations.Open(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Goto(ctx, uint(base)); err != nil {
		t.Fatalf("migrate to %d: %v", base, err)
	}
	requireSameSchema(t, "migrations 1.."+strconv.Itoa(base), old, fmt.Sprintf("sql/versions/%d.sql", base), snapshot)
}

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// requireSameSchema loads script into an empty database and compares its
// schema rl with the one of the database at want.
func requireSameSchema(t *testing.T, wantName, want, gotName, script string) {
	t.Helper()
	ctx := context.Background()
	u := pgtest.NewDatabase(t)
	conn := connect(t, u)
	if _, err := conn.Exec(ctx, script); err != nil {
		t.Fatalf("%s does not load into an empty database%s: %v", gotName, errorLine(script, err), err)
	}
	wantText, err := renderer{conn: connect(t, want)}.render(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gotText, err := renderer{conn: conn}.render(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gotText != wantText {
		t.Errorf("%s builds another schema rl than %s (edit sql/src, or write a step: sql/README.md, \"Editing the SQL\")\n%s",
			gotName, wantName, firstDifference(wantName, wantText, gotName, gotText))
	}
	requireSameCatalog(t, catalog(t, want), catalog(t, u), gotName+" vs "+wantName)
}

// A renderer renders the schema rl of the database conn is connected to as
// SQL.
type renderer struct {
	conn *pgx.Conn
	// extension names the extension whose members the schema's objects may
	// be (rl, when CREATE EXTENSION rl made them: extension_test.go); a
	// member of any other extension is refused like an object not rendered.
	extension string
}

// render renders the schema: the schema itself, its types, its tables, its
// functions in dependency order, the views, triggers and policies that may
// use them, and the grants. The text holds no OIDs and no owner, so two
// databases with the same schema render the same text. It fails on a kind
// of object it does not render.
func (r renderer) render(ctx context.Context) (string, error) {
	// Everything outside pg_catalog comes out schema-qualified; constants
	// come out the same whatever the session's settings.
	if _, err := r.conn.Exec(ctx, `SET search_path = ''; SET DateStyle = 'ISO, MDY'; SET IntervalStyle = postgres;
		SET TimeZone = 'UTC'; SET extra_float_digits = 3`); err != nil {
		return "", fmt.Errorf("render: settings: %w", err)
	}
	if err := r.check(ctx); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, part := range []struct {
		title  string
		render func(context.Context) (string, error)
	}{
		{"Schema", r.schema},
		{"Types", r.types},
		{"Tables", r.tables},
		{"Functions, each after the functions it calls", r.functions},
		{"Views", r.views},
		{"Triggers and row security policies", r.triggersAndPolicies},
		{"Grants", r.grants},
	} {
		text, err := part.render(ctx)
		if err != nil {
			return "", fmt.Errorf("render %s: %w", strings.ToLower(part.title), err)
		}
		if text == "" {
			continue
		}
		fmt.Fprintf(&b, "\n-- %s\n-- %s\n\n%s", part.title, strings.Repeat("=", len(part.title)), text)
	}
	return b.String(), nil
}

// check fails on objects in the schema rl that the renderer does not
// render, so that a comparison can never silently miss one. (Per-column
// storage, compression and statistics targets are not rendered either.)
func (r renderer) check(ctx context.Context) error {
	rows, err := r.conn.Query(ctx, `
		SELECT format('%s %s', CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'm' THEN 'materialized view'
		                                      WHEN 'p' THEN 'partitioned table' WHEN 'f' THEN 'foreign table'
		                                      ELSE 'relation of kind ' || c.relkind::text END, c.oid::regclass)
		  FROM pg_class c
		 WHERE c.relnamespace = 'rl'::regnamespace AND c.relkind NOT IN ('r', 'i', 'c', 'v')
		UNION ALL
		SELECT format('%s type %s', CASE t.typtype WHEN 'r' THEN 'range' WHEN 'm' THEN 'multirange'
		                                           WHEN 'p' THEN 'pseudo' ELSE 'base' END, t.oid::regtype)
		  FROM pg_type t
		 WHERE t.typnamespace = 'rl'::regnamespace AND t.typtype NOT IN ('c', 'e', 'd')
		   AND NOT (t.typtype = 'b' AND t.typcategory = 'A')
		UNION ALL
		SELECT format('%s %s', CASE p.prokind WHEN 'a' THEN 'aggregate' ELSE 'window function' END, p.oid::regprocedure)
		  FROM pg_proc p
		 WHERE p.pronamespace = 'rl'::regnamespace AND p.prokind NOT IN ('f', 'p')
		UNION ALL
		SELECT format('identity column %s.%I', a.attrelid::regclass, a.attname)
		  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		 WHERE c.relnamespace = 'rl'::regnamespace AND a.attidentity <> ''
		UNION ALL
		SELECT format('rule %I on %s', r.rulename, r.ev_class::regclass)
		  FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
		 WHERE c.relnamespace = 'rl'::regnamespace AND c.relkind <> 'v'
		UNION ALL
		SELECT format('trigger %I on %s, enabled as %s', t.tgname, c.oid::regclass, t.tgenabled)
		  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		 WHERE c.relnamespace = 'rl'::regnamespace AND NOT t.tgisinternal AND t.tgenabled <> 'O'
		UNION ALL
		SELECT format('table %s inheriting from %s', i.inhrelid::regclass, i.inhparent::regclass)
		  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		 WHERE c.relnamespace = 'rl'::regnamespace
		UNION ALL
		SELECT format('operator %s', o.oid::regoperator) FROM pg_operator o WHERE o.oprnamespace = 'rl'::regnamespace
		UNION ALL
		SELECT format('collation %s', co.oid::regcollation) FROM pg_collation co WHERE co.collnamespace = 'rl'::regnamespace
		UNION ALL
		SELECT format('statistics object %I', s.stxname) FROM pg_statistic_ext s WHERE s.stxnamespace = 'rl'::regnamespace
		UNION ALL
		SELECT 'default privileges in schema rl' FROM pg_default_acl d WHERE d.defaclnamespace = 'rl'::regnamespace
		UNION ALL
		SELECT format('object of extension %s', e.extname)
		  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
		 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname <> $1
		   AND (d.classid, d.objid) IN (SELECT 'pg_proc'::regclass, oid FROM pg_proc WHERE pronamespace = 'rl'::regnamespace
		                                UNION ALL SELECT 'pg_class'::regclass, oid FROM pg_class WHERE relnamespace = 'rl'::regnamespace
		                                UNION ALL SELECT 'pg_type'::regclass, oid FROM pg_type WHERE typnamespace = 'rl'::regnamespace)
		 ORDER BY 1`, r.extension)
	if err != nil {
		return fmt.Errorf("render: list objects: %w", err)
	}
	unrendered, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("render: list objects: %w", err)
	}
	if len(unrendered) > 0 {
		return fmt.Errorf("render: the schema rl holds objects the renderer (current_test.go) does not render; extend it: %s",
			strings.Join(unrendered, "; "))
	}
	return nil
}

// schema renders CREATE SCHEMA rl and its comment.
func (r renderer) schema(ctx context.Context) (string, error) {
	var s string
	err := r.conn.QueryRow(ctx, `
		SELECT format(E'CREATE SCHEMA %I;\n', n.nspname)
		       || coalesce(format(E'\nCOMMENT ON SCHEMA %I IS ', n.nspname) || quote_literal(obj_description(n.oid, 'pg_namespace')) || E';\n', '')
		  FROM pg_namespace n WHERE n.nspname = 'rl'`).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", errors.New("there is no schema rl")
	}
	return s, err
}

// types renders the composite, enum and domain types of rl, each after
// the types it is made of, with their comments.
func (r renderer) types(ctx context.Context) (string, error) {
	rows, err := r.conn.Query(ctx, `
		SELECT format_type(t.oid, NULL),
		       CASE t.typtype
		       WHEN 'c' THEN format(E'CREATE TYPE %s AS (\n%s\n);\n', format_type(t.oid, NULL),
		           (SELECT string_agg(format('    %I %s', a.attname, format_type(a.atttypid, a.atttypmod))
		                              || CASE WHEN a.attcollation <> at.typcollation
		                                      THEN ' COLLATE ' || a.attcollation::regcollation::text ELSE '' END,
		                              E',\n' ORDER BY a.attnum)
		              FROM pg_attribute a JOIN pg_type at ON at.oid = a.atttypid
		             WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped))
		       WHEN 'e' THEN format(E'CREATE TYPE %s AS ENUM (%s);\n', format_type(t.oid, NULL),
		           (SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder)
		              FROM pg_enum e WHERE e.enumtypid = t.oid))
		       ELSE format(E'CREATE DOMAIN %s AS %s', format_type(t.oid, NULL), format_type(t.typbasetype, t.typtypmod))
		            || CASE WHEN t.typcollation <> bt.typcollation
		                    THEN ' COLLATE ' || t.typcollation::regcollation::text ELSE '' END
		            || coalesce(' DEFAULT ' || pg_get_expr(t.typdefaultbin, 0), '')
		            || CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END
		            || coalesce((SELECT string_agg(format(E'\n    CONSTRAINT %I %s', c.conname, pg_get_constraintdef(c.oid)),
		                                           '' ORDER BY c.conname)
		                           FROM pg_constraint c WHERE c.contypid = t.oid), '')
		            || E';\n'
		       END
		       || coalesce(format(E'\nCOMMENT ON %s %s IS ', CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, format_type(t.oid, NULL))
		                   || quote_literal(obj_description(t.oid, 'pg_type')) || E';\n', '')
		       || coalesce((SELECT string_agg(format(E'COMMENT ON COLUMN %s.%I IS %L;\n', format_type(t.oid, NULL), a.attname, d.description),
		                                      '' ORDER BY a.attnum)
		                      FROM pg_attribute a JOIN pg_description d
		                        ON d.classoid = 'pg_class'::regclass AND d.objoid = a.attrelid AND d.objsubid = a.attnum
		                     WHERE a.attrelid = t.typrelid AND t.typrelid <> 0), ''),
		       ARRAY(SELECT DISTINCT format_type(et.oid, NULL)
		               FROM pg_type dt JOIN pg_type et ON et.oid = CASE WHEN dt.typcategory = 'A' THEN dt.typelem ELSE dt.oid END
		              WHERE dt.oid IN (SELECT a.atttypid FROM pg_attribute a
		                                WHERE a.attrelid = t.typrelid AND t.typrelid <> 0 AND a.attnum > 0 AND NOT a.attisdropped
		                               UNION ALL SELECT t.typbasetype)
		                AND et.typnamespace = 'rl'::regnamespace)
		  FROM pg_type t
		  LEFT JOIN pg_class c ON c.oid = t.typrelid
		  LEFT JOIN pg_type bt ON bt.oid = t.typbasetype
		 WHERE t.typnamespace = 'rl'::regnamespace AND (c.relkind = 'c' OR t.typtype IN ('e', 'd'))`)
	if err != nil {
		return "", err
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[sqlNode])
	if err != nil {
		return "", err
	}
	return joinInOrder(nodes)
}

// tables renders the tables of rl: columns with their defaults,
// constraints other than foreign keys, storage options, indexes, row
// security and comments; the foreign keys follow all tables.
func (r renderer) tables(ctx context.Context) (string, error) {
	rows, err := r.conn.Query(ctx, `
		SELECT c.oid::regclass::text,
		       format(E'CREATE %sTABLE %s (\n%s\n)%s;\n',
		              CASE c.relpersistence WHEN 'u' THEN 'UNLOGGED ' ELSE '' END, c.oid::regclass,
		              concat_ws(E',\n', cols.text, cons.text),
		              coalesce(' WITH (' || array_to_string(c.reloptions, ', ') || ')', ''))
		       || coalesce(E'\n' || idx.text, '')
		       || coalesce(E'\n' || nullif(
		              CASE WHEN c.relrowsecurity THEN format(E'ALTER TABLE %s ENABLE ROW LEVEL SECURITY;\n', c.oid::regclass) ELSE '' END
		              || CASE WHEN c.relforcerowsecurity THEN format(E'ALTER TABLE %s FORCE ROW LEVEL SECURITY;\n', c.oid::regclass) ELSE '' END,
		              ''), '')
		       || coalesce(E'\n' || nullif(concat(
		              format('COMMENT ON TABLE %s IS ', c.oid::regclass) || quote_literal(obj_description(c.oid, 'pg_class')) || E';\n',
		              colcom.text, concom.text, idxcom.text), ''), ''),
		       '{}'::text[]
		  FROM pg_class c
		 CROSS JOIN LATERAL (
		       SELECT string_agg(format('    %I %s', a.attname, format_type(a.atttypid, a.atttypmod))
		                         || CASE WHEN a.attcollation <> at.typcollation
		                                 THEN ' COLLATE ' || a.attcollation::regcollation::text ELSE '' END
		                         || CASE WHEN a.attgenerated = 's' THEN ' GENERATED ALWAYS AS (' || pg_get_expr(d.adbin, d.adrelid) || ') STORED'
		                                 WHEN d.adbin IS NOT NULL THEN ' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid)
		                                 ELSE '' END
		                         || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
		                         E',\n' ORDER BY a.attnum) AS text
		         FROM pg_attribute a
		         JOIN pg_type at ON at.oid = a.atttypid
		         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) cols
		 CROSS JOIN LATERAL (
		       SELECT string_agg(format('    CONSTRAINT %I %s', k.conname, pg_get_constraintdef(k.oid)), E',\n' ORDER BY k.conname) AS text
		         FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype <> 'f') cons
		 CROSS JOIN LATERAL (
		       SELECT string_agg(pg_get_indexdef(i.indexrelid) || E';\n', '' ORDER BY i.indexrelid::regclass::text) AS text
		         FROM pg_index i
		        WHERE i.indrelid = c.oid
		          AND NOT EXISTS (SELECT FROM pg_constraint k WHERE k.conrelid = c.oid AND k.conindid = i.indexrelid
		                                                       AND k.contype IN ('p', 'u', 'x'))) idx
		 CROSS JOIN LATERAL (
		       SELECT string_agg(format(E'COMMENT ON COLUMN %s.%I IS %L;\n', c.oid::regclass, a.attname, d.description), '' ORDER BY a.attnum) AS text
		         FROM pg_attribute a
		         JOIN pg_description d ON d.classoid = 'pg_class'::regclass AND d.objoid = a.attrelid AND d.objsubid = a.attnum
		        WHERE a.attrelid = c.oid) colcom
		 CROSS JOIN LATERAL (
		       SELECT string_agg(format(E'COMMENT ON CONSTRAINT %I ON %s IS %L;\n', k.conname, c.oid::regclass, d.description), '' ORDER BY k.conname) AS text
		         FROM pg_constraint k
		         JOIN pg_description d ON d.classoid = 'pg_constraint'::regclass AND d.objoid = k.oid
		        WHERE k.conrelid = c.oid) concom
		 CROSS JOIN LATERAL (
		       SELECT string_agg(format(E'COMMENT ON INDEX %s IS %L;\n', i.indexrelid::regclass, d.description), ''
		                         ORDER BY i.indexrelid::regclass::text) AS text
		         FROM pg_index i
		         JOIN pg_description d ON d.classoid = 'pg_class'::regclass AND d.objoid = i.indexrelid AND d.objsubid = 0
		        WHERE i.indrelid = c.oid) idxcom
		 WHERE c.relnamespace = 'rl'::regnamespace AND c.relkind = 'r'
		UNION ALL
		SELECT '~ foreign keys', -- after every table name
		       string_agg(format(E'ALTER TABLE %s ADD CONSTRAINT %I %s;\n', k.conrelid::regclass, k.conname, pg_get_constraintdef(k.oid)),
		                  '' ORDER BY k.conrelid::regclass::text, k.conname),
		       '{}'
		  FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
		 WHERE c.relnamespace = 'rl'::regnamespace AND k.contype = 'f'
		HAVING count(*) > 0`)
	if err != nil {
		return "", err
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[sqlNode])
	if err != nil {
		return "", err
	}
	return joinInOrder(nodes)
}

// functions renders every function (and procedure) of rl with
// pg_get_functiondef, each with its comment, each after the functions it
// calls, ties in name order. A call is rl.<name>( in the code of its
// definition, header and body, outside comments and string literals: a call
// made by dynamic SQL is not seen (rl has none; plpgsql_check would flag one
// on caller input), and neither is one written without the schema.
func (r renderer) functions(ctx context.Context) (string, error) {
	rows, err := r.conn.Query(ctx, `
		SELECT p.oid::regprocedure::text, p.proname::text, pg_get_functiondef(p.oid),
		       format('COMMENT ON %s %s IS ', CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END, p.oid::regprocedure)
		       || quote_literal(obj_description(p.oid, 'pg_proc')) || E';\n'
		  FROM pg_proc p
		 WHERE p.pronamespace = 'rl'::regnamespace`)
	if err != nil {
		return "", err
	}
	type function struct {
		Signature, Name, Definition string
		Comment                     *string
	}
	fns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[function])
	if err != nil {
		return "", err
	}
	overloads := map[string][]string{} // name: signatures
	for _, f := range fns {
		overloads[f.Name] = append(overloads[f.Name], f.Signature)
	}
	nodes := make([]sqlNode, 0, len(fns))
	for _, f := range fns {
		def := f.Definition
		n := sqlNode{Name: f.Signature, Text: strings.TrimRight(def, "\n") + ";\n"}
		if f.Comment != nil {
			n.Text += "\n" + *f.Comment
		}
		for _, c := range sqltext.Calls(f.Definition) {
			if c == f.Name {
				continue // its own name (the CREATE line, recursion): overloads need no order
			}
			n.Deps = append(n.Deps, overloads[c]...)
		}
		nodes = append(nodes, n)
	}
	return joinInOrder(nodes)
}

// views renders the views of rl, each after the views it reads, with
// their comments.
func (r renderer) views(ctx context.Context) (string, error) {
	rows, err := r.conn.Query(ctx, `
		SELECT c.oid::regclass::text,
		       format(E'CREATE VIEW %s%s AS\n%s\n', c.oid::regclass,
		              coalesce(' WITH (' || array_to_string(c.reloptions, ', ') || ')', ''), pg_get_viewdef(c.oid))
		       || coalesce(E'\n' || nullif(concat(
		              format('COMMENT ON VIEW %s IS ', c.oid::regclass) || quote_literal(obj_description(c.oid, 'pg_class')) || E';\n',
		              (SELECT string_agg(format(E'COMMENT ON COLUMN %s.%I IS %L;\n', c.oid::regclass, a.attname, d.description), '' ORDER BY a.attnum)
		                 FROM pg_attribute a
		                 JOIN pg_description d ON d.classoid = 'pg_class'::regclass AND d.objoid = a.attrelid AND d.objsubid = a.attnum
		        WHERE a.attrelid = c.oid)),
		              ''), ''),
		       ARRAY(SELECT DISTINCT d.refobjid::regclass::text
		               FROM pg_rewrite r
		               JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid AND d.refclassid = 'pg_class'::regclass
		              WHERE r.ev_class = c.oid AND d.refobjid <> c.oid)
		  FROM pg_class c
		 WHERE c.relnamespace = 'rl'::regnamespace AND c.relkind = 'v'`)
	if err != nil {
		return "", err
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[sqlNode])
	if err != nil {
		return "", err
	}
	return joinInOrder(nodes)
}

// triggersAndPolicies renders the triggers and row security policies
// on the tables of rl, with their comments. They come after the functions,
// which they may call.
func (r renderer) triggersAndPolicies(ctx context.Context) (string, error) {
	rows, err := r.conn.Query(ctx, `
		SELECT format('%s trigger %s', c.oid::regclass, t.tgname),
		       pg_get_triggerdef(t.oid) || E';\n'
		       || coalesce(format(E'\nCOMMENT ON TRIGGER %I ON %s IS ', t.tgname, c.oid::regclass) || quote_literal(obj_description(t.oid, 'pg_trigger')) || E';\n', ''),
		       '{}'::text[]
		  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		 WHERE c.relnamespace = 'rl'::regnamespace AND NOT t.tgisinternal
		UNION ALL
		SELECT format('%s policy %s', c.oid::regclass, p.polname),
		       format('CREATE POLICY %I ON %s AS %s FOR %s TO %s', p.polname, c.oid::regclass,
		              CASE WHEN p.polpermissive THEN 'PERMISSIVE' ELSE 'RESTRICTIVE' END,
		              CASE p.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT' WHEN 'w' THEN 'UPDATE' WHEN 'd' THEN 'DELETE' ELSE 'ALL' END,
		              (SELECT string_agg(g.name, ', ' ORDER BY g.name)
		                 FROM (SELECT CASE WHEN r = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r)) END AS name
		                         FROM unnest(p.polroles) r) g))
		       || coalesce(E'\n    USING (' || pg_get_expr(p.polqual, p.polrelid) || ')', '')
		       || coalesce(E'\n    WITH CHECK (' || pg_get_expr(p.polwithcheck, p.polrelid) || ')', '')
		       || E';\n'
		       || coalesce(format(E'\nCOMMENT ON POLICY %I ON %s IS ', p.polname, c.oid::regclass) || quote_literal(obj_description(p.oid, 'pg_policy')) || E';\n', ''),
		       '{}'
		  FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
		 WHERE c.relnamespace = 'rl'::regnamespace`)
	if err != nil {
		return "", err
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[sqlNode])
	if err != nil {
		return "", err
	}
	return joinInOrder(nodes)
}

// grants renders the privileges on the functions, tables (and their
// columns), the schema and the types of rl, as the differences from the
// defaults a new object gets: REVOKE for a default privilege taken away
// (EXECUTE from PUBLIC, say), GRANT for one given. The owner's own
// privileges and every grantor are left out, so no owner name appears.
func (r renderer) grants(ctx context.Context) (string, error) {
	rows, err := r.conn.Query(ctx, `
		WITH obj AS (
		    SELECT 1 AS ord, CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END AS kind,
		           p.oid::regprocedure::text AS name, '' AS col, 'f'::"char" AS t, p.proowner AS owner, p.proacl AS acl
		      FROM pg_proc p WHERE p.pronamespace = 'rl'::regnamespace
		    UNION ALL
		    SELECT 2, 'TABLE', c.oid::regclass::text, '', 'r', c.relowner, c.relacl
		      FROM pg_class c WHERE c.relnamespace = 'rl'::regnamespace AND c.relkind IN ('r', 'v')
		    UNION ALL
		    SELECT 2, 'TABLE', c.oid::regclass::text, format(' (%I)', a.attname), 'c', c.relowner, a.attacl
		      FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		     WHERE c.relnamespace = 'rl'::regnamespace AND c.relkind IN ('r', 'v')
		    UNION ALL
		    SELECT 3, 'SCHEMA', quote_ident(n.nspname), '', 'n', n.nspowner, n.nspacl
		      FROM pg_namespace n WHERE n.nspname = 'rl'
		    UNION ALL
		    SELECT 4, CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, format_type(t.oid, NULL), '', 'T', t.typowner, t.typacl
		      FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
		     WHERE t.typnamespace = 'rl'::regnamespace AND (c.relkind = 'c' OR t.typtype IN ('e', 'd'))
		), entry AS (
		    SELECT o.*, e.grantee, e.privilege_type, e.is_grantable, NOT dflt AS held, dflt
		      FROM obj o
		     CROSS JOIN LATERAL (SELECT x.*, false AS dflt FROM aclexplode(o.acl) x
		                         UNION ALL
		                         SELECT x.*, true FROM aclexplode(acldefault(o.t, o.owner)) x) e
		     WHERE o.acl IS NOT NULL AND e.grantee <> o.owner
		), diff AS (
		    SELECT ord, kind, name, col, grantee, privilege_type, is_grantable, bool_or(held) AS held
		      FROM entry
		     GROUP BY ord, kind, name, col, grantee, privilege_type, is_grantable
		    HAVING bool_or(held) <> bool_or(dflt)
		)
		SELECT format(E'%s %s ON %s %s %s %s%s;\n',
		              CASE WHEN held THEN 'GRANT' ELSE 'REVOKE' END,
		              string_agg(privilege_type || col, ', ' ORDER BY privilege_type, col),
		              kind, name,
		              CASE WHEN held THEN 'TO' ELSE 'FROM' END,
		              CASE WHEN grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(grantee)) END,
		              CASE WHEN held AND is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
		  FROM diff
		 GROUP BY ord, kind, name, held, grantee, is_grantable
		 ORDER BY ord, name, held, CASE WHEN grantee = 0 THEN '' ELSE pg_get_userbyid(grantee)::text END, is_grantable`)
	if err != nil {
		return "", err
	}
	stmts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	return strings.Join(stmts, ""), nil
}

// sqlNode is one object of the rendered schema: its name (its signature, for
// a function), its SQL, and the names of the objects to create before it.
type sqlNode = sqltext.Node

// joinInOrder joins the texts of nodes, each after its dependencies, with a
// blank line between them.
func joinInOrder(nodes []sqlNode) (string, error) {
	ordered, err := sqltext.Order(nodes)
	if err != nil {
		return "", err
	}
	texts := make([]string, len(ordered))
	for i, n := range ordered {
		texts[i] = n.Text
	}
	return strings.Join(texts, "\n"), nil
}

// firstDifference describes the first line where texts a and b (named
// aName and bName) differ.
func firstDifference(aName, a, bName, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		line := func(ls []string) string {
			if i < len(ls) {
				return fmt.Sprintf("%q", ls[i])
			}
			return "(end of text)"
		}
		if i >= len(al) || i >= len(bl) || al[i] != bl[i] {
			return fmt.Sprintf("first difference at line %d:\n  %s: %s\n  %s: %s", i+1, aName, line(al), bName, line(bl))
		}
	}
	return "no difference"
}

// errorLine returns " at line N" for a PostgreSQL error that gives its
// position in text, else "".
func errorLine(text string, err error) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Position <= 0 {
		return ""
	}
	line, chars := 1, int32(1)
	for _, r := range text {
		if chars == pe.Position {
			break
		}
		if r == '\n' {
			line++
		}
		chars++
	}
	return fmt.Sprintf(" at line %d", line)
}
