// Package sqltext reads PostgreSQL SQL as text, without a server: it splits
// a script into statements, strips comments and string literals to find the
// code of a statement, and orders objects after the objects they depend on.
// The SQL source generator (sql/internal/sqlgen) and the tests that render
// the schema rl use it.
package sqltext

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A Stmt is one statement of a script.
type Stmt struct {
	// Lead is the comment lines directly above the statement (no blank line
	// between them and it), as written; "" when there are none.
	Lead string
	// Text is the statement, from its first word to its semicolon.
	Text string
	// Trail is a comment after the semicolon on the statement's last line
	// ("-- 2^40"), without the line break; "" when there is none.
	Trail string
	// Line is the line of the script on which Text starts (1-based).
	Line int
}

// Split splits script into its statements at the semicolons outside
// comments, quoted strings, quoted identifiers and dollar-quoted strings.
// Text after the last semicolon must be blank or comments. SQL-standard
// bodies written BEGIN ATOMIC ... END (whose inner semicolons do not end the
// statement) are refused: write RETURN or a dollar-quoted body.
func Split(script string) ([]Stmt, error) {
	var out []Stmt
	start := 0 // start of the text not yet part of a statement
	for i := 0; i < len(script); {
		j, ok := skip(script, i)
		if ok {
			i = j
			continue
		}
		if script[i] != ';' {
			i++
			continue
		}
		lead, text, line := cut(script, start, i+1, len(out) > 0)
		i++
		trail := ""
		if j := strings.IndexByte(script[i:], '\n'); j >= 0 {
			if rest := strings.TrimSpace(script[i : i+j]); strings.HasPrefix(rest, "--") {
				trail, i = rest, i+j
			}
		}
		if text != ";" {
			if beginAtomic.MatchString(Code(text)) {
				return nil, fmt.Errorf("line %d: BEGIN ATOMIC bodies are not supported: write RETURN or a dollar-quoted body", line)
			}
			out = append(out, Stmt{Lead: lead, Text: text, Trail: trail, Line: line})
		}
		start = i
	}
	if rest := strings.TrimSpace(Code(script[start:])); rest != "" {
		return nil, fmt.Errorf("line %d: text after the last statement lacks its semicolon: %.40q", lineOf(script, start), rest)
	}
	return out, nil
}

var beginAtomic = regexp.MustCompile(`(?i)\bBEGIN\s+ATOMIC\b`)

// cut returns the comment lines directly above the statement in
// script[from:to], the statement and its line. After a statement (after),
// the first line of the chunk is the end of that statement's line.
func cut(script string, from, to int, after bool) (lead, text string, line int) {
	chunk := script[from:to]
	stmtStart := firstCode(chunk)
	text = strings.TrimSpace(chunk[stmtStart:])
	before := chunk[:stmtStart]
	lines := strings.Split(strings.TrimRight(before, " \t"), "\n")
	// lines[len-1] is what precedes the statement on its own line (blank).
	var leadLines []string
	first := 0
	if after {
		first = 1
	}
	for k := len(lines) - 2; k >= first; k-- {
		l := strings.TrimSpace(lines[k])
		if !strings.HasPrefix(l, "--") {
			break
		}
		leadLines = append([]string{lines[k]}, leadLines...)
	}
	return strings.Join(leadLines, "\n"), text, lineOf(script, from+stmtStart)
}

// firstCode is the index of the first character of s outside whitespace
// and comments (len(s) when there is none).
func firstCode(s string) int {
	for i := 0; i < len(s); {
		switch {
		case s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n':
			i++
		case strings.HasPrefix(s[i:], "--") || strings.HasPrefix(s[i:], "/*"):
			i, _ = skip(s, i)
		default:
			return i
		}
	}
	return len(s)
}

func lineOf(s string, i int) int { return strings.Count(s[:i], "\n") + 1 }

// dollarQuote matches the opening of a dollar-quoted string: $$ or $tag$.
var dollarQuote = regexp.MustCompile(`^\$([A-Za-z_\x80-\xff][A-Za-z0-9_\x80-\xff]*)?\$`)

func identChar(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// skip returns the end of the comment, quoted string, quoted identifier or
// dollar-quoted string starting at s[i], and true; or i, false when none
// starts there. An unterminated one ends at the end of s.
func skip(s string, i int) (int, bool) {
	switch {
	case strings.HasPrefix(s[i:], "--"):
		j := strings.IndexByte(s[i:], '\n')
		if j < 0 {
			return len(s), true
		}
		return i + j, true
	case strings.HasPrefix(s[i:], "/*"): // block comments nest
		depth := 0
		for i < len(s) {
			if strings.HasPrefix(s[i:], "/*") {
				depth++
				i += 2
			} else if strings.HasPrefix(s[i:], "*/") {
				depth--
				i += 2
				if depth == 0 {
					return i, true
				}
			} else {
				i++
			}
		}
		return i, true
	case s[i] == '\'':
		escapes := i > 0 && (s[i-1] == 'E' || s[i-1] == 'e') && (i < 2 || !identChar(s[i-2]))
		j := i + 1
		for j < len(s) {
			if escapes && s[j] == '\\' {
				j += 2
				continue
			}
			if s[j] == '\'' {
				if j+1 < len(s) && s[j+1] == '\'' {
					j += 2
					continue
				}
				break
			}
			j++
		}
		return min(j+1, len(s)), true
	case s[i] == '"':
		j := i + 1
		for j < len(s) {
			if s[j] == '"' {
				if j+1 < len(s) && s[j+1] == '"' {
					j += 2
					continue
				}
				break
			}
			j++
		}
		return min(j+1, len(s)), true
	case s[i] == '$' && (i == 0 || !identChar(s[i-1])) && dollarQuote.MatchString(s[i:]):
		tag := dollarQuote.FindString(s[i:])
		end := strings.Index(s[i+len(tag):], tag)
		if end < 0 {
			return len(s), true
		}
		return i + len(tag) + end + len(tag), true
	}
	return i, false
}

// Code returns the SQL text s with its comments removed (each replaced by a
// space) and its string literals (quoted, escaped and dollar-quoted)
// emptied (”), so that what remains is code. Quoted identifiers are kept.
func Code(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j, ok := skip(s, i)
		if !ok {
			b.WriteByte(s[i])
			i++
			continue
		}
		switch {
		case s[i] == '-' || s[i] == '/':
			b.WriteByte(' ')
		case s[i] == '"':
			b.WriteString(s[i:j])
		default:
			b.WriteString("''")
		}
		i = j
	}
	return b.String()
}

// A Node is one object to order: its name, its text, and the names of the
// objects to place before it (names not among the nodes ordered together
// are ignored).
type Node struct {
	Name string
	Text string
	Deps []string
}

// Order orders nodes so that each comes after the nodes it depends on;
// among the nodes ready at the same time the least name comes first, so the
// order is deterministic. It fails on a dependency cycle, naming it.
func Order(nodes []Node) ([]Node, error) {
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if _, dup := index[n.Name]; dup {
			return nil, fmt.Errorf("two objects named %s", n.Name)
		}
		index[n.Name] = i
	}
	deps := make([][]int, len(nodes))  // the distinct other nodes i depends on
	users := make([][]int, len(nodes)) // the nodes depending on i
	waiting := make([]int, len(nodes)) // how many of deps[i] are not placed yet
	for i, n := range nodes {
		for _, d := range n.Deps {
			j, ok := index[d]
			if !ok || j == i || slices.Contains(deps[i], j) {
				continue
			}
			deps[i] = append(deps[i], j)
			users[j] = append(users[j], i)
			waiting[i]++
		}
	}
	placed := make([]bool, len(nodes))
	out := make([]Node, 0, len(nodes))
	for len(out) < len(nodes) {
		next := -1
		for i, n := range nodes {
			if !placed[i] && waiting[i] == 0 && (next < 0 || n.Name < nodes[next].Name) {
				next = i
			}
		}
		if next < 0 {
			return nil, cycleError(nodes, deps, placed)
		}
		placed[next] = true
		out = append(out, nodes[next])
		for _, u := range users[next] {
			waiting[u]--
		}
	}
	return out, nil
}

// cycleError names a dependency cycle among the nodes not placed: each of
// them waits for another one not placed, so following the least-named such
// dependency from the least-named node must come back to a node seen.
func cycleError(nodes []Node, deps [][]int, placed []bool) error {
	least := func(candidates []int) int {
		best := -1
		for _, i := range candidates {
			if !placed[i] && (best < 0 || nodes[i].Name < nodes[best].Name) {
				best = i
			}
		}
		return best
	}
	all := make([]int, len(nodes))
	for i := range all {
		all[i] = i
	}
	var path []int
	for cur := least(all); ; cur = least(deps[cur]) {
		if k := slices.Index(path, cur); k >= 0 {
			names := make([]string, 0, len(path)-k+1)
			for _, i := range path[k:] {
				names = append(names, nodes[i].Name)
			}
			names = append(names, nodes[cur].Name)
			return fmt.Errorf("dependency cycle: %s", strings.Join(names, " needs "))
		}
		path = append(path, cur)
	}
}

// FunctionCall finds the calls of functions of rl in code (see Code):
// rl.<name>(.
var FunctionCall = regexp.MustCompile(`\brl\.([A-Za-z_][A-Za-z0-9_$]*)\s*\(`)

// Calls returns the names of the functions of rl that the SQL text s calls
// (rl.<name>( outside comments and string literals, and inside
// dollar-quoted bodies), each once, in order of appearance. A call made by
// dynamic SQL, or written without the schema, is not seen.
func Calls(s string) []string {
	var names []string
	add := func(code string) {
		for _, m := range FunctionCall.FindAllStringSubmatch(code, -1) {
			if !slices.Contains(names, m[1]) {
				names = append(names, m[1])
			}
		}
	}
	add(Code(s))
	for i := 0; i < len(s); {
		j, ok := skip(s, i)
		if !ok {
			i++
			continue
		}
		if s[i] == '$' {
			tag := dollarQuote.FindString(s[i:])
			add(Code(s[i+len(tag) : max(i+len(tag), j-len(tag))]))
		}
		i = j
	}
	return names
}
