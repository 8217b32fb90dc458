package sqlsrc

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The extension rl (sql/extension): its comment, in the control file and
// for pg_tle.
const extensionComment = "rate limiting in schema rl: a state table and PL/pgSQL decision functions (github.com/rlcore/rl)"

// PrologueFile is the SQL every extension script runs first, after the
// psql guard: the check that refuses a superuser unless rl.allow_superuser
// is on. InstallScript inserts it into the install script (and so
// pg_tle.sql); make (sql/extension/history.mk) and the Go package
// sql/extension insert the same file into the scripts they build from the
// migrations, so the check is written once, there. The migrations do not
// run it (rl-migrate checks the role itself).
const PrologueFile = "sql/extension/prologue.sql"

// PrologueAction is the placeholder of PrologueFile replaced by what the
// script does, for the check's messages: "install the extension rl" or
// "update the extension rl to version N" (make substitutes it with sed).
const PrologueAction = "@ACTION@"

// Prologue returns PrologueFile, under root, for a script that does action.
func Prologue(root, action string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, PrologueFile))
	if err != nil {
		return "", err
	}
	return prologueFor(string(b), action)
}

// prologueFor is the text of PrologueFile for a script that does action.
func prologueFor(text, action string) (string, error) {
	if strings.Count(text, PrologueAction) != 1 {
		return "", fmt.Errorf("%s: want %s exactly once (what the script does, for the messages)", PrologueFile, PrologueAction)
	}
	return strings.Replace(text, PrologueAction, action, 1), nil
}

// InstallScript returns the extension's install script of version v, the
// current schema: the objects of the source in src (the files of sql/src,
// as LoadFS reads them), after the psql guard and prologue, the text of
// PrologueFile with its placeholder, then the tables marked for pg_dump.
// It is built, never committed: by make (sql/extension/history.mk runs
// go run ./sql/internal/sqlgen -install) and by the Go package
// sql/extension from its embedded copy of sql/src, whose tests compare the
// two.
func InstallScript(src fs.FS, prologue string, v int) (string, error) {
	tree, err := LoadFS(src, nil)
	if err != nil {
		return "", err
	}
	return installScript(tree, prologue, v)
}

func installScript(tree *Tree, prologue string, v int) (string, error) {
	install, err := tree.Install()
	if err != nil {
		return "", err
	}
	p, err := prologueFor(prologue, installAction)
	if err != nil {
		return "", err
	}
	return scriptWith(p, fmt.Sprintf("The extension rl at version %d, installed whole (CREATE EXTENSION rl VERSION '%d'):\n-- the objects of sql/src.", v, v),
		install, tree.Tables()), nil
}

// installAction is what an install script does, for the prologue's
// messages.
const installAction = "install the extension rl"

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
