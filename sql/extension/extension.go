package extension

import (
	"embed"

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

// FS holds the files of the extension: rl.control, the install and update
// scripts (rl--*.sql) and pg_tle.sql. From a program, for example, register
// the extension with pg_tle in a database of a managed service:
//
//	b, err := fs.ReadFile(extension.FS, "pg_tle.sql")
//	...
//	_, err = conn.Exec(ctx, string(b)) // as a member of pgtle_admin
//
//go:embed rl.control rl--*.sql pg_tle.sql
var FS embed.FS
