package sqltext

import (
	"strings"
	"testing"
)

func TestOrder(t *testing.T) {
	order := func(nodes []Node) (string, error) {
		out, err := Order(nodes)
		names := make([]string, len(out))
		for i, n := range out {
			names[i] = n.Name
		}
		return strings.Join(names, " "), err
	}
	for _, c := range []struct {
		name  string
		nodes []Node
		want  string // the order, or the error
	}{
		{"names when independent", []Node{{Name: "c"}, {Name: "a"}, {Name: "b"}}, "a b c"},
		{"callee first", []Node{{Name: "a", Deps: []string{"c"}}, {Name: "b"}, {Name: "c"}}, "b c a"},
		{"unknown and self ignored", []Node{{Name: "a", Deps: []string{"a", "x"}}, {Name: "b", Deps: []string{"a", "a"}}}, "a b"},
		{"chain", []Node{{Name: "a", Deps: []string{"b"}}, {Name: "b", Deps: []string{"c"}}, {Name: "c"}}, "c b a"},
		{"cycle", []Node{{Name: "a", Deps: []string{"b"}}, {Name: "b", Deps: []string{"c"}}, {Name: "c", Deps: []string{"b"}}, {Name: "d"}},
			"dependency cycle: b needs c needs b"},
		{"duplicate", []Node{{Name: "a"}, {Name: "a"}}, "two objects named a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := order(c.nodes)
			if err != nil {
				got = err.Error()
			}
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestCode(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"SELECT rl.f(1) -- rl.g(\n", "SELECT rl.f(1)  \n"},
		{"a /* rl.g( /* nested */ rl.h( */ b", "a   b"},
		{"x := 'rl.g(''x'')' || rl.f(y)", "x := '' || rl.f(y)"},
		{`x := E'rl.g(\'' || rl.f(y)`, "x := E'' || rl.f(y)"},
		{"x := $q$rl.g($q$ || $$rl.h($$ || rl.f($1)", "x := '' || '' || rl.f($1)"},
		{`SELECT "rl.g(" FROM t`, `SELECT "rl.g(" FROM t`},
		{"a$b$ c", "a$b$ c"},
	} {
		if got := Code(c.in); got != c.want {
			t.Errorf("Code(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestCalls(t *testing.T) {
	got := strings.Join(Calls("CREATE FUNCTION rl.a(x int) RETURNS int AS $f$ BEGIN RETURN rl.b(x) + rl.c(1); -- rl.d(\n END $f$ LANGUAGE plpgsql; SELECT rl.b(2)"), " ")
	if want := "a b c"; got != want {
		t.Errorf("Calls = %q, want %q", got, want)
	}
}

func TestSplit(t *testing.T) {
	script := "-- about a\n-- more\nCREATE TABLE a (x int); -- trail\n\n-- loose\n\nDO $d$ BEGIN PERFORM 1; END $d$;\nCOMMENT ON TABLE a IS 'x;y';\n-- end\n"
	stmts, err := Split(script)
	if err != nil {
		t.Fatal(err)
	}
	if len(stmts) != 3 {
		t.Fatalf("got %d statements: %+v", len(stmts), stmts)
	}
	if s := stmts[0]; s.Lead != "-- about a\n-- more" || s.Text != "CREATE TABLE a (x int);" || s.Trail != "-- trail" || s.Line != 3 {
		t.Errorf("first: %+v", s)
	}
	if s := stmts[1]; s.Lead != "" || s.Text != "DO $d$ BEGIN PERFORM 1; END $d$;" || s.Line != 7 {
		t.Errorf("second: %+v", s)
	}
	if s := stmts[2]; s.Text != "COMMENT ON TABLE a IS 'x;y';" {
		t.Errorf("third: %+v", s)
	}
	for _, bad := range []string{"SELECT 1", "CREATE FUNCTION f() RETURNS int BEGIN ATOMIC SELECT 1; END;"} {
		if _, err := Split(bad); err == nil {
			t.Errorf("Split(%q): no error", bad)
		}
	}
}
