package sqlsrc

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// parenthesized returns the text inside the parentheses opening at s[open]
// and the index just after the closing one, skipping quoted text.
func parenthesized(s string, open int) (string, int, error) {
	if open < 0 || open >= len(s) || s[open] != '(' {
		return "", 0, errors.New("no parameter list")
	}
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '\'', '"':
			q := s[i]
			for i++; i < len(s) && s[i] != q; i++ {
			}
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return s[open+1 : i], i + 1, nil
			}
		}
	}
	return "", 0, errors.New("unbalanced parentheses")
}

// splitTop splits s at the commas outside parentheses and quotes.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\'', '"':
			q := s[i]
			for i++; i < len(s) && s[i] != q; i++ {
			}
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

var (
	reDefault = regexp.MustCompile(`(?is)\s(DEFAULT\s|=).*$`)
	// typeStarts are the first words of the types written in more than one
	// word; a parameter starting with one of them has no name.
	typeStarts = []string{"double", "character", "char", "bit", "timestamp", "time", "national"}
	// typeAliases maps the other spellings of a type to the one
	// pg_get_function_identity_arguments prints.
	typeAliases = map[string]string{
		"int": "integer", "int4": "integer", "int8": "bigint", "int2": "smallint", "bool": "boolean",
		"float8": "double precision", "float4": "real", "varchar": "character varying", "timestamptz": "timestamp with time zone",
	}
)

// paramTypes returns the types that identify a function with these
// parameters (IN, INOUT and VARIADIC ones; OUT parameters do not), each in
// lower case with its aliases resolved: what DROP FUNCTION needs.
func paramTypes(params string) ([]string, error) {
	if strings.TrimSpace(params) == "" {
		return nil, nil
	}
	var out []string
	for _, p := range splitTop(params) {
		p = strings.TrimSpace(reDefault.ReplaceAllString(" "+strings.TrimSpace(p), ""))
		words := strings.Fields(p)
		if len(words) == 0 {
			return nil, fmt.Errorf("empty parameter in (%s)", params)
		}
		mode := strings.ToUpper(words[0])
		if slices.Contains([]string{"IN", "OUT", "INOUT", "VARIADIC"}, mode) {
			words = words[1:]
		} else {
			mode = "IN"
		}
		if len(words) == 0 {
			return nil, fmt.Errorf("parameter %q has no type", p)
		}
		if len(words) > 1 && !strings.Contains(words[0], "(") && !slices.Contains(typeStarts, strings.ToLower(words[0])) {
			words = words[1:] // its name
		}
		if mode == "OUT" {
			continue
		}
		typ := strings.ToLower(strings.Join(words, " "))
		base, arr := typ, ""
		if i := strings.Index(typ, "["); i >= 0 {
			base, arr = strings.TrimSpace(typ[:i]), strings.ReplaceAll(typ[i:], " ", "")
		}
		if a, ok := typeAliases[base]; ok {
			base = a
		}
		out = append(out, base+arr)
	}
	return out, nil
}

// A grantAtom is one privilege set on one object for one grantee.
type grantAtom struct {
	Verb     string // GRANT or REVOKE
	Privs    string // EXECUTE; SELECT, UPDATE; ...
	Kind     string // FUNCTION, TABLE, SCHEMA, ALL FUNCTIONS IN SCHEMA, ...
	Object   string // for a function, its Key
	Grantee  string
	WithOpts string // " WITH GRANT OPTION" or ""
}

func (a grantAtom) String() string {
	to := " TO "
	if a.Verb == "REVOKE" {
		to = " FROM "
	}
	return a.Verb + " " + a.Privs + " ON " + a.Kind + " " + a.Object + to + a.Grantee + a.WithOpts + ";"
}

// inverse is the statement undoing a.
func (a grantAtom) inverse() grantAtom {
	b := a
	if a.Verb == "GRANT" {
		b.Verb, b.WithOpts = "REVOKE", ""
	} else {
		b.Verb = "GRANT"
	}
	return b
}

var (
	reGrantStmt = regexp.MustCompile(`(?is)^(GRANT|REVOKE)\s+(.+?)\s+ON\s+(.+?)\s+(TO|FROM)\s+(.+?)(\s+WITH\s+GRANT\s+OPTION)?\s*;`)
	reGrantKind = regexp.MustCompile(`(?is)^(ALL\s+(?:FUNCTIONS|TABLES|SEQUENCES|PROCEDURES|ROUTINES)\s+IN\s+SCHEMA|FUNCTION|PROCEDURE|ROUTINE|TABLE|SCHEMA|TYPE|DOMAIN|SEQUENCE)\s+(.+)$`)
)

// parseGrant returns the atoms of a GRANT or REVOKE of privileges on
// objects; nil for a role granted to a role (no ON).
func parseGrant(stmt string) ([]grantAtom, error) {
	m := reGrantStmt.FindStringSubmatch(stmt)
	if m == nil {
		return nil, nil
	}
	verb := strings.ToUpper(m[1])
	privs := strings.ToUpper(reSpaces.ReplaceAllString(m[2], " "))
	kind, objects := "TABLE", strings.TrimSpace(m[3])
	if k := reGrantKind.FindStringSubmatch(objects); k != nil {
		kind, objects = strings.ToUpper(reSpaces.ReplaceAllString(k[1], " ")), k[2]
	}
	with := ""
	if m[6] != "" {
		with = " WITH GRANT OPTION"
	}
	var atoms []grantAtom
	for _, obj := range splitTop(objects) {
		obj = strings.TrimSpace(obj)
		if kind == "FUNCTION" || kind == "PROCEDURE" || kind == "ROUTINE" {
			i := strings.IndexByte(obj, '(')
			params, _, err := parenthesized(obj, i)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", verb, obj, err)
			}
			types, err := paramTypes(params)
			if err != nil {
				return nil, err
			}
			obj = strings.ToLower(strings.TrimSpace(obj[:i])) + "(" + strings.Join(types, ",") + ")"
		} else {
			obj = reSpaces.ReplaceAllString(obj, " ")
		}
		for _, g := range splitTop(m[5]) {
			atoms = append(atoms, grantAtom{verb, privs, kind, obj, strings.TrimSpace(g), with})
		}
	}
	return atoms, nil
}
