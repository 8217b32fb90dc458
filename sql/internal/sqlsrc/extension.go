package sqlsrc

import (
	"fmt"
	"strings"
)

// The extension rl (sql/extension): its comment, in the control file and
// for pg_tle.
const extensionComment = "rate limiting in schema rl: a state table and PL/pgSQL decision functions (github.com/rlcore/rl)"

// Prologue is the SQL every extension script the generator writes runs
// first, after the psql guard: install and update scripts and pg_tle.sql
// (the migrations do not run it). It is where a check of the role running
// CREATE EXTENSION or ALTER EXTENSION belongs. Empty: none yet.
var Prologue = ""

const configDumpTitle = "The rows pg_dump keeps (an extension's tables are dumped without them unless marked)"

// control is the control file (sql/README.md, "The extension", says why
// each setting).
func control(v int) string {
	return Header("#") + fmt.Sprintf(`# The extension rl: the schema rl of sql/migrations at version %d (sql/README.md, "The extension").
comment = '%s'
default_version = '%d'
relocatable = false
schema = pg_catalog
superuser = false
requires = 'plpgsql'
`, v, extensionComment, v)
}

// extensionScript is an install or update script: the guard against
// psql, the prologue, body, then the marking of tables for pg_dump.
func extensionScript(what, body string, tables []string) string {
	return scriptWith(Prologue, what, body, tables)
}

func scriptWith(prologue, what, body string, tables []string) string {
	var b strings.Builder
	b.WriteString(Header("--"))
	fmt.Fprintf(&b, `--
-- %s
--
-- Only the roles rl_app and rl_admin (created if missing) are not members
-- of the extension: they belong to the cluster, and DROP EXTENSION rl leaves
-- them. sql/README.md ("The extension") documents it.

\echo Use "CREATE EXTENSION rl" to load this file. \quit
`, what)
	if prologue != "" {
		b.WriteString("\n" + strings.TrimRight(prologue, "\n") + "\n")
	}
	b.WriteString("\n" + strings.TrimRight(body, "\n") + "\n")
	if len(tables) > 0 {
		fmt.Fprintf(&b, "\n-- %s\n-- %s\n\n", configDumpTitle, strings.Repeat("=", len(configDumpTitle)))
		for _, t := range tables {
			fmt.Fprintf(&b, "SELECT pg_catalog.pg_extension_config_dump('%s', '');\n", t)
		}
	}
	return b.String()
}
