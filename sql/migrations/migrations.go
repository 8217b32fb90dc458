// Package migrations holds the PostgreSQL schema of rl: the schema rl, the
// state table rl.state, the PL/pgSQL port of the decision core (rl.decide,
// rl.decide_all), the table functions (rl.rl_allow and friends), the trigger
// function rl.enforce_limit, the roles rl_app and rl_admin, and the table
// rl.tenants that holds each tenant role to its key prefixes.
// sql/README.md documents them.
//
// FS holds golang-migrate files ({version}_{title}.up.sql / .down.sql). Apply
// them with Up, with the rl-migrate command, or with any golang-migrate setup
// reading FS through the iofs source:
//
//	if err := migrations.Up(ctx, "postgres://app@db/app"); err != nil { ... }
//
// The applied version is kept in the table rl_schema_migrations (in the first
// schema of the connection's search_path, usually public), not in
// golang-migrate's default schema_migrations, so an application's own
// migrations can share the database. Add x-migrations-table to the URL to
// choose another table.
//
// Migrations run under a PostgreSQL advisory lock, so several instances
// starting at once apply them exactly once.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers the pgx5 scheme
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rlcore/rl/internal/util/redact"
)

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS

// Table is the default table in which the applied version is recorded.
const Table = "rl_schema_migrations"

// DefaultConnectTimeout bounds each connection attempt when the URL sets no
// connect_timeout and the context has no earlier deadline.
const DefaultConnectTimeout = 10 * time.Second

// ErrNoChange is returned by the Migrator's methods when the database is
// already at the requested version. The package function Up treats it as
// success.
var ErrNoChange = migrate.ErrNoChange

// DirtyError reports a database whose last migration failed: golang-migrate
// recorded version Version as dirty before running the migration to it. Each
// migration file runs in one transaction, so the failed one was rolled back:
// the schema is at Version-1 if an up migration failed, at Version+1 if a
// down migration failed. Force the right one after fixing the cause.
type DirtyError struct {
	Version int
}

func (e *DirtyError) Error() string {
	before := e.Version - 1
	if before == 0 {
		before = -1 // no version: "force 0" would record a version 0 that does not exist
	}
	return fmt.Sprintf("migrations: database is dirty at version %d: the migration to version %d failed and was rolled back. "+
		"Fix the cause (see the error of that run), then record the version the schema is really at: "+
		"\"rl-migrate force %d\" after a failed up, \"rl-migrate force %d\" after a failed down; then migrate again",
		e.Version, e.Version, before, e.Version+1)
}

// TriggerError reports triggers that still call rl.enforce_limit, which a
// migration down below version 4 would have to drop. Nothing was changed.
type TriggerError struct {
	Triggers []string // "schema.table: trigger"
}

func (e *TriggerError) Error() string {
	return fmt.Sprintf("migrations: refusing to migrate below version 4 (it drops rl.enforce_limit): %d trigger(s) still use it: %s; "+
		"drop them first (DROP TRIGGER name ON table); nothing was changed", len(e.Triggers), strings.Join(e.Triggers, ", "))
}

// UnrecordedError reports a database whose schema rl exists although no
// migration is recorded: the SQL files were applied by hand (or with
// another tool). Migrating up would fail on the first CREATE.
type UnrecordedError struct{}

func (e *UnrecordedError) Error() string {
	return "migrations: the schema rl already exists but no migration is recorded in " + Table + " (applied by hand, or with another tool?): " +
		"record the last migration it holds with \"rl-migrate force N\" (N: the number of the last file applied, see sql/README.md), " +
		"then run \"rl-migrate up\"; nothing was changed"
}

// ExtensionError reports a database where schema rl belongs to the
// extension rl (CREATE EXTENSION rl): one database uses either the
// migrations or the extension, never both.
type ExtensionError struct {
	Version string // the extension's installed version
}

func (e *ExtensionError) Error() string {
	return "migrations: schema rl here is the extension rl, version " + e.Version +
		": upgrade it with ALTER EXTENSION rl UPDATE, not with these migrations (sql/README.md, \"The extension\"); schema rl was not changed"
}

// SuperuserError reports that the role the migrations would run as is a
// superuser (Migrator.CheckOwner). Whoever runs the migrations owns schema
// rl and everything in it, and every SECURITY DEFINER function of rl runs
// with its owner's rights: the owner must be an ordinary role, never a
// superuser (sql/README.md, "Installing without a superuser").
type SuperuserError struct {
	Role string // the superuser, current_user of the connection
}

func (e *SuperuserError) Error() string {
	return fmt.Sprintf("migrations: refusing to migrate as the superuser %q: the role that runs the migrations owns schema rl, "+
		"and every SECURITY DEFINER function of rl would run with superuser rights for any caller. "+
		"Create an ordinary owner role (no SUPERUSER) that owns the database and migrate as it: "+
		"CREATE ROLE rl_owner LOGIN PASSWORD '...'; ALTER DATABASE app OWNER TO rl_owner; "+
		"then DATABASE_URL=postgres://rl_owner:...@host/app rl-migrate up "+
		"(sql/README.md, \"Installing without a superuser\"); nothing was changed", e.Role)
}

// CheckOwner returns *SuperuserError when the role the migrations run as
// (the connection's current_user, who owns what they create) is a
// superuser, and nil for an ordinary role. It changes nothing. rl-migrate
// calls it before up, down and goto, and refuses a superuser unless given
// -allow-superuser; Up and the Migrator's other methods do not call it, so
// a program that migrates at start should:
//
//	if err := m.CheckOwner(ctx); err != nil {
//		return err // a superuser: connect as the ordinary owner instead
//	}
func (m *Migrator) CheckOwner(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, m.url)
	if err != nil {
		return errors.New("migrations: " + scrub(err.Error(), m.secret))
	}
	defer conn.Close(ctx)
	var role string
	var super bool
	if err := conn.QueryRow(ctx, `SELECT current_user::text, r.rolsuper
		  FROM pg_catalog.pg_roles r WHERE r.rolname = current_user`).Scan(&role, &super); err != nil {
		return errors.New("migrations: " + scrub(err.Error(), m.secret))
	}
	if super {
		return &SuperuserError{Role: role}
	}
	return nil
}

// connURL is databaseURL as pgx takes it: golang-migrate's pgx5:// scheme
// and x- parameters removed.
func connURL(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return databaseURL
	}
	if u.Scheme == "pgx5" {
		u.Scheme = "postgres"
	}
	q := u.Query()
	for k := range q {
		if strings.HasPrefix(k, "x-") {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// checkDown refuses, before anything changes, a migration to below version
// 4 while triggers use rl.enforce_limit.
func (m *Migrator) checkDown(ctx context.Context, target int) error {
	if target >= 4 {
		return nil
	}
	conn, err := pgx.Connect(ctx, m.url)
	if err != nil {
		return errors.New("migrations: " + scrub(err.Error(), m.secret))
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT format('%s.%s: %s', n.nspname, c.relname, t.tgname)
		  FROM pg_trigger t
		  JOIN pg_proc p ON p.oid = t.tgfoid
		  JOIN pg_namespace pn ON pn.oid = p.pronamespace
		  JOIN pg_class c ON c.oid = t.tgrelid
		  JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE pn.nspname = 'rl' AND p.proname = 'enforce_limit' AND NOT t.tgisinternal
		 ORDER BY 1`)
	if err != nil {
		return errors.New("migrations: " + scrub(err.Error(), m.secret))
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return errors.New("migrations: " + scrub(err.Error(), m.secret))
	}
	if len(names) > 0 {
		return &TriggerError{Triggers: names}
	}
	return nil
}

// checkUp refuses, before anything changes, to migrate a database whose
// schema exists with no recorded migration. golang-migrate rewrites its
// record with TRUNCATE and INSERT, which a concurrent reader can see as an
// empty table for a moment (TRUNCATE is not MVCC-safe), so an unrecorded
// schema must be seen three times, 50 ms apart.
func (m *Migrator) checkUp(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, m.url)
	if err != nil {
		return errors.New("migrations: " + scrub(err.Error(), m.secret))
	}
	defer conn.Close(ctx)
	var ext string
	switch err := conn.QueryRow(ctx, "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'rl'").Scan(&ext); {
	case err == nil:
		return &ExtensionError{Version: ext}
	case !errors.Is(err, pgx.ErrNoRows):
		return errors.New("migrations: " + scrub(err.Error(), m.secret))
	}
	q := "SELECT to_regclass('rl.state') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM " + pgx.Identifier{Table}.Sanitize() + ")"
	for try := 0; ; try++ {
		var unrecorded bool
		if err := conn.QueryRow(ctx, q).Scan(&unrecorded); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42P01" { // no record table: nothing migrated by us
				return nil
			}
			return errors.New("migrations: " + scrub(err.Error(), m.secret))
		}
		if !unrecorded {
			return nil
		}
		if try == 2 {
			return &UnrecordedError{}
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// URLError reports a database URL this package cannot use. Its text never
// contains the password.
type URLError struct {
	Reason string
}

func (e *URLError) Error() string { return "migrations: bad database URL: " + e.Reason }

// Up applies every pending migration to the database at databaseURL
// (postgres://, postgresql:// or pgx5://). A database already up to date is
// success. It is safe to call from several processes at once.
func Up(ctx context.Context, databaseURL string) error {
	m, err := Open(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Up(ctx); err != nil && !errors.Is(err, ErrNoChange) {
		return err
	}
	return nil
}

// Migrator runs the migrations in FS against one database. It is not safe for
// concurrent use; open one per goroutine (the database itself is protected by
// an advisory lock).
type Migrator struct {
	m      *migrate.Migrate
	url    string   // for the checks made before changing anything
	secret []string // strings scrubbed from error messages
}

// Open connects to the database at databaseURL. The connection attempt is
// bounded by the URL's connect_timeout, by ctx's deadline, or else by
// DefaultConnectTimeout.
func Open(ctx context.Context, databaseURL string) (*Migrator, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	driverURL, secret, err := DriverURL(databaseURL)
	if err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		driverURL = capConnectTimeout(driverURL, time.Until(d))
	}
	src, err := iofs.New(FS, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	type result struct {
		m   *migrate.Migrate
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := migrate.NewWithSourceInstance("iofs", src, driverURL)
		done <- result{m, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("migrations: cannot open database %s: %s", Redact(databaseURL), scrub(r.err.Error(), secret))
		}
		return &Migrator{m: r.m, url: connURL(databaseURL), secret: secret}, nil
	case <-ctx.Done():
		go func() { // the attempt ends by its connect_timeout
			if r := <-done; r.m != nil {
				r.m.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// Close closes the database connection.
func (m *Migrator) Close() error {
	srcErr, dbErr := m.m.Close()
	return errors.Join(srcErr, dbErr)
}

// Up applies every pending migration. It returns ErrNoChange when there is
// none.
//
// On a database whose schema rl exists without a recorded migration (the
// files were applied by hand) it returns *UnrecordedError and changes
// nothing.
func (m *Migrator) Up(ctx context.Context) error {
	if err := m.checkUp(ctx); err != nil {
		return err
	}
	return m.run(ctx, m.m.Up)
}

// Down reverts every applied migration. It returns ErrNoChange when there is
// none. While triggers still use rl.enforce_limit it returns *TriggerError
// before changing anything; should other objects of users live in the
// schema rl, the last migration refuses to drop it (and the database is
// left dirty at that version). The roles rl_app and rl_admin are dropped
// only when nothing uses them anymore.
func (m *Migrator) Down(ctx context.Context) error {
	if err := m.checkDown(ctx, 0); err != nil {
		return err
	}
	return m.run(ctx, m.m.Down)
}

// Steps applies n migrations (n > 0) or reverts -n (n < 0), checking a
// revert as Down does.
func (m *Migrator) Steps(ctx context.Context, n int) error {
	if n < 0 {
		v, _, err := m.Version(ctx)
		if err != nil {
			return err
		}
		if err := m.checkDown(ctx, int(v)+n); err != nil {
			return err
		}
	} else if err := m.checkUp(ctx); err != nil {
		return err
	}
	return m.run(ctx, func() error { return m.m.Steps(n) })
}

// Goto migrates up or down to version v, checking as Up and Down do.
func (m *Migrator) Goto(ctx context.Context, v uint) error {
	if err := m.checkDown(ctx, int(v)); err != nil {
		return err
	}
	if err := m.checkUp(ctx); err != nil {
		return err
	}
	return m.run(ctx, func() error { return m.m.Migrate(v) })
}

// Force records version v (-1: none) as applied and clean without running
// anything: the repair step after a dirty migration was fixed by hand.
func (m *Migrator) Force(ctx context.Context, v int) error {
	return m.run(ctx, func() error { return m.m.Force(v) })
}

// Version returns the applied version (0 when none) and whether the last
// migration failed part-way.
func (m *Migrator) Version(ctx context.Context) (version uint, dirty bool, err error) {
	err = m.run(ctx, func() error {
		var e error
		version, dirty, e = m.m.Version()
		if errors.Is(e, migrate.ErrNilVersion) {
			return nil
		}
		return e
	})
	return version, dirty, err
}

// run calls f, asking golang-migrate to stop after the current migration when
// ctx ends (a migration in flight is one transaction and is not cut short).
// After that the Migrator stays stopped: Open a new one.
func (m *Migrator) run(ctx context.Context, f func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() {
		select {
		case m.m.GracefulStop <- true:
		default:
		}
	})
	err := f()
	if !stop() && err == nil {
		return ctx.Err() // stopped between migrations
	}
	if err == nil {
		return nil
	}
	var dirty migrate.ErrDirty
	switch {
	case errors.As(err, &dirty):
		return &DirtyError{Version: dirty.Version}
	case errors.Is(err, migrate.ErrNoChange):
		return ErrNoChange
	}
	return errors.New("migrations: " + scrub(err.Error(), m.secret))
}

// DriverURL converts a postgres:// or postgresql:// URL into golang-migrate's
// pgx5:// form (a pgx5:// URL is kept), adding x-migrations-table=Table and
// connect_timeout when they are missing. It also returns the password forms
// to keep out of messages. Key=value connection strings are not accepted.
func DriverURL(databaseURL string) (driverURL string, secret []string, err error) {
	if databaseURL == "" {
		return "", nil, &URLError{Reason: "empty (set -database or DATABASE_URL)"}
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", nil, &URLError{Reason: "cannot parse it as a URL (want postgres://user@host:port/dbname)"}
	}
	switch u.Scheme {
	case "postgres", "postgresql", "pgx5":
	case "":
		return "", nil, &URLError{Reason: "no scheme (want postgres://user@host:port/dbname)"}
	default:
		return "", nil, &URLError{Reason: fmt.Sprintf("scheme %q (want postgres://, postgresql:// or pgx5://)", u.Scheme)}
	}
	if strings.TrimPrefix(u.Path, "/") == "" {
		return "", nil, &URLError{Reason: fmt.Sprintf("no database name in %s", Redact(databaseURL))}
	}
	secret = secrets(u)
	u.Scheme = "pgx5"
	q := u.Query()
	if q.Get("x-migrations-table") == "" {
		q.Set("x-migrations-table", Table)
	}
	if q.Get("connect_timeout") == "" {
		q.Set("connect_timeout", strconv.Itoa(int(DefaultConnectTimeout/time.Second)))
	}
	u.RawQuery = q.Encode()
	return u.String(), secret, nil
}

// capConnectTimeout lowers the URL's connect_timeout to d (at least 1s).
func capConnectTimeout(driverURL string, d time.Duration) string {
	u, err := url.Parse(driverURL)
	if err != nil {
		return driverURL
	}
	q := u.Query()
	cur, err := strconv.Atoi(q.Get("connect_timeout"))
	secs := max(1, int((d+time.Second-1)/time.Second))
	if err == nil && cur > 0 && cur <= secs {
		return driverURL
	}
	q.Set("connect_timeout", strconv.Itoa(secs))
	u.RawQuery = q.Encode()
	return u.String()
}

// Redact returns databaseURL with its password replaced by "xxxxx", for
// messages. A string that does not parse is replaced whole.
func Redact(databaseURL string) string { return redact.String(databaseURL) }

// secrets returns the password of u in the forms it may appear in messages.
func secrets(u *url.URL) []string {
	var out []string
	add := func(p string) {
		if p != "" {
			out = append(out, p, url.QueryEscape(p), url.PathEscape(p))
		}
	}
	if p, ok := u.User.Password(); ok {
		add(p)
	}
	add(u.Query().Get("password"))
	return out
}

// scrub removes every secret from s.
func scrub(s string, secret []string) string {
	for _, p := range secret {
		if p != "" {
			s = strings.ReplaceAll(s, p, "xxxxx")
		}
	}
	return s
}
