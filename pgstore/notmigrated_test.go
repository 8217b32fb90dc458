package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/pgstore"
	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/store"
)

// TestNotMigrated: on an empty database (no schema rl) every call of
// every store and mode fails with an error that matches ErrNotMigrated,
// keeps the server's error, names the fix (migrations.Up, rl-migrate up)
// and is not an outage.
func TestNotMigrated(t *testing.T) {
	pool := pgtest.Pool(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	p := store.MustPolicy([]string{"default"}, core.Limit{Algorithm: core.FixedWindow, Limit: 5, Window: 1_000_000})
	check := func(t *testing.T, what string, err error) {
		t.Helper()
		require.ErrorIs(t, err, pgstore.ErrNotMigrated, what)
		require.False(t, errors.Is(err, store.ErrUnavailable), "%s: not an outage: %v", what, err)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, what)
		msg := err.Error()
		t.Log(what, ": ", msg)
		for _, want := range []string{"database not migrated: ", "migrations.Up", "rl-migrate up", pe.Message} {
			require.True(t, strings.Contains(msg, want), "%s: %q lacks %q", what, msg, want)
		}
	}
	for _, m := range modes[:2] {
		t.Run(m.name, func(t *testing.T) {
			s := newStore(t, pool, m.cfg)
			_, _, err := s.Decide(ctx, store.Request{Key: "k", Policy: p, Now: t0, Cost: 1}, nil)
			check(t, "Decide", err)
			check(t, "Reset", s.Reset(ctx, "", "k", []string{"default"}))
			_, err = s.Expire(ctx)
			check(t, "Expire", err)
			b, err := pgstore.NewBatched(pool, m.cfg, pgstore.BatchConfig{})
			require.NoError(t, err)
			defer b.Close()
			_, _, err = b.Decide(ctx, store.Request{Key: "k", Policy: p, Now: t0, Cost: 1}, nil)
			check(t, "Batched.Decide", err)
		})
	}
}

// TestNotMigratedOnlyRL: an undefined schema, function or table that is not
// rl's is not reported as an unmigrated database.
func TestNotMigratedOnlyRL(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	for _, q := range []string{"SELECT other.f()", "SELECT rl_nosuch_function()", "SELECT 1 FROM other.t", "SELECT 1 FROM nosuch_table"} {
		_, err := pool.Exec(context.Background(), q)
		require.Error(t, err, q)
		require.False(t, pgstore.IsNotMigrated(err), "%s: %v", q, err)
	}
	for _, q := range []string{"SELECT rl.nosuch_function()", "SELECT 1 FROM rl.nosuch_table"} {
		_, err := pool.Exec(context.Background(), q)
		require.True(t, pgstore.IsNotMigrated(err), "%s: %v", q, err)
		require.Contains(t, pgstore.Classify(err).Error(), "database migrated to an older version than this package needs: ", q)
	}
}

// TestOlderSchema: a database migrated to an older version than the
// store's calls need fails with an error matching ErrNotMigrated that
// says so.
func TestOlderSchema(t *testing.T) {
	u := pgtest.NewDatabase(t)
	m, err := migrations.Open(context.Background(), u)
	require.NoError(t, err)
	require.NoError(t, m.Goto(context.Background(), 1))
	require.NoError(t, m.Close())
	pool := pgtest.Pool(t, u)
	p := store.MustPolicy([]string{"default"}, core.Limit{Algorithm: core.FixedWindow, Limit: 5, Window: 1_000_000})
	for _, m := range modes[:2] {
		s := newStore(t, pool, m.cfg)
		_, _, err := s.Decide(context.Background(), store.Request{Key: "k", Policy: p, Now: t0, Cost: 1}, nil)
		t.Log(m.name, err)
		require.ErrorIs(t, err, pgstore.ErrNotMigrated, m.name)
		require.Contains(t, err.Error(), "database migrated to an older version than this package needs: ", m.name)
		require.Contains(t, err.Error(), `"rl-migrate up"`, m.name)
	}
}
