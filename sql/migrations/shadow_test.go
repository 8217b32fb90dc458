package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// TestShadowAllowMulti: rl_allow_multi's "shadow": true (migration 18)
// decides as store.Policy.Decide, call after call: every row and the
// deciding index, for a policy with enforced and shadow limits and one of
// only shadow limits.
func TestShadowAllowMulti(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names := []string{"e", "s", "t"}
	ls := []core.Limit{
		{Algorithm: core.FixedWindow, Limit: 4, Window: 60_000_000},
		{Algorithm: core.FixedWindow, Limit: 2, Window: 60_000_000},
		{Algorithm: core.SlidingLog, Limit: 3, Window: 60_000_000},
	}
	for _, c := range []struct {
		limits  string
		shadows []string
	}{
		{`[{"name":"e","algorithm":"fixed","limit":4,"window_us":60000000},
		   {"name":"s","algorithm":"fixed","limit":2,"window_us":60000000,"shadow":true},
		   {"name":"t","algorithm":"sliding_log","limit":3,"window_us":60000000,"shadow":true}]`, []string{"s", "t"}},
		{`[{"name":"e","algorithm":"fixed","limit":4,"window_us":60000000,"shadow":true},
		   {"name":"s","algorithm":"fixed","limit":2,"window_us":60000000,"shadow":true},
		   {"name":"t","algorithm":"sliding_log","limit":3,"window_us":60000000,"shadow":true}]`, []string{"e", "s", "t"}},
		{`[{"name":"e","algorithm":"fixed","limit":4,"window_us":60000000,"shadow":false},
		   {"name":"s","algorithm":"fixed","limit":2,"window_us":60000000,"shadow":null},
		   {"name":"t","algorithm":"sliding_log","limit":3,"window_us":60000000,"shadow":true}]`, []string{"t"}},
	} {
		p, err := store.MustPolicy(names, ls...).WithShadow(c.shadows...)
		require.NoError(t, err)
		key := uniqueKey("shadow")
		ss := make([]core.State, 3)
		for call, cost := range []int64{1, 2, 1, 1, 3, 1, 0, 1} {
			now := int64(1_000 + call)
			want := make([]core.Decision, 3)
			wi, err := p.Decide(nil, store.Take, ss, now, cost, want)
			require.NoError(t, err)
			rows, err := db.Query(ctx, `SELECT ord, allowed, remaining, retry_after_us, deciding FROM rl.rl_allow_multi($1, $2::jsonb, $3, $4)`,
				key, c.limits, cost, now)
			require.NoError(t, err)
			gi := -1
			for rows.Next() {
				var (
					ord              int32
					allowed, decides bool
					remaining, retry int64
				)
				require.NoError(t, rows.Scan(&ord, &allowed, &remaining, &retry, &decides))
				require.Equal(t, want[ord].Allowed, allowed, "shadows %v call %d limit %d", c.shadows, call, ord)
				require.Equal(t, want[ord].Remaining, remaining, "shadows %v call %d limit %d", c.shadows, call, ord)
				require.Equal(t, want[ord].RetryAfter, retry, "shadows %v call %d limit %d", c.shadows, call, ord)
				if decides {
					gi = int(ord)
				}
			}
			require.NoError(t, rows.Err())
			require.Equal(t, wi, gi, "shadows %v call %d: deciding", c.shadows, call)
		}
	}
	_, err := db.Exec(ctx, `SELECT * FROM rl.rl_allow_multi('k', '[{"name":"a","algorithm":"fixed","limit":1,"window_us":1000000,"shadow":"yes"}]')`)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "RL010", pe.Code)
	require.Contains(t, pe.Detail, "limits[0].shadow must be true or false")
}
