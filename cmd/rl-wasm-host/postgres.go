package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/failover"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/pgstore"
	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/store"
)

// PostgresConfig configures the PostgreSQL store.
type PostgresConfig struct {
	// URL is the database URL (postgres://...); required.
	URL string
	// Migrate applies the migrations in sql/migrations before serving.
	Migrate bool
	// Decide is "sql" (default, as pgstore's: the PL/pgSQL port decides
	// in one round trip, and any role granted rl_app may run it) or "go"
	// (the rows are locked in a transaction and the service's decider, the
	// WebAssembly core by default, decides; it needs a trusted role, the
	// owner or rl_admin, since migration 0007).
	Decide string
	// Durable commits every decision synchronously; by default decisions
	// commit with synchronous_commit = off (a crash can lose the last
	// fraction of a second of counts, never corrupt a row).
	Durable bool
	// Batch coalesces concurrent decisions into batches, one statement and
	// one commit each (pgstore.Batched): more decisions per second under
	// load for a little latency. The -pg-batch flag defaults to true; the
	// zero PostgresConfig (tests) decides one statement per decision.
	Batch bool
	// MaxConns bounds the pool; 0: pgx's default (max(4, CPUs)).
	MaxConns int32
	// Timeout bounds each decision once it has a connection; a slower
	// database counts as down. Default 250ms.
	Timeout time.Duration
	// QueueTimeout bounds the wait for a pooled connection. Running out of
	// it while every connection is busy is load (a 503, never fail_open);
	// while the database is failing it is an outage. Default 1s.
	QueueTimeout time.Duration
	// Failover decides in memory while PostgreSQL is down, behind a
	// circuit breaker that returns to PostgreSQL when it recovers.
	Failover bool
	// FailoverThreshold and FailoverCooldown tune the breaker: failures
	// in a row that open it (default 3) and the wait before a probe
	// (default 5s).
	FailoverThreshold int
	FailoverCooldown  time.Duration
}

func openPostgres(ctx context.Context, pc PostgresConfig, decider core.Decider, mem *memstore.Config, log *slog.Logger, hooks storeHooks) (*storeHandle, error) {
	if pc.URL == "" {
		return nil, errors.New("-store postgres: no database URL (set DATABASE_URL or -database-url)")
	}
	redacted := migrations.Redact(pc.URL)
	if pc.Migrate {
		mctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := warnSuperuser(mctx, pc.URL, log)
		if err == nil {
			err = migrations.Up(mctx, pc.URL)
		}
		cancel()
		if err != nil {
			return nil, fmt.Errorf("migrate %s: %w", redacted, err)
		}
		log.Info("database migrated", "database", redacted, "version", migrations.Latest)
	}
	pcfg, err := pgxpool.ParseConfig(pc.URL)
	if err != nil {
		return nil, fmt.Errorf("database URL %s: %v", redacted, scrubURLError(err))
	}
	if pc.MaxConns > 0 {
		pcfg.MaxConns = pc.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", redacted, err)
	}
	timeout := orDefault(pc.Timeout, 250*time.Millisecond)
	cfg := pgstore.Config{Timeout: timeout, QueueTimeout: orDefault(pc.QueueTimeout, time.Second), ExpireEvery: time.Minute,
		OnExpireError: func(err error) {
			if isPermission(err) {
				// rl_expire is for the owner and rl_admin (migration 0007):
				// say so once, not every minute.
				expireDenied.Do(func() {
					log.Warn("not expiring idle rows: this database role may not call rl_expire (grant it rl_admin, or run rl_expire from a cron job as the owner)", "err", err)
				})
				return
			}
			log.Warn("expiring idle rows failed", "err", err)
		}}
	switch pc.Decide {
	case "go":
		cfg.Mode, cfg.Decider = pgstore.ModeGo, decider
	case "", "sql":
		cfg.Mode = pgstore.ModeSQL
	default:
		pool.Close()
		return nil, fmt.Errorf("-pg-decide %q: want go or sql", pc.Decide)
	}
	if !pc.Durable {
		cfg.Durability = pgstore.DurabilityFast
	}

	// Check the schema now: a reachable but unmigrated database is a
	// configuration mistake; an unreachable one is an outage the rules'
	// fail policies (or the failover) handle.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = pool.Exec(cctx, "SELECT 1 FROM rl.state LIMIT 0")
	cancel()
	switch {
	case err == nil:
		log.Info("store: PostgreSQL", "database", redacted, "decide", cmp.Or(pc.Decide, "sql"), "durable", pc.Durable, "batch", pc.Batch, "timeout", timeout, "failover", pc.Failover)
	case isUndefined(err):
		pool.Close()
		return nil, fmt.Errorf("database %s is not migrated (table rl.state missing): run with -migrate, or rl-migrate up", redacted)
	default:
		log.Warn("PostgreSQL unreachable at start; serving anyway (rules fail open or closed, or the failover decides)",
			"database", redacted, "err", err)
	}

	var pg interface {
		store.Store
		Close() error
	}
	if pc.Batch {
		pg, err = pgstore.NewBatched(pool, cfg, pgstore.BatchConfig{})
	} else {
		pg, err = pgstore.New(pool, cfg)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	h := &storeHandle{store: pg, maxConns: pcfg.MaxConns, close: func() { pg.Close(); pool.Close() }}
	h.ready = func(ctx context.Context) error { return pool.Ping(ctx) }
	if pc.Failover {
		mem := memstore.New(mem)
		fo, err := failover.New(failover.Config{
			Primary: pg, Fallback: mem,
			Threshold: pc.FailoverThreshold, Cooldown: pc.FailoverCooldown,
			OnChange: func(from, to failover.State) {
				log.Info("failover breaker", "from", from.String(), "to", to.String())
				switch {
				case to == failover.Open && from == failover.Closed:
					hooks.failover("memory")
				case to == failover.Closed:
					hooks.failover("primary")
				}
			},
		})
		if err != nil {
			h.close()
			mem.Close()
			return nil, err
		}
		h.store = fo
		closePG := h.close
		h.close = func() { closePG(); mem.Close() }
		// Serving from memory while PostgreSQL is down is the point of the
		// failover: readiness does not depend on the database then.
		h.ready = nil
	}
	return h, nil
}

// expireDenied reports a refused expiry once per process.
var expireDenied sync.Once

func isPermission(err error) bool {
	var pe interface{ SQLState() string }
	return errors.As(err, &pe) && pe.SQLState() == "42501"
}

func isUndefined(err error) bool {
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		c := pe.SQLState()
		return c == "42P01" || c == "3F000" // undefined_table, invalid_schema_name
	}
	return false
}

// scrubURLError keeps pgx's parse errors, which may quote the URL, out of
// the logs.
func scrubURLError(err error) string {
	return "cannot parse it (want postgres://user[:password]@host:port/dbname)"
}

// warnSuperuser logs a warning when -migrate runs as a superuser: the
// migrations would make it the owner of schema rl, whose SECURITY DEFINER
// functions would then run with superuser rights for any caller
// (migrations.SuperuserError says what to do instead). rl-migrate refuses
// that unless given -allow-superuser; the service warns, so that a
// development setup on a default superuser keeps starting.
func warnSuperuser(ctx context.Context, url string, log *slog.Logger) error {
	m, err := migrations.Open(ctx, url)
	if err != nil {
		return err
	}
	defer m.Close()
	var su *migrations.SuperuserError
	if err := m.CheckOwner(ctx); errors.As(err, &su) {
		log.Warn("-migrate runs as a superuser: it will own schema rl, and every SECURITY DEFINER function of rl "+
			"will run with superuser rights for any caller; migrate as an ordinary owner role instead "+
			"(rl-migrate refuses a superuser: sql/README.md, \"Installing without a superuser\")", "role", su.Role)
	} else if err != nil {
		return err
	}
	return nil
}
