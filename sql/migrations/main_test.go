package migrations_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl/internal/pgtest"
	"github.com/rlcore/rl/sql/migrations"
)

// Every test in this package shares one database, created, migrated and
// dropped by TestMain, and the pool db on it. Tests that migrate up and down
// create databases of their own.
var (
	dbURL string
	db    *pgxpool.Pool
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	ctx := context.Background()
	u, drop, err := pgtest.Create(ctx, pgtest.URL())
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "drop test database:", err)
		}
	}()
	dbURL = u
	if err := migrations.Up(ctx, dbURL); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: migrations.Up:", err)
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
