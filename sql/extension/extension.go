package extension

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing/fstest"

	"github.com/rlcore/rl/sql/migrations"
)

// Name is the extension's name: CREATE EXTENSION rl.
const Name = "rl"

// Version is the extension's default version, the version of the newest
// migration: the extension at version N holds what the migrations hold at
// version N. Extension versions are these numbers as strings ('12').
const Version = migrations.Latest

// Oldest is the oldest version the extension can be installed at
// (CREATE EXTENSION rl VERSION '11'); update scripts lead from it to
// Version, one migration each. It is the version before the first release
// of the extension (12), so that ALTER EXTENSION rl UPDATE is tested
// across a real migration from the start. Never raise it past a released
// version: its update scripts are how an installation of that version
// reaches the latest.
const Oldest = 11

// LastHandwritten is the last version whose migration was written by hand
// (sql/migrations 0001 to 0019). The install script of Oldest and the
// update scripts up to it are built from those migrations, never committed
// twice: by make (Makefile) on the database host, and into FS here. Later
// versions' scripts are generated from sql/src and committed.
const LastHandwritten = 19

// FS holds the files of the extension: rl.control, the install scripts
// (rl--Oldest.sql, built from the migrations; rl--Version.sql, the objects
// of sql/src), the update scripts (rl--M--N.sql) and pg_tle.sql, which
// registers the latest version with pg_tle. From a program, for example,
// register the extension with pg_tle in a database of a managed service:
//
//	b, err := fs.ReadFile(extension.FS, "pg_tle.sql")
//	...
//	_, err = conn.Exec(ctx, string(b)) // as a member of pgtle_admin
var FS fs.FS = mustFiles()

//go:embed rl.control rl--*.sql
var generated embed.FS

// prologueSQL is prologue.sql: the check that refuses a superuser unless
// rl.allow_superuser is on, with the placeholder prologueAction. Every
// script runs it first, after the psql guard: the generator writes it into
// the scripts it generates, make and Files into the history they build.
//
//go:embed prologue.sql
var prologueSQL string

// prologueAction is the placeholder of prologue.sql replaced by what the
// script does, for the check's messages.
const prologueAction = "@ACTION@"

// prologue is prologue.sql for a script that does action: "install the
// extension rl" or "update the extension rl to version N".
func prologue(action string) string {
	return strings.Replace(prologueSQL, prologueAction, action, 1)
}

func mustFiles() fs.FS {
	files, err := Files()
	if err != nil {
		panic(err) // the embedded files are checked by the tests
	}
	m := fstest.MapFS{}
	for name, text := range files {
		m[name] = &fstest.MapFile{Data: []byte(text), Mode: 0o444}
	}
	return m
}

// Files returns the files of FS by name.
func Files() (map[string]string, error) {
	out := map[string]string{}
	entries, err := fs.ReadDir(generated, ".")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := fs.ReadFile(generated, e.Name())
		if err != nil {
			return nil, err
		}
		out[e.Name()] = string(b)
	}
	var ups []string
	for v := 1; v <= LastHandwritten; v++ {
		m, err := fs.Glob(migrations.FS, fmt.Sprintf("%04d_*.up.sql", v))
		if err != nil || len(m) != 1 {
			return nil, fmt.Errorf("extension: want one migration %04d, found %v", v, m)
		}
		ups = append(ups, m[0])
	}
	install, err := historyScript(fmt.Sprintf("The extension rl at version %d, installed whole (CREATE EXTENSION rl VERSION '%d'):\n-- the migrations 0001 to %04d, in order.", Oldest, Oldest, Oldest), "install the extension rl", ups[:Oldest])
	if err != nil {
		return nil, err
	}
	out[fmt.Sprintf("rl--%d.sql", Oldest)] = install
	for v := Oldest + 1; v <= LastHandwritten; v++ {
		s, err := historyScript(fmt.Sprintf("The update of the extension rl from version %d to %d (ALTER EXTENSION rl UPDATE):\n-- the migration %04d.", v-1, v, v), fmt.Sprintf("update the extension rl to version %d", v), ups[v-1:v])
		if err != nil {
			return nil, err
		}
		out[fmt.Sprintf("rl--%d--%d.sql", v-1, v)] = s
	}
	latest, ok := out[fmt.Sprintf("rl--%d.sql", Version)]
	if !ok {
		return nil, fmt.Errorf("extension: no rl--%d.sql embedded", Version)
	}
	out["pg_tle.sql"] = PgTLE(latest)
	return out, nil
}

var createTable = regexp.MustCompile(`(?m)^CREATE TABLE (rl\.[a-z_]+)`)

// historyScript is an extension script built from migration files, as the
// Makefile builds it: a head, the prologue for action, the files whole,
// then the tables they create marked for pg_dump (an extension's tables
// are dumped without their rows unless marked).
func historyScript(what, action string, files []string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "-- Built from sql/migrations by make or by the Go package sql/extension; DO NOT EDIT.\n--\n-- %s\n-- First the check of sql/extension/prologue.sql (a superuser is refused\n-- unless rl.allow_superuser is on); the migration files are unchanged.\n\n\\echo Use \"CREATE EXTENSION rl\" to load this file. \\quit\n\n%s", what, prologue(action))
	var tables []string
	for _, f := range files {
		text, err := fs.ReadFile(migrations.FS, f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\n-- sql/migrations/%s\n\n%s", f, text)
		for _, m := range createTable.FindAllStringSubmatch(string(text), -1) {
			tables = append(tables, m[1])
		}
	}
	if len(tables) > 0 {
		b.WriteString("\n")
	}
	for _, t := range tables {
		fmt.Fprintf(&b, "SELECT pg_catalog.pg_extension_config_dump('%s', '');\n", t)
	}
	return b.String(), nil
}

// PgTLE is pg_tle.sql: install, the install script of the latest version,
// registered with pg_tle (make pg_tle.sql builds the same file).
func PgTLE(install string) string {
	body := strings.Replace(install, "\\echo Use \"CREATE EXTENSION rl\" to load this file. \\quit\n", "", 1)
	return fmt.Sprintf(`-- Built from rl--%d.sql by make pg_tle.sql or by the Go package sql/extension; DO NOT EDIT.
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
    'rl',
    '%d',
    'rate limiting in schema rl: a state table and PL/pgSQL decision functions (github.com/rlcore/rl)',
$_pgtle_$
%s$_pgtle_$,
    ARRAY['plpgsql']
);
`, Version, Version, Version, Version, body)
}
