// Package src embeds the SQL source of the schema rl (sql/README.md,
// "Editing the SQL"): the files the install script is made of, in FS, from
// which the Go package sql/extension builds the extension's install script
// (sql/internal/sqlsrc.InstallScript) for programs that have no checkout.
// The steps of the migrations (steps/) are left out: the migrations are
// committed.
package src

import "embed"

// FS holds the files of sql/src but steps/: *.sql and functions/*.sql.
//
//go:embed *.sql functions/*.sql
var FS embed.FS
