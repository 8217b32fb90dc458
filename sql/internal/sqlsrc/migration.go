package sqlsrc

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// norm is a statement's text as compared between versions: CREATE and
// CREATE OR REPLACE alike, trailing spaces ignored.
func norm(s string) string {
	s = reCreateOrReplace.ReplaceAllString(s, "CREATE OR REPLACE FUNCTION ")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	return strings.Join(lines, "\n")
}

var reCreateOrReplace = regexp.MustCompile(`(?i)^CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+`)

// Migration returns the up and down migration to version v from the
// objects of prev to those of cur. Up: the handwritten step's up, then
// every function new or changed (CREATE OR REPLACE, in the order their
// calls need), the functions gone dropped, the comments new or changed
// (and those of the functions replaced) set, the comments gone cleared, and
// the grants: the ones gone undone, then every grant statement of cur again
// (each is idempotent). Down is the same from cur to prev, then the step's
// down. A change of any other statement (a table, a type, an index, a DO
// block) is the step's to make: without a step file it is refused.
func Migration(prev, cur *Tree, step Step, v int) (up, down string, err error) {
	if d := structuralDiff(prev, cur); d != "" && step.Up == "" {
		return "", "", fmt.Errorf("version %d changes %s: write the change in sql/src/steps/%04d.up.sql and its undoing in %04d.down.sql "+
			"(the generator writes functions, comments and grants only)", v, d, v, v)
	}
	upBody, err := changes(prev, cur)
	if err != nil {
		return "", "", err
	}
	downBody, err := changes(cur, prev)
	if err != nil {
		return "", "", err
	}
	head := func(dir, from, to string) string {
		return Header("--") + fmt.Sprintf(`--
-- Migration %04d %s: from the objects of %s to those of %s. Edit sql/src
-- (and sql/src/steps/%04d.*.sql for tables and data), then run the command
-- above; once released this file is history and never changes.
`, v, dir, from, to, v)
	}
	prevName, curName := fmt.Sprintf("version %d (sql/versions/%d.sql)", v-1, v-1), "sql/src"
	up = head("up", prevName, curName) + SearchPath + section("sql/src/steps/"+fmt.Sprintf("%04d.up.sql", v), step.Up) + upBody
	down = head("down", curName, prevName) + SearchPath + downBody + section("sql/src/steps/"+fmt.Sprintf("%04d.down.sql", v), step.Down)
	if upBody == "" && step.Up == "" {
		up += "\n-- No change.\n"
	}
	if downBody == "" && step.Down == "" {
		down += "\n-- No change.\n"
	}
	return up, down, nil
}

func section(title, text string) string {
	if strings.TrimSpace(text) == "" {
		return ""
	}
	return fmt.Sprintf("\n-- %s\n\n%s\n", title, strings.TrimRight(text, "\n"))
}

// structuralDiff names the structural statements that differ, or "".
func structuralDiff(prev, cur *Tree) string {
	set := func(t *Tree) []string {
		var out []string
		for _, o := range t.Objects {
			if o.Kind == Structural {
				out = append(out, norm(o.Text))
			}
		}
		return out
	}
	p, c := set(prev), set(cur)
	var diff []string
	for _, s := range c {
		if !slices.Contains(p, s) {
			diff = append(diff, "+ "+firstLine(s))
		}
	}
	for _, s := range p {
		if !slices.Contains(c, s) {
			diff = append(diff, "- "+firstLine(s))
		}
	}
	return strings.Join(diff, "; ")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// views returns the views of t by name.
func (t *Tree) views() map[string]Object {
	out := map[string]Object{}
	for _, o := range t.Objects {
		if o.Kind == View {
			out[o.Key] = o
		}
	}
	return out
}

// viewOf is the view a comment of t is on (COMMENT ON VIEW v, COMMENT ON
// COLUMN v.c), or "".
func viewOf(comment string, views map[string]Object) string {
	for name := range views {
		if comment == "VIEW "+name || strings.HasPrefix(comment, "COLUMN "+name+".") {
			return name
		}
	}
	return ""
}

// changes is the generated part of a migration from the objects of from
// to those of to. The views changed or gone are dropped first and the views
// new or changed created last, so that the functions they call can change
// in between.
func changes(from, to *Tree) (string, error) {
	fns, err := to.Functions()
	if err != nil {
		return "", err
	}
	fromViews, toViews := from.views(), to.views()
	var b strings.Builder
	viewDropped, viewMade := map[string]bool{}, map[string]bool{}
	for i := len(from.Objects) - 1; i >= 0; i-- {
		o := from.Objects[i]
		if o.Kind != View {
			continue
		}
		if n, ok := toViews[o.Key]; !ok || norm(n.Text) != norm(o.Text) {
			viewDropped[o.Key] = true
			fmt.Fprintf(&b, "\nDROP VIEW %s;\n", o.Key)
		}
	}
	old := map[string]Object{}
	for _, o := range from.Objects {
		if o.Kind == Function {
			old[o.Key] = o
		}
	}
	now := map[string]bool{}
	replaced := map[string]bool{}
	for _, f := range fns {
		now[f.Key] = true
		if o, ok := old[f.Key]; ok && norm(o.Text) == norm(f.Text) {
			continue
		}
		replaced[f.Key] = true
		b.WriteString("\n" + reCreateOrReplace.ReplaceAllString(f.Text, "CREATE OR REPLACE FUNCTION ") + "\n")
	}
	dropped := map[string]bool{}
	olds, err := from.Functions()
	if err != nil {
		return "", err
	}
	for i := len(olds) - 1; i >= 0; i-- {
		if f := olds[i]; !now[f.Key] {
			dropped[f.Key] = true
			fmt.Fprintf(&b, "\nDROP FUNCTION %s;\n", f.Key)
		}
	}
	for _, o := range to.Objects {
		if o.Kind != View {
			continue
		}
		if p, ok := fromViews[o.Key]; !ok || norm(p.Text) != norm(o.Text) {
			viewMade[o.Key] = true
			b.WriteString("\n" + o.Text + "\n")
		}
	}
	for name := range viewDropped {
		if !viewMade[name] {
			dropped[name] = true // no grants or comments to undo
		}
	}
	// Comments.
	oldComments, newComments := map[string]string{}, map[string]bool{}
	for _, o := range from.Objects {
		if o.Kind == Comment {
			oldComments[o.Key] = norm(o.Text)
		}
	}
	var cb strings.Builder
	for _, o := range to.Objects {
		if o.Kind != Comment {
			continue
		}
		newComments[o.Key] = true
		if oldComments[o.Key] != norm(o.Text) || replaced[o.Target] || viewMade[viewOf(o.Key, toViews)] {
			cb.WriteString(o.Text + "\n")
		}
	}
	for _, o := range from.Objects {
		if o.Kind == Comment && !newComments[o.Key] && !dropped[o.Target] && !dropped[viewOf(o.Key, fromViews)] {
			fmt.Fprintf(&cb, "COMMENT ON %s IS NULL;\n", o.Key)
		}
	}
	if cb.Len() > 0 {
		b.WriteString("\n" + cb.String())
	}
	// Grants.
	atoms := func(t *Tree) []string {
		var out []string
		for _, o := range t.Objects {
			for _, a := range o.Grants {
				out = append(out, a.String())
			}
		}
		return out
	}
	toAtoms := atoms(to)
	var gb strings.Builder
	for _, o := range from.Objects {
		for _, a := range o.Grants {
			if !slices.Contains(toAtoms, a.String()) && !dropped[a.Object] {
				gb.WriteString(a.inverse().String() + "\n")
			}
		}
	}
	if b.Len() > 0 || gb.Len() > 0 || !slices.Equal(atoms(from), toAtoms) {
		for _, o := range to.Objects {
			if o.Kind == Grant {
				gb.WriteString(o.Text + "\n")
			}
		}
	}
	if gb.Len() > 0 {
		b.WriteString("\n-- The grants (each is idempotent).\n" + gb.String())
	}
	return b.String(), nil
}
