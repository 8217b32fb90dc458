// Package pgtest gives tests a throwaway PostgreSQL database of their own.
//
// The server is named by the DATABASE_URL environment variable, defaulting to
// DefaultURL. Each database is created as rltest_<random> so parallel test
// runs never collide, and dropped when the test ends. An unreachable server
// fails the test: database tests never skip, so CI cannot pass without them.
// The one exception is the quick tier, go test -short, which needs no
// PostgreSQL: there every database test skips (SkipShort), whether a server
// is reachable or not.
//
// A test that needs the schema rl but does not test migrating takes a copy
// of a template database migrated once (NewMigrated: seconds saved per
// database; see Template for how templates are named, built and shared
// between test binaries):
//
//	func TestX(t *testing.T) {
//		url := pgtest.NewDatabase(t) // empty database
//		mig := pgtest.NewMigrated(t) // migrated to the newest version
//		...
//	}
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is the server used when DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL returns DATABASE_URL, or DefaultURL when it is empty.
func URL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Create creates a new empty database on the server at serverURL and
// returns its URL and a function that drops it (disconnecting its sessions).
func Create(ctx context.Context, serverURL string) (dbURL string, drop func(context.Context) error, err error) {
	return create(ctx, serverURL, "")
}

// create creates a new database, a copy of template when it is not empty.
func create(ctx context.Context, serverURL, template string) (dbURL string, drop func(context.Context) error, err error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("pgtest: bad DATABASE_URL: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("pgtest: PostgreSQL at %s is unreachable (set DATABASE_URL): %w", u.Redacted(), err)
	}
	defer conn.Close(ctx)
	name := randomName()
	q := "CREATE DATABASE " + name
	if template != "" {
		q += " TEMPLATE " + template
	}
	if _, err := conn.Exec(ctx, q); err != nil {
		return "", nil, fmt.Errorf("pgtest: %w", err)
	}
	u.Path = "/" + name
	drop = func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		return err
	}
	return u.String(), drop, nil
}

// ShortReason is why a test that needs PostgreSQL does not run with -short.
const ShortReason = "needs PostgreSQL (DATABASE_URL): not run in the quick tier (go test -short)"

// SkipShort skips t in the quick tier (go test -short) and does nothing
// otherwise: every test that needs PostgreSQL calls it first (NewDatabase
// does), so that the quick tier needs no server while the full tier still
// fails without one.
func SkipShort(t testing.TB) {
	if testing.Short() {
		t.Helper()
		t.Skip(ShortReason)
	}
}

// NewDatabase creates a new empty database for t, dropped when t ends, and
// returns its URL. It fails t when the server is unreachable, and skips t
// with -short (SkipShort).
func NewDatabase(t testing.TB) string {
	t.Helper()
	SkipShort(t)
	dbURL, drop, err := Create(context.Background(), URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Errorf("pgtest: drop database: %v", err)
		}
	})
	return dbURL
}

// OrdinaryOwner prepares the database at dbURL (a superuser's URL) to be
// migrated by an ordinary role, doing once, as a superuser, exactly what
// sql/README.md's "Installing without a superuser" says only a superuser
// (or a role with CREATEROLE) must do: create the cluster's roles rl_app
// and rl_admin (rl_admin a member of rl_app) if they are missing, and
// create the owner role, a LOGIN role with no SUPERUSER, CREATEROLE or
// CREATEDB, given the database. It returns the owner's URL and a function
// that drops the role (after the database is dropped). The server is the
// one URL names (DATABASE_URL).
func OrdinaryOwner(ctx context.Context, dbURL string) (ownerURL string, dropOwner func(context.Context) error, err error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", nil, err
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "rltest_" + hex.EncodeToString(b) + "_owner"
	_, _ = rand.Read(b)
	pw := hex.EncodeToString(b)

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	su, err := pgx.Connect(cctx, URL())
	if err != nil {
		return "", nil, fmt.Errorf("owner role: %w", err)
	}
	defer su.Close(ctx)
	// The cluster's roles, once; other test packages may create them at the
	// same moment through the migrations, hence the retries.
	const roles = `DO $do$
	BEGIN
		FOR attempt IN 1 .. 5 LOOP
			BEGIN
				IF to_regrole('rl_app') IS NULL THEN CREATE ROLE rl_app NOLOGIN; END IF;
				IF to_regrole('rl_admin') IS NULL THEN CREATE ROLE rl_admin NOLOGIN; END IF;
				IF NOT pg_has_role('rl_admin', 'rl_app', 'MEMBER') THEN GRANT rl_app TO rl_admin; END IF;
				RETURN;
			EXCEPTION WHEN duplicate_object OR unique_violation OR undefined_object THEN
				IF attempt = 5 THEN RAISE; END IF;
			END;
		END LOOP;
	END $do$`
	for _, q := range []string{
		roles,
		"CREATE ROLE " + name + " LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB PASSWORD '" + pw + "'",
		"ALTER DATABASE " + dbName + " OWNER TO " + name,
	} {
		if _, err := su.Exec(cctx, q); err != nil {
			return "", nil, fmt.Errorf("owner role: %w", err)
		}
	}
	dropOwner = func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, URL())
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, "DROP ROLE IF EXISTS "+name)
		return err
	}
	u.User = url.UserPassword(name, pw)
	return u.String(), dropOwner, nil
}

// NewOwnedDatabase creates a new empty database for t owned by a fresh
// ordinary role (OrdinaryOwner), both dropped when t ends, and returns its
// URL for the superuser of DATABASE_URL and for the owner.
func NewOwnedDatabase(t testing.TB) (superuserURL, ownerURL string) {
	t.Helper()
	SkipShort(t)
	ctx := context.Background()
	su, drop, err := Create(ctx, URL())
	if err != nil {
		t.Fatal(err)
	}
	owner, dropOwner, err := OrdinaryOwner(ctx, su)
	t.Cleanup(func() { // the database first: the role owns it
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Errorf("pgtest: drop database: %v", err)
		}
		if dropOwner != nil {
			if err := dropOwner(ctx); err != nil {
				t.Errorf("pgtest: drop owner role: %v", err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return su, owner
}

// Pool opens a pool on url, closed when the test ends.
func Pool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 40
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// HungServer returns the address of a TCP server that accepts
// connections and never answers, like a hung database.
func HungServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}
