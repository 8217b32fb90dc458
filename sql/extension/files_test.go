package extension_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rlcore/rl/sql/extension"
	"github.com/rlcore/rl/sql/migrations"
)

// The files of the extension are generated from the migrations by this
// test: TestFiles fails while a committed file differs from what it
// generates, and writes them all (removing stale scripts) with
// RL_WRITE_EXTENSION=1.
const (
	writeEnv     = "RL_WRITE_EXTENSION"
	writeCommand = writeEnv + "=1 go test -run TestFiles ./sql/extension"
)

// comment is the extension's comment (\dx), in the control file and for
// pg_tle.
const comment = "rate limiting in schema rl: a state table and PL/pgSQL decision functions (github.com/rlcore/rl)"

// configTables are the tables of rl whose rows pg_dump must keep, each with
// the migration that creates it. An extension's tables are dumped without
// their rows unless its scripts mark them (pg_extension_config_dump): the
// rows of rl.tenants are what holds each tenant to its keys, and rl.state
// is dumped with the migrations too. TestExtensionCatalog
// (sql/migrations/extension_test.go) fails when a table of rl is missing
// here.
var configTables = []struct {
	name  string
	since int
}{
	{"rl.state", 1},
	{"rl.tenants", 7},
}

// pgTLEQuote is the dollar quote around each script in pg_tle.sql.
const pgTLEQuote = "$_pgtle_$"

// TestFiles generates the files of the extension from migrations.FS and
// compares them with the committed ones (or, with RL_WRITE_EXTENSION=1,
// writes them). It needs no database: the tests that install the extension
// are in sql/migrations/extension_test.go.
func TestFiles(t *testing.T) {
	files, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	committed, err := filepath.Glob("rl--*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(writeEnv) == "1" {
		for _, name := range committed {
			if _, ok := files[name]; !ok {
				if err := os.Remove(name); err != nil {
					t.Fatal(err)
				}
				t.Logf("removed %s", name)
			}
		}
		for _, name := range sortedNames(files) {
			if err := os.WriteFile(name, []byte(files[name]), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote sql/extension/%s (%d lines)", name, strings.Count(files[name], "\n"))
		}
		return
	}
	for _, name := range committed {
		if _, ok := files[name]; !ok {
			t.Errorf("sql/extension/%s is no script of the extension anymore: run %s", name, writeCommand)
		}
	}
	for _, name := range sortedNames(files) {
		b, err := os.ReadFile(name)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		if string(b) != files[name] {
			t.Errorf("sql/extension/%s is stale: run %s\n%s", name, writeCommand, firstDifference(string(b), files[name]))
		}
	}
	// The embedded copy is the committed one (it is compiled in from this
	// directory); a new file must match FS's patterns to be embedded.
	for _, name := range sortedNames(files) {
		if _, err := fs.Stat(extension.FS, name); err != nil {
			t.Errorf("extension.FS lacks %s: add it to the go:embed patterns of extension.go", name)
		}
	}
}

// TestCheckScript: the generator refuses text an extension script cannot
// run as the migrations do.
func TestCheckScript(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"plain", "CREATE TABLE rl.t ();\nDO $do$ BEGIN NULL; END $do$;\n", ""},
		{"commit", "CREATE TABLE rl.t ();\nCOMMIT;\n", "transaction control"},
		{"begin", "begin;\nCREATE TABLE rl.t ();\n", "transaction control"},
		{"extschema", "CREATE TABLE @extschema@.t ();\n", "@extschema"},
		{"extowner", "ALTER TABLE rl.t OWNER TO @extowner@;\n", "@extowner@"},
		{"psql", "\\set ON_ERROR_STOP\n", "psql meta-command"},
	} {
		err := checkScript("0099_x.up.sql", c.text)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

// migration is one up migration of migrations.FS.
type migration struct {
	version int
	file    string // 0001_state.up.sql
	text    string
}

// readMigrations returns the up migrations 1 to migrations.Latest, in
// order, each checked by checkScript.
func readMigrations() ([]migration, error) {
	names, err := fs.Glob(migrations.FS, "*.up.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, name := range names {
		v, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("migration %s: no version number", name)
		}
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return nil, err
		}
		if err := checkScript(name, string(b)); err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, file: name, text: string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: want version %d (versions run 1, 2, ... without gaps)", m.file, i+1)
		}
	}
	if len(ms) != migrations.Latest {
		return nil, fmt.Errorf("%d migrations, but migrations.Latest is %d", len(ms), migrations.Latest)
	}
	return ms, nil
}

var (
	// transactionControl matches a statement that starts or ends a
	// transaction, alone on its line: extension scripts run inside
	// CREATE EXTENSION's transaction and refuse them. (END, a synonym of
	// COMMIT, is left out: PL/pgSQL blocks end with it. A procedure's
	// COMMIT inside a body would match; none exists, and the check would
	// then have to skip dollar-quoted bodies.)
	transactionControl = regexp.MustCompile(`(?im)^\s*(BEGIN|COMMIT|ROLLBACK|START\s+TRANSACTION|ABORT)(\s+(WORK|TRANSACTION))?\s*;\s*$`)
	// psqlCommand matches a psql meta-command: the extension machinery
	// drops \echo lines and runs the rest as SQL.
	psqlCommand = regexp.MustCompile(`(?m)^\s*\\`)
)

// checkScript fails on text that an extension script cannot run as the
// migrations run it: transaction control, psql meta-commands, and the
// placeholders the extension machinery replaces (@extschema@,
// @extschema:name@, @extowner@, MODULE_PATHNAME is replaced only when the
// control file sets module_pathname, which rl's does not). What it cannot
// see, the tests that install the extension do (the catalog must equal the
// migrations').
//
// Two things in the migrations run unchanged on purpose:
//   - SET LOCAL search_path = pg_catalog, pg_temp: CREATE EXTENSION runs
//     the script at a GUC nesting level of its own and restores
//     search_path after it (TestExtensionCatalog checks the session's
//     setting survives), so the line keeps its meaning: the same search
//     path as under rl-migrate, whatever the extension machinery set
//     (pg_catalog, pg_temp for the PGXS install, whose control file says
//     schema = pg_catalog; the current schema first under pg_tle).
//   - CREATE ROLE rl_app / rl_admin, in DO blocks that create each only if
//     missing: roles belong to the cluster and never become members of an
//     extension, so DROP EXTENSION rl leaves them, as rl-migrate down
//     leaves roles still in use.
func checkScript(file, text string) error {
	if m := transactionControl.FindString(text); m != "" {
		return fmt.Errorf("%s: transaction control (%q) cannot run in an extension script", file, strings.TrimSpace(m))
	}
	if psqlCommand.MatchString(text) {
		return fmt.Errorf("%s: a psql meta-command (a line starting with a backslash) cannot run in an extension script", file)
	}
	for _, p := range []string{"@extschema", "@extowner@"} {
		if strings.Contains(text, p) {
			return fmt.Errorf("%s: contains %s, which CREATE EXTENSION would replace", file, p)
		}
	}
	return nil
}

// generate returns the files of the extension by name: the control file,
// the install scripts for extension.Oldest and extension.Version, the update
// script for each version after Oldest, and pg_tle.sql.
func generate() (map[string]string, error) {
	if extension.Oldest < 1 || extension.Oldest > extension.Version {
		return nil, fmt.Errorf("extension.Oldest (%d) must be a migration version, at most %d", extension.Oldest, extension.Version)
	}
	ms, err := readMigrations()
	if err != nil {
		return nil, err
	}
	files := map[string]string{"rl.control": control()}
	for _, v := range []int{extension.Oldest, extension.Version} {
		files[installName(v)] = installScript(ms[:v])
	}
	for v := extension.Oldest + 1; v <= extension.Version; v++ {
		files[updateName(v)] = updateScript(ms[v-1])
	}
	tle, err := pgTLE(files[installName(extension.Version)])
	if err != nil {
		return nil, err
	}
	files["pg_tle.sql"] = tle
	return files, nil
}

func installName(v int) string { return fmt.Sprintf("%s--%d.sql", extension.Name, v) }
func updateName(v int) string  { return fmt.Sprintf("%s--%d--%d.sql", extension.Name, v-1, v) }

// control is the control file.
//
//   - superuser = false: CREATE EXTENSION and ALTER EXTENSION UPDATE run
//     the scripts as the calling role, with its own rights, as rl-migrate
//     runs the migrations; the caller owns every object, so the owner of
//     the schema rl and of its definer-rights functions is whoever the DBA
//     chooses, never a superuser by necessity. (The default, superuser =
//     true, would let only superusers install it, owning everything;
//     trusted = true would let ordinary roles install it, but run the
//     scripts as the bootstrap superuser, who would own every object.)
//   - schema = pg_catalog, relocatable = false: the objects live in the
//     schema rl, which the script creates, so that the schema is a member
//     of the extension and DROP EXTENSION rl removes it. An extension cannot
//     own the schema it is installed in, so its schema is pg_catalog, as
//     plpgsql's is; CREATE EXTENSION checks no privilege on it.
//   - requires = 'plpgsql': the functions' language (installed in every
//     database by default).
func control() string {
	return fmt.Sprintf(`# Code generated by %q; DO NOT EDIT.
# The extension rl: the schema rl of sql/migrations at version %d (sql/README.md, "The extension").
comment = '%s'
default_version = '%d'
relocatable = false
schema = pg_catalog
superuser = false
requires = 'plpgsql'
`, writeCommand, extension.Version, comment, extension.Version)
}

// scriptHead is the head of every script, up to its first statement.
func scriptHead(what string) string {
	return fmt.Sprintf(`-- Code generated by %q; DO NOT EDIT.
--
-- %s
--
-- Generated from the migration files of sql/migrations, each unchanged,
-- after a check that refuses to run as a superuser unless
-- rl.allow_superuser is on (the owner of rl must be an ordinary role);
-- then the tables pg_dump keeps the rows of are marked. Only the roles
-- rl_app and rl_admin (created if missing, as the migrations do) are not
-- members of the extension: they belong to the cluster, and DROP EXTENSION
-- rl leaves them. No version is recorded in rl_schema_migrations: the
-- extension's version is in pg_extension. sql/README.md ("The extension")
-- documents it.

\echo Use "CREATE EXTENSION rl" to load this file. \quit
`, writeCommand, what)
}

// allowSuperuserSetting is the setting that lets a superuser install or
// update the extension anyway (SET rl.allow_superuser = on), with a
// WARNING; without it ownerCheck refuses, as rl-migrate refuses without
// -allow-superuser.
const allowSuperuserSetting = "rl.allow_superuser"

// ownerCheck is the first statement of every script: it refuses to run the
// script as a superuser unless rl.allow_superuser is on, and then warns.
// Whoever runs CREATE EXTENSION rl (superuser = false) or ALTER EXTENSION
// rl UPDATE owns what the script creates, and every SECURITY DEFINER
// function of rl runs as its owner: the owner must be an ordinary role
// (sql/README.md, "Installing without a superuser"). A refusal, not a
// WARNING alone: CREATE EXTENSION is one transaction, so the refusal leaves
// nothing behind, while a WARNING scrolls past unread in a deploy script
// and leaves superuser-owned definer functions for good. It creates no
// object, so the catalog of an installation is the same with or without it.
//
// action is what the script does, for the messages: "install the extension
// rl" or "update the extension rl to version 19".
func ownerCheck(action string) string {
	const title = "Refuse a superuser owner unless rl.allow_superuser is on (sql/README.md, \"Who may install it\")"
	return fmt.Sprintf(`
-- %s
-- %s

DO $rl_owner_check$
DECLARE
    allow text := pg_catalog.lower(pg_catalog.btrim(coalesce(pg_catalog.current_setting('%[3]s', true), '')));
    alternative CONSTANT text := '%[4]s';
BEGIN
    IF NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER), false) THEN
        RETURN;
    END IF;
    IF allow IN ('on', 'true', 'yes', '1') THEN
        RAISE WARNING 'the superuser "%%" is about to %[5]s: every SECURITY DEFINER function of rl will run with superuser rights for any caller', CURRENT_USER
            USING DETAIL = '%[3]s is on. The owner of schema rl must be an ordinary role, never a superuser.',
                  HINT = alternative;
    ELSIF allow IN ('', 'off', 'false', 'no', '0') THEN
        RAISE EXCEPTION 'refusing to %[5]s as the superuser "%%": every SECURITY DEFINER function of rl would run with superuser rights for any caller', CURRENT_USER
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The owner of schema rl must be an ordinary role, never a superuser: whoever runs the script owns what it creates. Nothing was changed.',
                  HINT = alternative || ' To do it as a superuser anyway, SET %[3]s = on first.';
    ELSE
        RAISE EXCEPTION '%[3]s is "%%": want on or off', pg_catalog.current_setting('%[3]s', true)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$rl_owner_check$;
`, title, strings.Repeat("=", len(title)), allowSuperuserSetting, alternativeTo(action), action)
}

// alternativeTo is what to do instead of action as a superuser, for
// ownerCheck's hint.
func alternativeTo(action string) string {
	if strings.HasPrefix(action, "install") {
		return `Create an ordinary owner role (no SUPERUSER) that owns the database and install it as that role: ` +
			`CREATE ROLE rl_owner LOGIN; ALTER DATABASE ... OWNER TO rl_owner; then, connected as rl_owner, CREATE EXTENSION rl ` +
			`(sql/README.md, "Installing without a superuser").`
	}
	return `Connect as the ordinary role that owns schema rl and run ALTER EXTENSION rl UPDATE as it ` +
		`(sql/README.md, "Installing without a superuser").`
}

// section is a migration file under a heading that names it.
func section(m migration) string {
	title := "sql/migrations/" + m.file
	return fmt.Sprintf("\n-- %s\n-- %s\n\n%s", title, strings.Repeat("=", len(title)), ensureNewline(m.text))
}

// configDump marks the tables that migrations from..to create.
func configDump(from, to int) string {
	var b strings.Builder
	for _, ct := range configTables {
		if ct.since >= from && ct.since <= to {
			fmt.Fprintf(&b, "SELECT pg_catalog.pg_extension_config_dump('%s', '');\n", ct.name)
		}
	}
	if b.Len() == 0 {
		return ""
	}
	const title = "The rows pg_dump keeps (an extension's tables are dumped without them unless marked)"
	return fmt.Sprintf("\n-- %s\n-- %s\n\n%s", title, strings.Repeat("=", len(title)), b.String())
}

// installScript is rl--N.sql: migrations 1 to N, whole.
func installScript(ms []migration) string {
	v := len(ms)
	var b strings.Builder
	b.WriteString(scriptHead(fmt.Sprintf("The extension rl at version %d, installed whole (CREATE EXTENSION rl VERSION '%d'):\n-- the migrations 0001 to %04d, in order.", v, v, v)))
	b.WriteString(ownerCheck("install the extension rl"))
	for _, m := range ms {
		b.WriteString(section(m))
	}
	b.WriteString(configDump(1, v))
	return b.String()
}

// updateScript is rl--(N-1)--N.sql: migration N.
func updateScript(m migration) string {
	v := m.version
	return scriptHead(fmt.Sprintf("The update of the extension rl from version %d to %d (ALTER EXTENSION rl UPDATE):\n-- the migration %04d.", v-1, v, v)) +
		ownerCheck(fmt.Sprintf("update the extension rl to version %d", v)) + section(m) + configDump(v, v)
}

// pgTLE is pg_tle.sql: the install script of the latest version,
// registered with pg_tle.
func pgTLE(install string) (string, error) {
	if strings.Contains(install, pgTLEQuote) {
		return "", fmt.Errorf("the install script contains %s, the dollar quote of pg_tle.sql: choose another", pgTLEQuote)
	}
	// The \echo line guards against psql; pg_tle runs the text as an
	// extension script, which would drop it, but it has no purpose here.
	body := strings.Replace(install, "\\echo Use \"CREATE EXTENSION rl\" to load this file. \\quit\n", "", 1)
	return fmt.Sprintf(`-- Code generated by %q; DO NOT EDIT.
--
-- Registers the extension rl, version %d, with pg_tle (Trusted Language
-- Extensions for PostgreSQL) in the current database: for managed services,
-- where make install cannot put files into the server's share directory.
-- Run it once per database, as a member of pgtle_admin, after
-- CREATE EXTENSION pg_tle; then, as the role that is to own the schema rl:
--
--   CREATE EXTENSION rl;
--
-- pg_tle runs the script as that role (a pg_tle extension is never
-- superuser or trusted), as the file-based extension does. sql/README.md
-- ("The extension", "On managed services: pg_tle") says how to update it.
-- Not tested by rl's CI, which has no pg_tle (tried by hand with pg_tle
-- 1.5.3: sql/README.md): the script is the one the tests install from
-- rl--%d.sql.

SELECT pgtle.install_extension(
    '%s',
    '%d',
    '%s',
%s
%s%s,
    ARRAY['plpgsql']
);
`, writeCommand, extension.Version, extension.Version, extension.Name, extension.Version, comment, pgTLEQuote, body, pgTLEQuote), nil
}

func ensureNewline(s string) string {
	if strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}

func sortedNames(files map[string]string) []string {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// firstDifference describes the first line where the committed text and
// the generated one differ.
func firstDifference(committed, generated string) string {
	cl, gl := strings.Split(committed, "\n"), strings.Split(generated, "\n")
	for i := 0; i < max(len(cl), len(gl)); i++ {
		line := func(ls []string) string {
			if i < len(ls) {
				return fmt.Sprintf("%q", ls[i])
			}
			return "(end of file)"
		}
		if i >= len(cl) || i >= len(gl) || cl[i] != gl[i] {
			return fmt.Sprintf("first difference at line %d:\n  committed: %s\n  generated: %s", i+1, line(cl), line(gl))
		}
	}
	return "no difference"
}
