package migrations_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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

// TestShadowPeekMulti: rl_peek_multi honours "shadow": true (migration 19)
// as store.Policy.Decide peeks (store.Peek), and rl_settle_multi accepts
// the flag and settles every limit alike, as Decide settles (store.Settle):
// random policies of enforced and shadow limits (some of shadow limits
// only, "shadow" false, null or missing on the enforced ones), random
// takes through rl_allow_multi and settles through rl_settle_multi moving
// the states, and peeks of random costs between them. Every row (each
// decision field) and the deciding index must be Decide's, and a peek
// must leave the rows as they were.
func TestShadowPeekMulti(t *testing.T) {
	t.Parallel()
	calls := 60
	if testing.Short() || raceEnabled {
		calls = 30
	}
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runShadowPeek(t, rand.New(rand.NewPCG(20260119+seed, 19)), calls)
		})
	}
}

// runShadowPeek runs one random policy through calls random takes, peeks
// and settles.
func runShadowPeek(t *testing.T, rng *rand.Rand, calls int) {
	ctx := context.Background()
	n := 1 + rng.IntN(4)
	names := []string{"a", "b", "c", "d"}[:n]
	ls := make([]core.Limit, n)
	ss := make([]core.State, n)
	shadow := make([]bool, n)
	for i := range n {
		a := core.Algorithm(1 + rng.IntN(6))
		l := core.Limit{Algorithm: a, Limit: []int64{1, 2, 3, 5, 8}[rng.IntN(5)], Window: []int64{1_000_000, 10_000_000, 60_000_000}[rng.IntN(3)]}
		if a > core.SlidingLog && rng.IntN(2) == 0 {
			l.Rate = 1 + rng.Int64N(l.Limit)
		}
		ls[i] = l
		shadow[i] = rng.IntN(2) == 0
	}
	if !slices.Contains(shadow, true) { // at least one: the policy is what is under test
		shadow[rng.IntN(n)] = true
	}
	var shadows []string
	elems := make([]string, n)
	for i, l := range ls {
		flag := []string{``, `,"shadow":false`, `,"shadow":null`}[rng.IntN(3)]
		if shadow[i] {
			shadows = append(shadows, names[i])
			flag = `,"shadow":true`
		}
		elems[i] = fmt.Sprintf(`{"name":%q,"algorithm":%d,"limit":%d,"window_us":%d,"rate":%d%s}`,
			names[i], l.Algorithm, l.Limit, l.Window, l.Rate, flag)
	}
	limits := "[" + strings.Join(elems, ",") + "]"
	p, err := store.MustPolicy(names, ls...).WithShadow(shadows...)
	require.NoError(t, err)
	key := uniqueKey("shadowpeek")
	stored := func() string {
		var s string
		require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(string_agg(s::text, ';' ORDER BY s.name), '') FROM rl.state s WHERE s.key = $1`, key).Scan(&s))
		return s
	}
	now := int64(1_000_000)
	var npeek, nshadowDeny int
	for call := range calls {
		now += rng.Int64N(4_000_000)
		op, fn := store.Peek, "rl_peek_multi"
		cost := []int64{0, 1, 1, 1, 2, 3, 9}[rng.IntN(7)]
		switch rng.IntN(5) {
		case 0, 1:
			op, fn = store.Take, "rl_allow_multi"
		case 2:
			if rng.IntN(2) == 0 {
				op, fn = store.Settle, "rl_settle_multi"
				cost = []int64{-3, -1, 0, 1, 4}[rng.IntN(5)]
			}
		}
		for i := range ss { // room for any log (a store's rows have no capacity to run out of)
			ss[i].Log = slices.Grow(slices.Clone(ss[i].Log), int(core.MaxLogLimit))
		}
		want := make([]core.Decision, n)
		wi, err := p.Decide(nil, op, ss, now, cost, want)
		require.NoError(t, err)
		before := stored()
		got, gi := multiRows(t, `SELECT ord, allowed, lim, remaining, reset_after_us, retry_after_us, delay_us, next_after_us, deciding
			FROM rl.`+fn+`($1, $2::jsonb, $3, $4)`, key, limits, cost, now)
		require.Equal(t, want, got, "%s %s cost %d, call %d (shadows %v)", fn, limits, cost, call, shadows)
		require.Equal(t, wi, gi, "%s %s cost %d, call %d: deciding (shadows %v)", fn, limits, cost, call, shadows)
		for i, d := range got {
			if op == store.Peek && p.Shadow(i) && !d.Allowed {
				nshadowDeny++
			}
		}
		if op == store.Peek {
			npeek++
			require.Equal(t, before, stored(), "a peek wrote a row")
		}
	}
	t.Logf("%d limits, shadows %v: %d calls, %d peeks, %d shadow rows of a peek would deny", n, shadows, calls, npeek, nshadowDeny)
}

// multiRows runs query (its columns ord, allowed, lim, remaining,
// reset_after_us, retry_after_us, delay_us, next_after_us, deciding) and
// returns its decisions by ord and the deciding ord (-1: none).
func multiRows(t *testing.T, query string, args ...any) ([]core.Decision, int) {
	t.Helper()
	rows, err := db.Query(context.Background(), query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var ds []core.Decision
	deciding := -1
	for rows.Next() {
		var (
			ord int32
			d   core.Decision
			dec bool
		)
		require.NoError(t, rows.Scan(&ord, &d.Allowed, &d.Limit, &d.Remaining, &d.ResetAfter, &d.RetryAfter, &d.Delay, &d.NextAfter, &dec))
		require.Equal(t, len(ds), int(ord), "rows in ord order")
		ds = append(ds, d)
		if dec {
			deciding = int(ord)
		}
	}
	require.NoError(t, rows.Err())
	return ds, deciding
}

// TestShadowMultiBadFlag: a "shadow" that is neither a boolean nor null is
// refused (RL010, naming the limit) by rl_allow_multi, rl_peek_multi and
// rl_settle_multi alike (rl._parse_shadows, migration 19), before anything
// is read or written.
func TestShadowMultiBadFlag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := uniqueKey("shadowbad")
	for _, bad := range []string{`"yes"`, `1`, `"true"`, `[]`, `{}`} {
		limits := `[{"name":"a","algorithm":"fixed","limit":1,"window_us":1000000,"shadow":true},
		            {"name":"b","algorithm":"fixed","limit":1,"window_us":1000000,"shadow":` + bad + `}]`
		for _, call := range []string{
			`SELECT * FROM rl.rl_allow_multi($1, $2::jsonb)`,
			`SELECT * FROM rl.rl_peek_multi($1, $2::jsonb)`,
			`SELECT * FROM rl.rl_peek_multi($1, $2::jsonb, 0)`,
			`SELECT * FROM rl.rl_settle_multi($1, $2::jsonb, 1)`,
		} {
			_, err := db.Exec(ctx, call, key, limits)
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe, "%s with shadow %s", call, bad)
			require.Equal(t, "RL010", pe.Code, "%s with shadow %s", call, bad)
			require.Contains(t, pe.Detail, "limits[1].shadow must be true or false", "%s with shadow %s", call, bad)
		}
	}
	var rows int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM rl.state WHERE key = $1`, key).Scan(&rows))
	require.Zero(t, rows, "a refused call wrote a row")
}
