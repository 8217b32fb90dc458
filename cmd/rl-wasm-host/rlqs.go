package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl/internal/frontend/rlqs"
	"github.com/rlcore/rl/internal/frontend/rls"
	"github.com/rlcore/rl/sql/migrations"
)

// The RLQS server's metrics are exported on /metrics beside the rate limit
// service's.
var _ rls.Monitored = (*rlqs.Server)(nil)

// rlqsMaxConns bounds the RLQS server's own PostgreSQL pool: a report holds
// a connection for one short transaction per bucket, every few seconds
// per Envoy.
const rlqsMaxConns = 4

// newRLQS loads -rlqs-config and returns the RLQS server it configures,
// its state in memory or, with storeKind "postgres", in the database at
// pg.URL (tables rl.quota_bucket and rl.quota_client, migration 0021), on a
// pool of its own that closeStore closes.
func newRLQS(path, storeKind string, pg PostgresConfig) (srv *rlqs.Server, closeStore func(), err error) {
	cfg, err := rlqs.LoadConfig(path)
	if err != nil {
		return nil, nil, err
	}
	closeStore = func() {}
	switch storeKind {
	case "memory":
	case "postgres":
		if pg.URL == "" {
			return nil, nil, errors.New("-rlqs-store postgres: no database URL (set DATABASE_URL or -database-url)")
		}
		redacted := migrations.Redact(pg.URL)
		pcfg, err := pgxpool.ParseConfig(pg.URL)
		if err != nil {
			return nil, nil, fmt.Errorf("-rlqs-store postgres: database URL %s: %v", redacted, scrubURLError(err))
		}
		pcfg.MaxConns = rlqsMaxConns
		// The pool connects on first use: by then -migrate has run.
		pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
		if err != nil {
			return nil, nil, fmt.Errorf("-rlqs-store postgres: database %s: %w", redacted, err)
		}
		cfg.Store, cfg.KeepsState, closeStore = rlqs.NewPGStore(pool), true, pool.Close
		cfg.OnTickError = tickErrorLogger(redacted)
	default:
		return nil, nil, fmt.Errorf("-rlqs-store %q: want memory or postgres", storeKind)
	}
	srv, err = rlqs.New(cfg)
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	return srv, closeStore, nil
}

// tickErrorLogger logs the RLQS server's failed ticks, a failure only when
// it differs from the one before: a database down for a minute is logged
// once, not sixty times.
func tickErrorLogger(database string) func(error) {
	var last atomic.Pointer[string]
	return func(err error) {
		msg := err.Error()
		if p := last.Swap(&msg); p != nil && *p == msg {
			return
		}
		switch {
		case isUndefined(err):
			slog.Error("RLQS: the database is not migrated to the RLQS tables (rl.quota_bucket missing, migration 0021): run with -migrate, or rl-migrate up", "database", database, "err", err)
		case isPermission(err):
			slog.Error("RLQS: this database role may not use the RLQS tables: grant it rl_admin", "database", database, "err", err)
		default:
			slog.Warn("RLQS: stepping the buckets failed; trying again every second", "database", database, "err", err)
		}
	}
}
