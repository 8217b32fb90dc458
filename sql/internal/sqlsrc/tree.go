// Package sqlsrc reads the SQL source of rl (sql/src: the schema as it is
// now, one file per concern) and derives from it everything a database
// needs: the install script, the migration of the open version (the
// objects that changed since the snapshot of the previous version, plus a
// handwritten step for tables and data), the extension's scripts, and the
// algorithm table of core in SQL and C. The command sql/internal/sqlgen
// writes what Generate returns; its tests fail while a committed file is
// stale. sql/README.md ("Editing the SQL") says how to use it.
package sqlsrc

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/rlcore/rl/sql/internal/sqltext"
)

// The source tree, relative to the repository's root.
const (
	SrcDir   = "sql/src"
	StepsDir = "sql/src/steps"
)

// sections are the files of the source tree in install order; functions/
// holds every function, one file per concern (installed in the order their
// calls need, whatever the file); views.sql the views, which read tables
// and call functions.
var sections = []string{"schema.sql", "types.sql", "tables.sql", "functions/*.sql", "views.sql", "grants.sql"}

// Kind is the kind of a statement of the source.
type Kind int

// The kinds of statements: a function (CREATE FUNCTION), a view (CREATE
// VIEW: it holds no data, so a migration drops and creates it as it
// replaces a function), a comment (COMMENT ON), a grant (GRANT or REVOKE of
// privileges on objects), and everything else, structural (schema, types,
// tables, indexes, DO blocks), which a migration changes only through a
// handwritten step.
const (
	Structural Kind = iota
	Function
	Comment
	Grant
	View
)

// An Object is one statement of the source.
type Object struct {
	Kind  Kind
	File  string // the file it is in, relative to sql/src
	Lead  string // the comment lines above it
	Text  string // the statement, with its trailing comment if any
	Key   string // function: rl.name(type,...); view: rl.name; comment: its target; structural: its text, spaces collapsed
	Name  string // function, view: rl.name
	Calls []string
	// Target is, for a comment on a function, the function's Key.
	Target string
	Grants []grantAtom // grant: one per privilege set, object and grantee
}

// A Tree is the source: its objects in source order.
type Tree struct {
	Objects []Object
}

// Load reads the source tree at root/sql/src (root is the repository's
// root), with the files in extra (paths relative to sql/src) standing in
// for or added to the files on disk: the generated ones.
func Load(root string, extra map[string]string) (*Tree, error) {
	return LoadFS(os.DirFS(filepath.Join(root, SrcDir)), extra)
}

// LoadFS reads the source tree from src, which holds the files of sql/src
// (the embedded copy the Go package sql/extension builds its install
// script from), with extra as for Load.
func LoadFS(src fs.FS, extra map[string]string) (*Tree, error) {
	files, err := sourceFiles(src, extra)
	if err != nil {
		return nil, err
	}
	t := &Tree{}
	for _, name := range files {
		text, ok := extra[name]
		if !ok {
			b, err := fs.ReadFile(src, name)
			if err != nil {
				return nil, err
			}
			text = string(b)
		}
		if err := t.add(name, text); err != nil {
			return nil, err
		}
	}
	return t, t.check()
}

// Parse reads a script of objects (a snapshot of a version: sql/versions).
func Parse(name, text string) (*Tree, error) {
	t := &Tree{}
	if err := t.add(name, text); err != nil {
		return nil, err
	}
	// The search path every script sets first is no object.
	t.Objects = slices.DeleteFunc(t.Objects, func(o Object) bool { return o.Text+"\n" == SearchPath })
	return t, t.check()
}

// sourceFiles lists the files of the source in install order, failing on
// a .sql file that no section holds (it would be silently left out).
func sourceFiles(src fs.FS, extra map[string]string) ([]string, error) {
	var all []string
	err := fs.WalkDir(src, ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == "steps" {
				return fs.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".sql") {
			all = append(all, rel)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for name := range extra {
		if !slices.Contains(all, name) {
			all = append(all, name)
		}
	}
	var out []string
	for _, sec := range sections {
		var matched []string
		for _, f := range all {
			if ok, _ := path.Match(sec, f); ok {
				matched = append(matched, f)
			}
		}
		slices.Sort(matched)
		out = append(out, matched...)
	}
	for _, f := range all {
		if !slices.Contains(out, f) {
			return nil, fmt.Errorf("%s/%s: no section of the source holds it (%s); move it into one", SrcDir, f, strings.Join(sections, ", "))
		}
	}
	return out, nil
}

var (
	reFunction = regexp.MustCompile(`(?is)^CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(rl\.[a-z_][a-z0-9_$]*)\s*\(`)
	reView     = regexp.MustCompile(`(?is)^CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+(rl\.[a-z_][a-z0-9_$]*)[\s(]`)
	reComment  = regexp.MustCompile(`(?is)^COMMENT\s+ON\s+(.+?)\s+IS\s`)
	reGrant    = regexp.MustCompile(`(?is)^(GRANT|REVOKE)\s`)
	reSpaces   = regexp.MustCompile(`\s+`)
)

func (t *Tree) add(file, text string) error {
	stmts, err := sqltext.Split(text)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	for _, s := range stmts {
		o := Object{File: file, Lead: s.Lead, Text: s.Text}
		if s.Trail != "" {
			o.Text += " " + s.Trail
		}
		where := fmt.Sprintf("%s:%d", file, s.Line)
		code := sqltext.Code(s.Text)
		switch {
		case reFunction.MatchString(code):
			m := reFunction.FindStringSubmatchIndex(code)
			o.Kind, o.Name = Function, strings.ToLower(code[m[2]:m[3]])
			params, _, err := parenthesized(s.Text, m[1]-1)
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			types, err := paramTypes(params)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", where, o.Name, err)
			}
			o.Key = o.Name + "(" + strings.Join(types, ",") + ")"
			for _, c := range sqltext.Calls(s.Text) {
				o.Calls = append(o.Calls, "rl."+c)
			}
		case reView.MatchString(code):
			m := reView.FindStringSubmatch(code)
			o.Kind, o.Name = View, strings.ToLower(m[1])
			o.Key = o.Name
		case reComment.MatchString(code):
			m := reComment.FindStringSubmatchIndex(code)
			target := reSpaces.ReplaceAllString(s.Text[m[2]:m[3]], " ")
			o.Kind, o.Key = Comment, target
			if f := strings.TrimPrefix(target, "FUNCTION "); f != target {
				i := strings.IndexByte(f, '(')
				params, _, err := parenthesized(f, i)
				if err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
				types, err := paramTypes(params)
				if err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
				o.Target = strings.ToLower(strings.TrimSpace(f[:i])) + "(" + strings.Join(types, ",") + ")"
				o.Key = "FUNCTION " + o.Target
			}
		case reGrant.MatchString(code):
			atoms, err := parseGrant(s.Text)
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			if atoms == nil { // a role granted to a role
				o.Kind, o.Key = Structural, reSpaces.ReplaceAllString(s.Text, " ")
				break
			}
			o.Kind, o.Grants = Grant, atoms
		default:
			o.Kind, o.Key = Structural, reSpaces.ReplaceAllString(s.Text, " ")
		}
		if strings.HasPrefix(file, "functions/") && o.Kind != Function && o.Target == "" {
			return fmt.Errorf("%s: the files of functions/ hold functions and their comments only", where)
		}
		t.Objects = append(t.Objects, o)
	}
	return nil
}

// check fails on two functions with one signature or two views with one
// name and on a comment on a function that is not there.
func (t *Tree) check() error {
	seen := map[string]bool{}
	for _, o := range t.Objects {
		if o.Kind == Function || o.Kind == View {
			if seen[o.Key] {
				return fmt.Errorf("%s: %s is defined twice", o.File, o.Key)
			}
			seen[o.Key] = true
		}
	}
	for _, o := range t.Objects {
		if o.Target != "" && !seen[o.Target] {
			return fmt.Errorf("%s: COMMENT ON FUNCTION %s: no such function in the source (its argument types must be the function's)", o.File, o.Target)
		}
	}
	return nil
}

// Functions returns the functions in install order: each after the
// functions it calls (SQL functions are checked when created), ties in
// source order.
func (t *Tree) Functions() ([]Object, error) {
	var fns []Object
	byName := map[string][]string{}
	for _, o := range t.Objects {
		if o.Kind == Function {
			byName[o.Name] = append(byName[o.Name], fmt.Sprintf("%05d", len(fns)))
			fns = append(fns, o)
		}
	}
	nodes := make([]sqltext.Node, len(fns))
	for i, f := range fns {
		nodes[i] = sqltext.Node{Name: fmt.Sprintf("%05d", i)}
		for _, c := range f.Calls {
			if c == f.Name {
				continue // its own name (the CREATE line, recursion): overloads need no order
			}
			nodes[i].Deps = append(nodes[i].Deps, byName[c]...)
		}
	}
	ordered, err := sqltext.Order(nodes)
	if err != nil {
		return nil, err
	}
	out := make([]Object, len(ordered))
	for i, n := range ordered {
		var k int
		fmt.Sscanf(n.Name, "%d", &k)
		out[i] = fns[k]
	}
	return out, nil
}

// SearchPath is the first statement of every script: what the functions
// see while being created (their own search_path is set by each).
const SearchPath = "SET LOCAL search_path = pg_catalog, pg_temp;\n"

// Install returns the script that creates the schema rl as the source
// holds it, into a database without it: the files of the source in order,
// the functions in the order their calls need, each with its comments.
func (t *Tree) Install() (string, error) {
	fns, err := t.Functions()
	if err != nil {
		return "", err
	}
	commentsOn := map[string][]Object{}
	for _, o := range t.Objects {
		if o.Target != "" {
			commentsOn[o.Target] = append(commentsOn[o.Target], o)
		}
	}
	var b strings.Builder
	b.WriteString(SearchPath)
	heading := func(title string) {
		fmt.Fprintf(&b, "\n-- %s\n-- %s\n", title, strings.Repeat("=", len(title)))
	}
	file := ""
	functionsDone := false
	for _, o := range t.Objects {
		if strings.HasPrefix(o.File, "functions/") {
			if functionsDone {
				continue
			}
			functionsDone = true
			heading("sql/src/functions/*.sql: every function, each after the functions it calls")
			for _, f := range fns {
				writeObject(&b, f)
				for _, c := range commentsOn[f.Key] {
					b.WriteString(c.Text + "\n")
				}
			}
			continue
		}
		if o.File != file {
			file = o.File
			heading("sql/src/" + file)
		}
		writeObject(&b, o)
	}
	return b.String(), nil
}

func writeObject(b *strings.Builder, o Object) {
	b.WriteString("\n")
	if o.Lead != "" {
		b.WriteString(o.Lead + "\n")
	}
	b.WriteString(o.Text + "\n")
}

// Tables returns the names of the tables the source creates, in source
// order.
func (t *Tree) Tables() []string {
	var out []string
	for _, o := range t.Objects {
		if m := reCreateTable.FindStringSubmatch(sqltext.Code(o.Text)); o.Kind == Structural && m != nil {
			out = append(out, strings.ToLower(m[1]))
		}
	}
	return out
}

var reCreateTable = regexp.MustCompile(`(?is)^CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(rl\.[a-z_][a-z0-9_$]*)`)
