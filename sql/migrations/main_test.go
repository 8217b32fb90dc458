package migrations_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/migrations"
)

// Every test in this package shares one database, created, migrated and
// dropped by TestMain, and the pool db on it. Tests that migrate up and down
// create databases of their own.
//
// The shared database is migrated by an ordinary role (no SUPERUSER,
// CREATEROLE or CREATEDB) that owns the database, after the one-time
// superuser steps sql/README.md lists ("Installing without a superuser"):
// so every vector and test of the package runs against a schema rl whose
// definer-rights functions have an ordinary owner. The pool db itself is a
// superuser session (trusted, as a member of every role).
var (
	dbURL string
	db    *pgxpool.Pool
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		// Every test of this package runs SQL on PostgreSQL: none in the
		// quick tier.
		fmt.Println("sql/migrations:", pgtest.ShortReason)
		return 0
	}
	ctx := context.Background()
	u, drop, err := pgtest.Create(ctx, pgtest.URL())
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	dbURL = u
	ownerURL, dropOwner, err := ordinaryOwner(ctx, dbURL)
	// The role owns the database: it is dropped after the database.
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "drop test database:", err)
		}
		if dropOwner == nil {
			return
		}
		if err := dropOwner(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "drop owner role:", err)
		}
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	if err := migrations.Up(ctx, ownerURL); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: migrations.Up as an ordinary owner:", err)
		return 1
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	cfg.MaxConns = 40
	// The tests commit thousands of tiny transactions; waiting for each
	// WAL flush would only make them slow (see sql/README.md, Durability).
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	db, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer db.Close()
	return m.Run()
}
