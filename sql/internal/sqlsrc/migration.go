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

// changes is the generated part of a migration from the objects of from
// to those of to.
func changes(from, to *Tree) (string, error) {
	fns, err := to.Functions()
	if err != nil {
		return "", err
	}
	old := map[string]Object{}
	for _, o := range from.Objects {
		if o.Kind == Function {
			old[o.Key] = o
		}
	}
	now := map[string]bool{}
	var b strings.Builder
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
		if oldComments[o.Key] != norm(o.Text) || replaced[o.Target] {
			cb.WriteString(o.Text + "\n")
		}
	}
	for _, o := range from.Objects {
		if o.Kind == Comment && !newComments[o.Key] && !dropped[o.Target] {
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
