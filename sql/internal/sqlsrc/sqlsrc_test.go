package sqlsrc

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../../.."

// TestGenerated fails while a committed generated file differs from what
// the generator writes (or one it removes is still there).
func TestGenerated(t *testing.T) {
	files, err := Generate(root, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		switch {
		case want == nil && err == nil:
			t.Errorf("%s should not exist: run %s", name, Command)
		case want != nil && string(b) != *want:
			t.Errorf("%s is stale: run %s (then commit the generated files)", name, Command)
		}
	}
}

func parse(t *testing.T, text string) *Tree {
	t.Helper()
	tr, err := Parse("test.sql", text)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

const base = `CREATE TABLE rl.t (a int);
CREATE FUNCTION rl.f(p_a integer, p_b bigint DEFAULT 0) RETURNS int LANGUAGE sql RETURN rl.g(p_a);
CREATE FUNCTION rl.g(a int) RETURNS int LANGUAGE sql RETURN a;
COMMENT ON FUNCTION rl.f(integer, bigint) IS 'f';
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rl FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl.f(integer, bigint), rl.g(int) TO rl_app;
`

func TestMigration(t *testing.T) {
	prev := parse(t, base)
	t.Run("no change", func(t *testing.T) {
		up, down, err := Migration(prev, parse(t, base), Step{}, 20)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(up, "-- No change.") || !strings.Contains(down, "-- No change.") {
			t.Errorf("up:\n%s\ndown:\n%s", up, down)
		}
	})
	t.Run("function changed, added, dropped", func(t *testing.T) {
		cur := parse(t, strings.NewReplacer(
			"RETURN a;", "RETURN a + 1;",
			"GRANT EXECUTE ON FUNCTION rl.f(integer, bigint), rl.g(int) TO rl_app;", "GRANT EXECUTE ON FUNCTION rl.f(integer, bigint) TO rl_app;",
		).Replace(base)+"CREATE FUNCTION rl.h() RETURNS int LANGUAGE sql RETURN 1;\n")
		up, down, err := Migration(prev, cur, Step{}, 20)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"CREATE OR REPLACE FUNCTION rl.g(a int) RETURNS int LANGUAGE sql RETURN a + 1;", "CREATE OR REPLACE FUNCTION rl.h()",
			"REVOKE EXECUTE ON FUNCTION rl.g(integer) FROM rl_app;", "REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rl FROM PUBLIC;"} {
			if !strings.Contains(up, want) {
				t.Errorf("up lacks %q:\n%s", want, up)
			}
		}
		if strings.Contains(up, "rl.f(p_a") {
			t.Errorf("up replaces rl.f, which did not change:\n%s", up)
		}
		for _, want := range []string{"RETURN a;", "DROP FUNCTION rl.h();", "GRANT EXECUTE ON FUNCTION rl.f(integer, bigint), rl.g(int) TO rl_app;"} {
			if !strings.Contains(down, want) {
				t.Errorf("down lacks %q:\n%s", want, down)
			}
		}
	})
	t.Run("comment gone", func(t *testing.T) {
		up, _, err := Migration(prev, parse(t, strings.Replace(base, "COMMENT ON FUNCTION rl.f(integer, bigint) IS 'f';\n", "", 1)), Step{}, 20)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(up, "COMMENT ON FUNCTION rl.f(integer,bigint) IS NULL;") {
			t.Errorf("up:\n%s", up)
		}
	})
	t.Run("view added, changed, dropped", func(t *testing.T) {
		view := "CREATE VIEW rl.v AS SELECT rl.f(1, 2) AS a;\nCOMMENT ON VIEW rl.v IS 'v';\nGRANT SELECT ON rl.v TO rl_admin;\n"
		withView := parse(t, base+view)
		up, down, err := Migration(prev, withView, Step{}, 20)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(up, "CREATE VIEW rl.v AS") || !strings.Contains(up, "COMMENT ON VIEW rl.v IS 'v';") ||
			!strings.Contains(up, "GRANT SELECT ON rl.v TO rl_admin;") || strings.Contains(up, "DROP VIEW") {
			t.Errorf("up (view added):\n%s", up)
		}
		// Down drops the view before anything it calls, and undoes nothing
		// else of it.
		if !strings.Contains(down, "DROP VIEW rl.v;") || strings.Contains(down, "REVOKE SELECT ON rl.v") ||
			strings.Contains(down, "COMMENT ON VIEW rl.v IS NULL") {
			t.Errorf("down (view added):\n%s", down)
		}
		// A changed view, and a function changed with it: dropped first,
		// created last, its comment and grant set again.
		changed := parse(t, strings.NewReplacer("RETURN a;", "RETURN a + 1;").Replace(base)+
			strings.Replace(view, "AS a;", "AS a, 2 AS b;", 1))
		up, _, err = Migration(withView, changed, Step{}, 20)
		if err != nil {
			t.Fatal(err)
		}
		d, f, c, cm := strings.Index(up, "DROP VIEW rl.v;"), strings.Index(up, "CREATE OR REPLACE FUNCTION rl.g"),
			strings.Index(up, "CREATE VIEW rl.v AS"), strings.Index(up, "COMMENT ON VIEW rl.v IS 'v';")
		if d < 0 || f < 0 || c < 0 || cm < 0 || !(d < f && f < c && c < cm) || !strings.Contains(up, "GRANT SELECT ON rl.v TO rl_admin;") {
			t.Errorf("up (view changed): want DROP VIEW, the function, CREATE VIEW, its comment, in order:\n%s", up)
		}
	})
	t.Run("table changed needs a step", func(t *testing.T) {
		cur := parse(t, strings.Replace(base, "(a int)", "(a int, b int)", 1))
		if _, _, err := Migration(prev, cur, Step{}, 20); err == nil || !strings.Contains(err.Error(), "sql/src/steps/0020.up.sql") {
			t.Fatalf("err = %v, want one naming the step file", err)
		}
		up, down, err := Migration(prev, cur, Step{Up: "ALTER TABLE rl.t ADD b int;", Down: "ALTER TABLE rl.t DROP b;"}, 20)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(up, "ALTER TABLE rl.t ADD b int;") || !strings.HasSuffix(strings.TrimSpace(down), "ALTER TABLE rl.t DROP b;") {
			t.Errorf("up:\n%s\ndown:\n%s", up, down)
		}
	})
}

func TestParamTypes(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"p_key text, VARIADIC xs int[], OUT allowed boolean", "text,integer[]"},
		{"a double precision, timestamp with time zone, n rl.state_words [] DEFAULT NULL", "double precision,timestamp with time zone,rl.state_words[]"},
		{"INOUT x bool = true, numeric(10, 2)", "boolean,numeric(10, 2)"},
	} {
		got, err := paramTypes(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("paramTypes(%q) = %q, want %q", c.in, strings.Join(got, ","), c.want)
		}
	}
}

// TestPrologue: the prologue comes first in an extension script, after the
// psql guard; none, nothing; the generator's is sql/extension/prologue.sql
// with the script's action.
func TestPrologue(t *testing.T) {
	s := scriptWith("SELECT rl_check();", "what", "CREATE TABLE rl.t ();", []string{"rl.t"})
	guard, pro, body := strings.Index(s, `\echo`), strings.Index(s, "SELECT rl_check();"), strings.Index(s, "CREATE TABLE rl.t")
	if !(guard >= 0 && guard < pro && pro < body) {
		t.Errorf("prologue misplaced:\n%s", s)
	}
	if !strings.Contains(scriptWith("", "what", "x;", nil), "\n\nx;\n") || strings.Contains(s, "SELECT rl_check();\nSELECT rl_check();") {
		t.Errorf("scriptWith")
	}
	// The prologue of sql/extension/prologue.sql, the action written in.
	p, err := Prologue(root, "update the extension rl to version 21")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p, "'update the extension rl to version 21'") || strings.Contains(p, PrologueAction) || !strings.Contains(p, "rl.allow_superuser") {
		t.Errorf("Prologue(update to 21):\n%s", p)
	}
	prologue, err := os.ReadFile(filepath.Join(root, PrologueFile))
	if err != nil {
		t.Fatal(err)
	}
	s, err = installScript(parse(t, "CREATE TABLE rl.t ();"), string(prologue), 21)
	if err != nil {
		t.Fatal(err)
	}
	if guard, pro, body := strings.Index(s, `\echo`), strings.Index(s, "DO $rl_owner_check$"), strings.Index(s, "CREATE TABLE rl.t"); !(guard >= 0 && guard < pro && pro < body) || !strings.Contains(s, "'install the extension rl'") ||
		!strings.Contains(s, "version 21") || !strings.HasSuffix(s, "pg_extension_config_dump('rl.t', '');\n") {
		t.Errorf("installScript: the owner check misplaced or missing, or the table not marked:\n%s", s)
	}
	if _, err := installScript(parse(t, "CREATE TABLE rl.t ();"), "no placeholder", 21); err == nil {
		t.Errorf("installScript: a prologue without %s accepted", PrologueAction)
	}
}

// TestAlgorithmTable: the generated table names every algorithm of core
// and no number range is left in the handwritten SQL and C.
func TestAlgorithmTable(t *testing.T) {
	sql := algorithmsSQL()
	for _, name := range []string{"fixed_window", "sliding_window_counter", "gcra", "token"} {
		if !strings.Contains(sql, "'"+name+"'") {
			t.Errorf("algorithms.sql lacks %s", name)
		}
	}
	var files []string
	for _, pattern := range []string{"sql/src/*.sql", "sql/src/functions/*.sql", "sql/native/*.c", "sql/native/*.h", "sql/native/alg/*.c"} {
		m, _ := filepath.Glob(filepath.Join(root, pattern))
		files = append(files, m...)
	}
	if !slices.ContainsFunc(files, func(f string) bool { return strings.HasSuffix(f, "decide.sql") }) {
		t.Fatalf("no source files found: %v", files)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "/"+filepath.Base(AlgorithmsFile)) || strings.HasSuffix(f, "/rl_algorithms.h") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := algorithmRange.FindAllString(string(b), -1); m != nil {
			t.Errorf("%s: algorithm number ranges %q: use rl._windowed, rl._units_bounded, rl._alg_valid (C: rl_alg_*)", f, m)
		}
	}
}

// TestCheckAlgorithms: the generator refuses an algorithm without its SQL
// file, one of its functions (or one of another signature), or its C file
// or one of its C functions, and a file of no algorithm, naming each.
func TestCheckAlgorithms(t *testing.T) {
	tree, err := LoadGenerated(root)
	if err != nil {
		t.Fatal(err)
	}
	without := func(drop func(Object) bool) *Tree {
		return &Tree{Objects: slices.DeleteFunc(slices.Clone(tree.Objects), drop)}
	}
	withFile := func(o Object) *Tree {
		return &Tree{Objects: append(slices.Clone(tree.Objects), o)}
	}
	stepKey := "rl._gcra_step(bigint,bigint,bigint,integer,bigint,bigint,bigint,bigint[],boolean,bigint,bigint,boolean,rl._eval_result)"
	resigned := without(func(Object) bool { return false })
	for i, o := range resigned.Objects {
		if o.Key == stepKey {
			resigned.Objects[i].Key = "rl._gcra_step(bigint)"
		}
	}
	// cRoot is a root whose C files are the repository's, changed by edit.
	cRoot := func(t *testing.T, edit func(dir string)) string {
		dir := t.TempDir()
		alg := filepath.Join(dir, "sql/native/alg")
		if err := os.MkdirAll(alg, 0o755); err != nil {
			t.Fatal(err)
		}
		files, _ := filepath.Glob(filepath.Join(root, "sql/native/alg/*.c"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(alg, filepath.Base(f)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		edit(alg)
		return dir
	}
	same := func(string) {}
	for _, c := range []struct {
		name string
		tree *Tree
		edit func(dir string)
		want string // "": no error
	}{
		{"complete", tree, same, ""},
		{"no SQL file", without(func(o Object) bool { return o.File == "functions/alg_gcra.sql" }), same,
			"algorithm gcra (6): no file sql/src/functions/alg_gcra.sql"},
		{"no SQL function", without(func(o Object) bool { return o.Name == "rl._gcra_usage" }), same,
			"sql/src/functions/alg_gcra.sql lacks rl._gcra_usage(s_t bigint"},
		{"another signature", resigned, same, "found rl._gcra_step(bigint) in functions/alg_gcra.sql"},
		{"SQL file of no algorithm", withFile(Object{Kind: Function, File: "functions/alg_anchored.sql", Name: "rl._x", Key: "rl._x()"}), same,
			"functions/alg_anchored.sql: no algorithm of core.Algorithms() is named anchored"},
		{"no C file", tree, func(dir string) { os.Remove(filepath.Join(dir, "gcra.c")) },
			"algorithm gcra (6): no file sql/native/alg/gcra.c"},
		{"no C function", tree, func(dir string) {
			p := filepath.Join(dir, "gcra.c")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "rl_gcra_carry(", "rl_gcra_carried(")), 0o644)
		}, "sql/native/alg/gcra.c lacks static void rl_gcra_carry(int64 a"},
		{"C file of no algorithm", tree, func(dir string) { os.WriteFile(filepath.Join(dir, "anchored.c"), nil, 0o644) },
			"sql/native/alg/anchored.c: no algorithm of core.Algorithms() is named anchored"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkAlgorithms(cRoot(t, c.edit), c.tree)
			switch {
			case c.want == "" && err != nil:
				t.Fatal(err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}
