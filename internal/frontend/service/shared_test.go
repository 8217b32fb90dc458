package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/pgstore"
)

// Issue 10: a Go app and the service on one database share counts: unnamed
// limits get one default name in both (rl.DefaultLimitName), and a rule's
// base key is its name. Before, the app named a one-minute fixed window
// "fixed_window_1m0s" and the service "fixed_window_1m": two rows, twice
// the quota.
func TestGoAppAndServiceShareCounts(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.NewMigrated(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	for _, mode := range []pgstore.Mode{pgstore.ModeSQL, pgstore.ModeGo} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			st, err := pgstore.New(pool, pgstore.Config{Mode: mode})
			require.NoError(t, err)
			t.Cleanup(func() { st.Close() })
			rule := fmt.Sprintf("api%d", mode)
			cfg, err := ParseConfig("shared.yaml", "yaml", []byte(`
rules:
  - name: `+rule+`
    limits:
      - {strategy: fixed, limit: 3, window: 1m}
      - {strategy: token, limit: 100, window: 1s}
  - {name: `+rule+`one, strategy: gcra, limit: 2, window: 1h}
`))
			require.NoError(t, err)
			svc, err := New(cfg, Options{Store: st, Logger: quietLogger()})
			require.NoError(t, err)
			srv := newServer(t, svc)

			app, err := rl.New(rl.Config{Store: st, BaseKey: rule, Policy: rl.MustPolicy(
				rl.Limit{Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute},
				rl.Limit{Algorithm: core.TokenBucket, Limit: 100, Window: time.Second},
			)})
			require.NoError(t, err)
			t.Cleanup(func() { app.Close() })
			one, err := rl.New(rl.Config{Store: st, BaseKey: rule + "one", Policy: rl.MustPolicy(
				rl.Limit{Algorithm: core.GCRA, Limit: 2, Window: time.Hour})})
			require.NoError(t, err)
			t.Cleanup(func() { one.Close() })

			admitted := 0
			for i := range 6 {
				if i%2 == 0 {
					res, err := app.Allow(ctx, "alice")
					require.NoError(t, err)
					if res.Allowed {
						admitted++
					}
				} else if doURL(t, "POST", srv.URL+APIPrefix+"check", fmt.Sprintf(`{"rule":%q,"key":"alice"}`, rule)).code == 200 {
					admitted++
				}
			}
			require.Equal(t, 3, admitted, "one quota between the app and the service")

			res, err := one.Allow(ctx, "bob")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.Equal(t, 200, doURL(t, "POST", srv.URL+APIPrefix+"check", fmt.Sprintf(`{"rule":"%sone","key":"bob"}`, rule)).code)
			require.Equal(t, 429, doURL(t, "POST", srv.URL+APIPrefix+"check", fmt.Sprintf(`{"rule":"%sone","key":"bob"}`, rule)).code)
		})
	}
}
