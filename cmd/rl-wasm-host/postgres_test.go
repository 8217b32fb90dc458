package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/internal/testkit/tcpproxy"
	"github.com/rlcore/rl/store"
)

// openPostgres refuses a configuration it cannot serve before it serves,
// and its failover store reports each switch to the hooks (the Service's
// rl_failover metrics).
func TestOpenPostgres(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		name string
		pc   PostgresConfig
		want string
	}{
		{"no URL", PostgresConfig{}, "no database URL"},
		{"bad URL", PostgresConfig{URL: "postgres://u:secret@[bad"}, "cannot parse it"},
		{"bad decide", PostgresConfig{URL: pgtest.NewDatabase(t), Migrate: true, Decide: "lua"}, `-pg-decide "lua": want go or sql`},
		{"not migrated", PostgresConfig{URL: pgtest.NewDatabase(t)}, "is not migrated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := openPostgres(ctx, c.pc, core.Native{}, nil, log, storeHooks{})
			require.ErrorContains(t, err, c.want)
			require.NotContains(t, err.Error(), "secret")
		})
	}

	dbURL := pgtest.NewDatabase(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	px, err := tcpproxy.New(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { px.Close() })
	u.Host = px.Addr()
	var mu sync.Mutex
	var events []string
	h, err := openPostgres(ctx, PostgresConfig{URL: u.String(), Migrate: true, Decide: "go", Timeout: 10 * time.Minute, QueueTimeout: 10 * time.Minute,
		Failover: true, FailoverThreshold: 1, FailoverCooldown: 100 * time.Millisecond}, core.Native{}, nil, log,
		storeHooks{failover: func(to string) {
			mu.Lock()
			events = append(events, to)
			mu.Unlock()
		}})
	require.NoError(t, err)
	t.Cleanup(h.close)
	require.Nil(t, h.ready, "with failover, readiness does not depend on the database")
	req := store.Request{Prefix: "t", Key: "k", Policy: store.MustPolicy([]string{"n"}, core.Limit{Algorithm: core.FixedWindow, Limit: 10, Window: int64(time.Hour / time.Microsecond)}),
		Now: time.Now().UnixMicro(), Cost: 1}
	decide := func() {
		_, _, err := h.store.Decide(ctx, req, nil)
		require.NoError(t, err)
	}
	decide()
	px.Cut()
	decide() // fails over to memory
	mu.Lock()
	require.Equal(t, []string{"memory"}, events)
	mu.Unlock()
	px.Restore()
	await.Until(t, "the failover back to PostgreSQL", func() bool {
		h.store.Decide(ctx, req, nil) // calls drive the half-open probe
		mu.Lock()
		defer mu.Unlock()
		return len(events) == 2 && events[1] == "primary"
	})
}

// TestOpenPostgresShadow: both -pg-decide sql (migration 18's shadow
// flags) and go decide shadow limits.
func TestOpenPostgresShadow(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	dbURL := pgtest.NewDatabase(t)
	for _, c := range []struct {
		decide string
		want   error
	}{{"sql", nil}, {"", nil}, {"go", nil}} {
		h, err := openPostgres(ctx, PostgresConfig{URL: dbURL, Migrate: true, Decide: c.decide}, core.Native{}, nil, log, storeHooks{})
		require.NoError(t, err)
		if c.want == nil {
			require.NoError(t, h.noShadow, "-pg-decide %q", c.decide)
		} else {
			require.ErrorIs(t, h.noShadow, c.want, "-pg-decide %q", c.decide)
		}
		h.close()
	}
}

// TestMigrateWarnsSuperuser: -migrate as a superuser logs a warning naming
// the risk and the alternative (rl-migrate refuses it unless told); as an
// ordinary owner role it says nothing.
func TestMigrateWarnsSuperuser(t *testing.T) {
	ctx := context.Background()
	su := pgtest.NewDatabase(t)
	_, owner := pgtest.NewOwnedDatabase(t)
	for _, c := range []struct {
		name, url string
		warn      bool
	}{{"superuser", su, true}, {"owner", owner, false}} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
			h, err := openPostgres(ctx, PostgresConfig{URL: c.url, Migrate: true}, core.Native{}, nil, log, storeHooks{})
			require.NoError(t, err)
			h.close()
			if c.warn {
				require.Contains(t, buf.String(), "level=WARN")
				require.Contains(t, buf.String(), "superuser rights for any caller")
				require.Contains(t, buf.String(), "ordinary owner role")
			} else {
				require.Empty(t, buf.String())
			}
		})
	}
}
