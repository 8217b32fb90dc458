package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
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
// as store.Policy.Decide peeks (store.Peek), and rl_settle_multi and
// rl_decide_batch's settle with shadow flags settle as Decide settles
// (store.Settle: the enforced limits all or nothing, then each shadow limit
// alone): random policies of enforced and shadow limits (some of shadow
// limits only, "shadow" false, null or missing on the enforced ones),
// random takes through rl_allow_multi and settles through rl_settle_multi
// or rl_decide_batch moving the states, and peeks of random costs between
// them. Every row (each decision field), the deciding index and every
// stored state must be Decide's, and a peek must leave the rows as they
// were.
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
		a := core.Algorithm(1 + rng.IntN(len(core.Algorithms())))
		l := core.Limit{Algorithm: a, Limit: []int64{1, 2, 3, 5, 8}[rng.IntN(5)], Window: []int64{1_000_000, 10_000_000, 60_000_000}[rng.IntN(3)]}
		if !a.Windowed() && rng.IntN(2) == 0 {
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
	algs, lims, wins, rates := make([]int32, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, l := range ls {
		algs[i], lims[i], wins[i], rates[i] = int32(l.Algorithm), l.Limit, l.Window, l.Rate
	}
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
		var (
			got []core.Decision
			gi  int
		)
		if op == store.Settle && rng.IntN(2) == 0 { // a settle as a batch of one, its shadow flags set
			fn = "rl_decide_batch"
			got, gi = multiRows(t, `SELECT ord, allowed, lim, remaining, reset_after_us, retry_after_us, delay_us, next_after_us, deciding
				FROM rl.rl_decide_batch(ARRAY[$1], $2, $3, $4, $5, $6, ARRAY[$7::bigint], ARRAY[$8::integer], ARRAY[$9::bigint], NULL, '{true}', $10)`,
				key, names, algs, lims, wins, rates, cost, n, now, shadow)
		} else {
			got, gi = multiRows(t, `SELECT ord, allowed, lim, remaining, reset_after_us, retry_after_us, delay_us, next_after_us, deciding
				FROM rl.`+fn+`($1, $2::jsonb, $3, $4)`, key, limits, cost, now)
		}
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
		requireStates(t, key, names, ss, fmt.Sprintf("%s %s cost %d, call %d", fn, limits, cost, call))
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
// rl_settle_multi alike (rl._read_limits; rl._parse_shadows in migrations
// 19 and 20), before anything is read or written.
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

// TestShadowSettle: a settle of a policy with shadow limits (migration 19)
// through rl_settle_multi ("shadow": true) and through rl_decide_batch's
// settle with shadow flags (a request alone, and beside another request in
// one call) decides as store.Policy.Decide with store.Settle: the enforced
// limits all or nothing, then each shadow limit alone; a shadow limit whose
// row is corrupt is left as it was, its row allowed false with its limit
// and zeros, and fails nothing; with only shadow limits the settled one
// with the fewest remaining decides (the last one when none was settled).
// Every row, the deciding index and every stored state afterwards must be
// Decide's. An enforced limit's corrupt row fails the call (RL008, at its
// own index) and changes nothing; the call's own errors come first, at
// index 0, a limit's parameters next.
func TestShadowSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names := []string{"a", "b", "c"}
	ls := []core.Limit{
		{Algorithm: core.FixedWindow, Limit: 5, Window: 3_600_000_000},
		{Algorithm: core.GCRA, Limit: 3, Window: 1_000_000, Rate: 2},
		{Algorithm: core.SlidingLog, Limit: 4, Window: 60_000_000},
	}
	// A corrupt row: a GCRA state whose remainder is beyond any rate.
	corrupt := core.State{Algorithm: core.GCRA, T: 2_000_000, X: core.MaxLimit + 1, Y: 1_000_000}
	const now = int64(1_500_000)
	for _, c := range []struct {
		shadows []string
		corrupt []int
		delta   int64
	}{
		{[]string{"b"}, nil, 3},
		{[]string{"b"}, []int{1}, 3},
		{[]string{"b"}, []int{1}, -1},
		{[]string{"b"}, []int{1}, 0},
		{[]string{"b", "c"}, []int{2}, 9},
		{[]string{"a", "b", "c"}, nil, 2},
		{[]string{"a", "b", "c"}, []int{1}, 2},
		{[]string{"a", "b", "c"}, []int{0, 1}, -4},
		{[]string{"a", "b", "c"}, []int{0, 1, 2}, 1},
		{[]string{"c"}, []int{1, 2}, 1}, // an enforced limit's corrupt row: refused
		{[]string{"a", "c"}, []int{1}, 1},
		{[]string{"b"}, nil, core.MaxCost}, // a debt capped on the enforced limits, charged on the shadow one
	} {
		p, err := store.MustPolicy(names, ls...).WithShadow(c.shadows...)
		require.NoError(t, err)
		flags := make([]bool, len(names))
		elems := make([]string, len(names))
		algs, lims, wins, rates := make([]int32, len(ls)), make([]int64, len(ls)), make([]int64, len(ls)), make([]int64, len(ls))
		for i, l := range ls {
			flags[i] = p.Shadow(i)
			elems[i] = fmt.Sprintf(`{"name":%q,"algorithm":%d,"limit":%d,"window_us":%d,"rate":%d,"shadow":%t}`,
				names[i], l.Algorithm, l.Limit, l.Window, l.Rate, flags[i])
			algs[i], lims[i], wins[i], rates[i] = int32(l.Algorithm), l.Limit, l.Window, l.Rate
		}
		limits := "[" + strings.Join(elems, ",") + "]"
		for _, via := range []string{"rl_settle_multi", "rl_decide_batch", "rl_decide_batch beside another"} {
			what := fmt.Sprintf("%s shadows %v corrupt %v delta %d", via, c.shadows, c.corrupt, c.delta)
			key := uniqueKey("shadowsettle")
			// States from a take, then the corrupt rows.
			ss := make([]core.State, len(names))
			for i := range ss {
				ss[i].Log = make([]int64, 0, core.MaxLogLimit)
			}
			_, err := p.Decide(nil, store.Take, ss, 1_000_000, 2, make([]core.Decision, len(names)))
			require.NoError(t, err)
			_, err = db.Exec(ctx, `SELECT * FROM rl.rl_allow_multi($1, $2::jsonb, 2, 1000000)`, key, limits)
			require.NoError(t, err)
			for _, k := range c.corrupt {
				_, err := db.Exec(ctx, `INSERT INTO rl.state AS s (key, name, algorithm, t, x, y) VALUES ($1, $2, $3, $4, $5, $6)
					ON CONFLICT (key, name) DO UPDATE SET algorithm = $3, t = $4, x = $5, y = $6, log = '{}', l = 0, w = 0, r = 0`,
					key, names[k], int32(corrupt.Algorithm), corrupt.T, corrupt.X, corrupt.Y)
				require.NoError(t, err)
				ss[k] = corrupt
			}
			requireStates(t, key, names, ss, what+": before")
			want := make([]core.Decision, len(names))
			wi, werr := p.Decide(nil, store.Settle, ss, now, c.delta, want)

			var (
				got []core.Decision
				gi  int
				pe  *pgconn.PgError
			)
			switch via {
			case "rl_settle_multi":
				rows, qerr := db.Query(ctx, `SELECT ord, allowed, lim, remaining, reset_after_us, retry_after_us, delay_us, next_after_us, deciding
					FROM rl.rl_settle_multi($1, $2::jsonb, $3, $4)`, key, limits, c.delta, now)
				require.NoError(t, qerr)
				got, gi, err = scanMulti(rows)
				if err != nil {
					require.ErrorAs(t, err, &pe, what)
				}
			default:
				// The request (index 0, or 1 beside a take of another key).
				keys, ns := []string{key}, names
				ba, bl, bw, br := algs, lims, wins, rates
				costs, counts, settles, shs := []int64{c.delta}, []int32{3}, []bool{true}, flags
				req := int32(0)
				if via != "rl_decide_batch" {
					req = 1
					keys = []string{uniqueKey("shadowsettle-other"), key}
					ns = append([]string{"x"}, names...)
					ba, bl = append([]int32{1}, algs...), append([]int64{2}, lims...)
					bw, br = append([]int64{1_000_000}, wins...), append([]int64{0}, rates...)
					costs, counts, settles, shs = []int64{1, c.delta}, []int32{1, 3}, []bool{false, true}, append([]bool{false}, flags...)
				}
				rows, qerr := db.Query(ctx, `SELECT req, ord, allowed, lim, remaining, reset_after_us, retry_after_us, delay_us, next_after_us, deciding, error_code, error_message
					FROM rl.rl_decide_batch($1, $2, $3, $4, $5, $6, $7, $8, array_fill($9::bigint, ARRAY[cardinality($1::text[])]), NULL, $10, $11)`,
					keys, ns, ba, bl, bw, br, costs, counts, now, settles, shs)
				require.NoError(t, qerr)
				gi = -1
				for rows.Next() {
					var (
						r, ord    *int32
						d         core.Decision
						allowed   *bool
						lim       *int64
						rem, ra   *int64
						rt, dl    *int64
						na        *int64
						dec       *bool
						code, msg *string
					)
					require.NoError(t, rows.Scan(&r, &ord, &allowed, &lim, &rem, &ra, &rt, &dl, &na, &dec, &code, &msg))
					if *r != req {
						require.Nil(t, code, "%s: the other request", what)
						continue
					}
					if code != nil {
						err = &pgconn.PgError{Code: *code, Message: *msg}
						pe = err.(*pgconn.PgError)
						continue
					}
					d = core.Decision{Allowed: *allowed, Limit: *lim, Remaining: *rem, ResetAfter: *ra, RetryAfter: *rt, Delay: *dl, NextAfter: *na}
					require.Equal(t, len(got), int(*ord), what)
					got = append(got, d)
					if *dec {
						gi = int(*ord)
					}
				}
				require.NoError(t, rows.Err())
			}
			if werr != nil {
				require.NotNil(t, pe, "%s: want %v", what, werr)
				require.Equal(t, fmt.Sprintf("RL%03d", int(werr.(core.Error))), pe.Code, what)
				if via == "rl_settle_multi" {
					require.Equal(t, fmt.Sprintf("limit index %d (name %q)", wi, names[wi]), strings.ReplaceAll(pe.Detail, "'", `"`), what)
				} else {
					require.Contains(t, pe.Message, fmt.Sprintf("(limit index %d, name '%s')", wi, names[wi]), what)
				}
				// Nothing written: the states as they were.
				_, _ = p.Decide(nil, store.Peek, ss, now, 0, want)
				requireStates(t, key, names, ss, what+": after a refused settle")
				continue
			}
			require.Nil(t, pe, what)
			require.Equal(t, want, got, what)
			require.Equal(t, wi, gi, what+": deciding")
			for _, k := range c.corrupt {
				require.Equal(t, core.Decision{Limit: ls[k].Limit}, got[k], what+": a corrupt shadow limit")
			}
			requireStates(t, key, names, ss, what+": after")
		}
	}
}

// scanMulti reads rl.multi_decision rows (ord, allowed, lim, remaining,
// reset_after_us, retry_after_us, delay_us, next_after_us, deciding): the
// decisions by ord and the deciding ord, or the query's error.
func scanMulti(rows pgx.Rows) ([]core.Decision, int, error) {
	defer rows.Close()
	var ds []core.Decision
	deciding := -1
	for rows.Next() {
		var (
			ord int32
			d   core.Decision
			dec bool
		)
		if err := rows.Scan(&ord, &d.Allowed, &d.Limit, &d.Remaining, &d.ResetAfter, &d.RetryAfter, &d.Delay, &d.NextAfter, &dec); err != nil {
			return nil, 0, err
		}
		ds = append(ds, d)
		if dec {
			deciding = int(ord)
		}
	}
	return ds, deciding, rows.Err()
}

// requireStates requires key's rows to hold ss, limit by limit (a missing
// row: the zero state).
func requireStates(t *testing.T, key string, names []string, ss []core.State, what string) {
	t.Helper()
	for i, name := range names {
		var got core.State
		var log []int64
		err := db.QueryRow(context.Background(), `SELECT algorithm, t, x, y, log, l, w, r FROM rl.state WHERE key = $1 AND name = $2`, key, name).
			Scan(&got.Algorithm, &got.T, &got.X, &got.Y, &log, &got.L, &got.W, &got.R)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		require.NoError(t, err, what)
		want := ss[i]
		require.Equal(t, []any{want.Algorithm, want.T, want.X, want.Y, want.L, want.W, want.R, len(want.Log)},
			[]any{got.Algorithm, got.T, got.X, got.Y, got.L, got.W, got.R, len(log)}, "%s: %s", what, name)
		for j := range log {
			require.Equal(t, want.Log[j], log[j], "%s: %s log[%d]", what, name, j)
		}
	}
}

// TestSettleCapped: a debt too large for a state is capped, never refused
// (migration 19; RL006 before): a fixed window's count at MaxStateValue.
func TestSettleCapped(t *testing.T) {
	t.Parallel()
	var x int64
	require.NoError(t, db.QueryRow(context.Background(), `SELECT x FROM rl.decide(1, 5, 1000, 0, 1, 0, 4611686018427387000, 0, '{}', 0, 1099511627776, 'settle', 5, 1000, 0)`).Scan(&x))
	require.Equal(t, core.MaxStateValue, x)
}

// TestShadowSettleErrors: the errors of a settle with shadow limits
// (migration 19), through rl_settle_multi (raised, the limit in the
// detail) and rl_decide_batch (the request's error row): the call's own
// first, at index 0 (its time, then its delta), whatever the limits and
// states; then a limit's parameters, at its index; then an enforced limit's
// corrupt state, at its index; a shadow limit's corrupt state never.
func TestShadowSettleErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := uniqueKey("shadowsettleerr")
	for _, name := range []string{"b", "c"} { // b (a shadow limit) and c corrupt
		_, err := db.Exec(ctx, `INSERT INTO rl.state (key, name, algorithm, t, x, y) VALUES ($1, $2, 6, 2000000, $3, 1000000)`,
			key, name, core.MaxLimit+1)
		require.NoError(t, err)
	}
	limit := func(name string, lim int64, shadow bool) string {
		return fmt.Sprintf(`{"name":%q,"algorithm":"fixed","limit":%d,"window_us":1000000,"shadow":%t}`, name, lim, shadow)
	}
	for _, c := range []struct {
		limits       []string
		now, delta   int64
		code, detail string
	}{
		{[]string{limit("a", 0, false), limit("b", 1, true)}, -1, 1, "RL007", "limit index 0 (name 'a')"},
		{[]string{limit("a", 1, false), limit("b", 1, true), limit("d", 0, false)}, 1, core.MaxCost + 1, "RL006", "limit index 0 (name 'a')"},
		{[]string{limit("a", 1, false), limit("b", 1, true), limit("d", 0, true)}, 1, 1, "RL002", "limit index 2 (name 'd')"},
		{[]string{limit("a", 1, true), limit("b", 1, true), limit("c", 1, false)}, 1, 1, "RL008", "limit index 2 (name 'c')"},
	} {
		limits := "[" + strings.Join(c.limits, ",") + "]"
		_, err := db.Exec(ctx, `SELECT * FROM rl.rl_settle_multi($1, $2::jsonb, $3, $4)`, key, limits, c.delta, c.now)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, limits)
		require.Equal(t, c.code, pe.Code, "%s: %s", limits, pe.Message)
		require.Equal(t, c.detail, pe.Detail, limits)

		p, err := db.Query(ctx, `SELECT array_agg(e ->> 'name' ORDER BY o), array_agg(rl._alg(e ->> 'algorithm') ORDER BY o),
			array_agg((e ->> 'limit')::bigint ORDER BY o), array_agg((e ->> 'window_us')::bigint ORDER BY o),
			array_agg(0::bigint ORDER BY o), array_agg((e ->> 'shadow')::boolean ORDER BY o)
			FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS u(e, o)`, limits)
		require.NoError(t, err)
		var (
			names             []string
			algs              []int32
			lims, wins, rates []int64
			shadows           []bool
			code, msg         *string
		)
		require.True(t, p.Next())
		require.NoError(t, p.Scan(&names, &algs, &lims, &wins, &rates, &shadows))
		p.Close()
		require.NoError(t, db.QueryRow(ctx, `SELECT error_code, error_message FROM rl.rl_decide_batch(ARRAY[$1], $2, $3, $4, $5, $6,
			ARRAY[$7::bigint], ARRAY[$8::integer], ARRAY[$9::bigint], NULL, '{true}', $10)`,
			key, names, algs, lims, wins, rates, c.delta, len(names), c.now, shadows).Scan(&code, &msg))
		require.NotNil(t, code, limits)
		require.Equal(t, c.code, *code, "%s: %s", limits, *msg)
		i, name, _ := strings.Cut(strings.TrimPrefix(c.detail, "limit index "), " (name ")
		require.True(t, strings.HasSuffix(*msg, fmt.Sprintf("(limit index %s, name %s", i, strings.TrimSuffix(name, ")"))+")"), "%s: %s", limits, *msg)
	}
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM rl.state WHERE key = $1 AND x = $2`, key, core.MaxLimit+1).Scan(&n))
	require.Equal(t, 2, n, "a refused settle changed a row")
}
