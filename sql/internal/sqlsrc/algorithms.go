package sqlsrc

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/rlcore/rl/core"
)

// AlgorithmsFile is the file of sql/src the generator writes from
// core.Algorithms(): the algorithm table in SQL.
const AlgorithmsFile = "functions/algorithms.sql"

// generatedSource returns the files of sql/src the generator writes.
func generatedSource() map[string]string {
	return map[string]string{AlgorithmsFile: algorithmsSQL()}
}

// numbers lists the numbers of the algorithms for which keep is true.
func numbers(keep func(core.Algorithm) bool) string {
	var out []string
	for _, a := range core.Algorithms() {
		if keep(a) {
			out = append(out, fmt.Sprint(int(a)))
		}
	}
	return strings.Join(out, ", ")
}

// list joins items as prose: "a, b and c" (last is "and" or "or").
func list(items []string, last string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + last + " " + items[len(items)-1]
}

// algorithmsSQL is the algorithm table of core in SQL: names, numbers and
// the properties the port tests, as IMMUTABLE SQL functions with constant
// bodies, which the planner inlines.
func algorithmsSQL() string {
	var names, ids, numbered, rated []string
	for _, a := range core.Algorithms() {
		for _, n := range a.Names() {
			names = append(names, fmt.Sprintf("WHEN '%s' THEN %d", n, a))
		}
		ids = append(ids, fmt.Sprintf("WHEN %d THEN '%s'", a, a))
		numbered = append(numbered, fmt.Sprintf("%d %s", a, a))
		if !a.Windowed() {
			rated = append(rated, a.String())
		}
	}
	all := func(core.Algorithm) bool { return true }
	var plain []string
	for _, a := range core.Algorithms() {
		plain = append(plain, a.String())
	}
	return Header("--") + fmt.Sprintf(`--
-- The algorithm table of core (core.Algorithms()): their numbers, names and
-- properties, for the port. Nothing else in sql/src writes an algorithm's
-- number as a range or lists their names.

-- rl._alg returns the number of an algorithm name as core.ParseAlgorithm
-- accepts it, or 0 (which the decision reports as ErrAlgorithm in its turn).
CREATE FUNCTION rl._alg(name text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE name %s ELSE 0 END;

-- rl.algorithm_name is core.Algorithm.String.
CREATE FUNCTION rl.algorithm_name(algorithm integer) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE algorithm %s ELSE 'unknown' END;

-- rl._alg_valid is core.Algorithm.Valid.
CREATE FUNCTION rl._alg_valid(alg integer) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN alg IN (%s);

-- rl._windowed is core.Algorithm.Windowed: a count per window, rate 0.
CREATE FUNCTION rl._windowed(alg integer) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN alg IN (%s);

-- rl._units_bounded is core.Algorithm.UnitsBounded: limit × window (µs) at
-- most core.MaxUnits.
CREATE FUNCTION rl._units_bounded(alg integer) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN alg IN (%s);

-- rl._algorithm_list names every algorithm, for messages: numbered
-- ('1 fixed_window, ... or 6 gcra'), plain ('fixed_window, ... or gcra'), or
-- the ones with a rate ('token_bucket, ... and gcra').
CREATE FUNCTION rl._algorithm_list(style text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE style WHEN 'numbered' THEN '%s' WHEN 'rated' THEN '%s' ELSE '%s' END;
`,
		strings.Join(names, " "), strings.Join(ids, " "),
		numbers(all), numbers(core.Algorithm.Windowed), numbers(core.Algorithm.UnitsBounded),
		list(numbered, "or"), list(rated, "and"), list(plain, "or")) + dispatchSQL()
}

// nativeHeader is the algorithm table of core in C, for the native step
// (sql/native/rl_native.c), and the dispatch over the algorithms' C files.
func nativeHeader() string {
	var b strings.Builder
	b.WriteString(Header("/*")[:len(Header("/*"))-1] + " */\n")
	b.WriteString(`/*
 * The algorithm table of core (core.Algorithms()): numbers and properties,
 * which rl_native.c tests, never a number range; then the algorithms' files
 * and the dispatch over them.
 */
#ifndef RL_ALGORITHMS_H
#define RL_ALGORITHMS_H

#include "rl_native.h"

`)
	for _, a := range core.Algorithms() {
		fmt.Fprintf(&b, "#define RL_%s %d\n", strings.ToUpper(a.String()), a)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "/* core.Algorithm.Valid */\nstatic inline bool\nrl_alg_valid(int64 a)\n{\n\treturn %s;\n}\n\n", cSet(func(core.Algorithm) bool { return true }))
	fmt.Fprintf(&b, "/* core.Algorithm.Windowed: a count per window, rate 0 */\nstatic inline bool\nrl_alg_windowed(int64 a)\n{\n\treturn %s;\n}\n\n", cSet(core.Algorithm.Windowed))
	fmt.Fprintf(&b, "/* core.Algorithm.UnitsBounded: limit × window at most MaxUnits */\nstatic inline bool\nrl_alg_units_bounded(int64 a)\n{\n\treturn %s;\n}\n\n", cSet(core.Algorithm.UnitsBounded))
	b.WriteString(dispatchC())
	b.WriteString("\n#endif\n")
	return b.String()
}

func cSet(keep func(core.Algorithm) bool) string {
	var terms []string
	for _, a := range core.Algorithms() {
		if keep(a) {
			terms = append(terms, fmt.Sprintf("a == RL_%s", strings.ToUpper(a.String())))
		}
	}
	if len(terms) == 0 {
		return "false"
	}
	return strings.Join(terms, " || ")
}

// algorithmRange finds a comparison of an algorithm number with a number
// by order (alg <= 3, s->alg > 3, p_alg NOT BETWEEN 1 AND 6): the
// properties of the table say what such a range means.
var algorithmRange = regexp.MustCompile(`(?i)\b[a-z_>.-]*alg[a-z_]*\s*(<=|>=|<|>|(NOT\s+)?BETWEEN)\s*[0-9]`)
