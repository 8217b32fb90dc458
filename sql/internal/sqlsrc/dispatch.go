package sqlsrc

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/rlcore/rl/core"
)

// An algorithm of core lives in one file per runtime: its PL/pgSQL functions
// in sql/src/functions/alg_<name>.sql, its C functions in
// sql/native/alg/<name>.c (name: core.Algorithm.String). Each file defines
// one function per role, named rl._<name>_<role> (C: rl_<name>_<role>) with
// the role's signature; the generator writes the dispatch over them from
// core.Algorithms() (rl._alg_<role> in functions/algorithms.sql,
// rl_alg_<role> in sql/native/rl_algorithms.h) and refuses an algorithm
// whose file or function is missing.

// algorithmSQLFile is the file of sql/src holding algorithm a's functions.
func algorithmSQLFile(a core.Algorithm) string { return "functions/alg_" + a.String() + ".sql" }

// algorithmCFile is the file, from the root, holding algorithm a's C
// functions.
func algorithmCFile(a core.Algorithm) string { return "sql/native/alg/" + a.String() + ".c" }

// A sqlRole is a function every algorithm's SQL file defines, named
// rl._<name>_<role>, and the generated function rl._alg_<role> that calls
// the one of the algorithm its first argument names. The dispatch is an SQL
// function of one CASE expression, which the planner inlines into its
// caller, as it inlines an algorithm's function of one expression: calling
// through it costs no PL/pgSQL call.
type sqlRole struct {
	name    string
	key     string // the dispatch's first parameter: the algorithm
	params  string // the algorithm's function's parameters, in order
	returns string
	orElse  string // the dispatch's ELSE ("": none, NULL)
	doc     string // what the function is, for the dispatch's comment and the generator's messages
}

var sqlRoles = []sqlRole{
	{"state_error", "s_alg", "s_t bigint, s_x bigint, s_y bigint, s_log bigint[]", "integer", "8",
		"its part of core checkState: 0, or 8 (ErrState) for words no state of it has (rl._state_error)"},
	{"step", "p_alg", "lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], exact boolean, now bigint, cost bigint, p_take boolean, r rl._eval_result",
		"rl._eval_result", "", "its decision (core decide): r filled in, on the state as rl._eval read it (rl._eval)"},
	{"settle", "p_alg", "lim bigint, w bigint, rate bigint, s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[], exact boolean, now bigint, delta bigint",
		"rl.state_words", "", "its settle (core settle): the state after delta, without l, w, r (rl._settle)"},
	{"anchor", "s_alg", "s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint", "bigint", "",
		"the anchor of a state of it, where rl._carry reads its usage"},
	{"usage", "s_alg", "s_t bigint, s_x bigint, s_y bigint, s_log bigint[], s_w bigint, s_r bigint", "bigint", "",
		"the usage of a state of it at its anchor (rl._carry): whole units for a window algorithm, a level in 1/s_w of a unit for the others, at most MaxStateValue"},
	{"carry", "p_alg", "a bigint, used bigint, lim bigint, w bigint, rate bigint", "rl.state_words", "",
		"the state it holds with a usage (> 0, within the limit) at anchor a (rl._carry): units for a window algorithm, a level in 1/w of a unit for the others; rate is the effective one"},
}

// fn is the name of algorithm a's function of the role.
func (r sqlRole) fn(a core.Algorithm) string { return "rl._" + a.String() + "_" + r.name }

// types are the parameter types of the role, as a function's Key has them.
func (r sqlRole) types() string {
	t, err := paramTypes(r.params)
	if err != nil {
		panic(err) // sqlRoles is a constant table
	}
	return strings.Join(t, ",")
}

// args are the role's parameter names, as the dispatch passes them on.
func (r sqlRole) args() string {
	var names []string
	for _, p := range splitTop(r.params) {
		names = append(names, strings.Fields(p)[0])
	}
	return strings.Join(names, ", ")
}

// dispatchSQL is the generated dispatch of every role.
func dispatchSQL() string {
	var b strings.Builder
	b.WriteString(`
-- The dispatch over the algorithms' functions (functions/alg_<name>.sql):
-- rl._alg_<role> calls rl._<name>_<role> of the algorithm its first
-- argument names. SQL functions of one expression, which the planner
-- inlines into their callers (rl._eval, rl._settle, rl._carry,
-- rl._state_error), as it inlines an algorithm's function of one
-- expression: a decision makes the PL/pgSQL calls its algorithm's step
-- makes, no more.
`)
	for _, r := range sqlRoles {
		var arms []string
		for _, a := range core.Algorithms() {
			arms = append(arms, fmt.Sprintf("\n        WHEN %d THEN %s(%s)", a, r.fn(a), r.args()))
		}
		if r.orElse != "" {
			arms = append(arms, "\n        ELSE "+r.orElse)
		}
		b.WriteString("\n" + wrap("-- ", fmt.Sprintf("rl._alg_%s: rl._<name>_%s, %s.", r.name, r.name, r.doc)))
		fmt.Fprintf(&b, "CREATE FUNCTION rl._alg_%s(%s integer, %s) RETURNS %s\n    LANGUAGE sql IMMUTABLE PARALLEL SAFE\n    RETURN CASE %s%s\n    END;\n",
			r.name, r.key, r.params, r.returns, r.key, strings.Join(arms, ""))
	}
	return b.String()
}

// wrap fills text into lines of at most 80 columns, each starting with
// prefix.
func wrap(prefix, text string) string {
	var b strings.Builder
	line := prefix
	for _, w := range strings.Fields(text) {
		if line != prefix && len(line)+1+len(w) > 80 {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = prefix
		}
		if line != prefix {
			line += " "
		}
		line += w
	}
	return b.String() + line + "\n"
}

// A cRole is a function every algorithm's C file defines, rl_<name>_<role>,
// and the generated rl_alg_<role> that calls the one of the algorithm its
// key names.
type cRole struct {
	name    string
	ret     string
	key     string // the expression naming the algorithm
	params  string // the algorithm's function's parameters
	keyDecl string // the dispatch's own first parameter, "" when key is in params
	orElse  string // the dispatch's default case
	doc     string
}

var cRoles = []cRole{
	{"state_error", "int", "s->alg", "const words *s, int logerr", "", "return 8;",
		"its part of core checkState: 0, or 8 (ErrState) for words no state of it has; logerr is log_error of a log's elements"},
	{"step", "void", "alg", "int64 lim, int64 w, int64 rate, const words *s, bool exact, int64 now, int64 cost, bool take, result *r, Datum *log", "int32 alg", "break;",
		"its decision (core decide): r filled in, *log the new log when a take admits on an algorithm with one (else left 0)"},
	{"settle", "bool", "alg", "int64 lim, int64 w, int64 rate, const words *s, bool exact, int64 now, int64 delta, bool caps, words *n", "int32 alg", "return false;",
		"its settle (core settle): *n the state after delta; false (ErrCost) where a debt too large for a state is refused (not caps)"},
	{"usage", "int64", "s->alg", "const words *s, int64 s_w, int64 s_r, int64 *anchor", "", "return 0;",
		"the usage of a state of it at its anchor (*anchor), for carry: whole units for a window algorithm, a level in 1/s_w of a unit for the others, at most MAX_STATE"},
	{"carry", "void", "alg", "int64 a, int64 used, int64 lim, int64 w, int64 rate, words *t", "int32 alg", "break;",
		"the state *t it holds with a usage (> 0, within the limit) at anchor a: units for a window algorithm, a level in 1/w of a unit for the others; rate is the effective one"},
}

func (r cRole) fn(a core.Algorithm) string { return "rl_" + a.String() + "_" + r.name }

func (r cRole) args() string {
	var names []string
	for _, p := range strings.Split(r.params, ",") {
		f := strings.Fields(p)
		names = append(names, strings.TrimLeft(f[len(f)-1], "*"))
	}
	return strings.Join(names, ", ")
}

// dispatchC is the C dispatch: each algorithm's file included, then one
// switch per role. A function is called as (name)(...), which a compiler
// refuses when the algorithm's file does not declare it.
func dispatchC() string {
	var b strings.Builder
	b.WriteString(`/*
 * Each algorithm's functions (alg/<name>.c, one file each), compiled into
 * rl_native here: rl_native.c includes this file after rl_native.h.
 */
`)
	for _, a := range core.Algorithms() {
		fmt.Fprintf(&b, "#include \"alg/%s.c\"\n", a)
	}
	b.WriteString(`
/*
 * The dispatch: rl_alg_<role> calls rl_<name>_<role> of the algorithm. Each
 * is called as (name)(...), an error where an algorithm's file lacks it.
 */
`)
	for _, r := range cRoles {
		params := r.params
		if r.keyDecl != "" {
			params = r.keyDecl + ", " + params
		}
		fmt.Fprintf(&b, "\n/*\n%s */\nstatic inline %s\nrl_alg_%s(%s)\n{\n\tswitch (%s)\n\t{\n",
			wrap(" * ", fmt.Sprintf("rl_alg_%s: rl_<name>_%s, %s.", r.name, r.name, r.doc)), r.ret, r.name, params, r.key)
		for _, a := range core.Algorithms() {
			call := fmt.Sprintf("(%s) (%s)", r.fn(a), r.args())
			if r.ret == "void" {
				fmt.Fprintf(&b, "\t\tcase RL_%s:\n\t\t\t%s;\n\t\t\tbreak;\n", strings.ToUpper(a.String()), call)
			} else {
				fmt.Fprintf(&b, "\t\tcase RL_%s:\n\t\t\treturn %s;\n", strings.ToUpper(a.String()), call)
			}
		}
		if r.name == "usage" {
			fmt.Fprintf(&b, "\t\tdefault:\n\t\t\t*anchor = 0;\n\t\t\t%s\n\t}\n}\n", r.orElse)
		} else {
			fmt.Fprintf(&b, "\t\tdefault:\n\t\t\t%s\n\t}\n}\n", r.orElse)
		}
	}
	return b.String()
}

// checkAlgorithms fails unless every algorithm of core has its SQL file in
// t, with each role's function of the role's signature, and its C file
// under root, defining each C role's function; and unless every such file
// is an algorithm's.
func checkAlgorithms(root string, t *Tree) error {
	how := `(ARCHITECTURE.md, "A new algorithm")`
	files := map[string]bool{}
	fns := map[string][]Object{}
	for _, o := range t.Objects {
		files[o.File] = true
		if o.Kind == Function {
			fns[o.Name] = append(fns[o.Name], o)
		}
	}
	known := map[string]bool{}
	var problems []string
	for _, a := range core.Algorithms() {
		known[a.String()] = true
		file := algorithmSQLFile(a)
		if !files[file] {
			problems = append(problems, fmt.Sprintf("algorithm %s (%d): no file %s/%s: write its functions there %s", a, a, SrcDir, file, how))
		} else {
			for _, r := range sqlRoles {
				want := r.fn(a) + "(" + r.types() + ")"
				var found []string
				ok := false
				for _, o := range fns[r.fn(a)] {
					found = append(found, o.Key+" in "+o.File)
					ok = ok || o.Key == want && o.File == file
				}
				if !ok {
					msg := fmt.Sprintf("algorithm %s (%d): %s/%s lacks %s(%s) RETURNS %s, %s %s", a, a, SrcDir, file, r.fn(a), r.params, r.returns, r.doc, how)
					if found != nil {
						msg += "; found " + strings.Join(found, ", ")
					}
					problems = append(problems, msg)
				}
			}
		}
		cfile := algorithmCFile(a)
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(cfile)))
		if err != nil {
			problems = append(problems, fmt.Sprintf("algorithm %s (%d): no file %s: write its C functions there %s", a, a, cfile, how))
			continue
		}
		for _, r := range cRoles {
			if !regexp.MustCompile(`(?m)^` + r.fn(a) + `\(`).Match(text) {
				problems = append(problems, fmt.Sprintf("algorithm %s (%d): %s lacks static %s %s(%s), %s %s", a, a, cfile, r.ret, r.fn(a), r.params, r.doc, how))
			}
		}
	}
	var sorted []string
	for f := range files {
		sorted = append(sorted, f)
	}
	slices.Sort(sorted)
	for _, f := range sorted {
		if name, ok := strings.CutPrefix(f, "functions/alg_"); ok && !known[strings.TrimSuffix(name, ".sql")] {
			problems = append(problems, fmt.Sprintf("%s/%s: no algorithm of core.Algorithms() is named %s", SrcDir, f, strings.TrimSuffix(name, ".sql")))
		}
	}
	cs, _ := filepath.Glob(filepath.Join(root, "sql/native/alg/*.c"))
	for _, f := range cs {
		if name := strings.TrimSuffix(filepath.Base(f), ".c"); !known[name] {
			problems = append(problems, fmt.Sprintf("sql/native/alg/%s.c: no algorithm of core.Algorithms() is named %s", name, name))
		}
	}
	if problems != nil {
		return fmt.Errorf("the algorithms' files:\n\t%s", strings.Join(problems, "\n\t"))
	}
	return nil
}
