package migrations_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
)

// TestDecideBatchDifferential: random batches through rl_decide_batch, each
// against the core deciding the same requests one after the other on the
// states the earlier ones left: several requests on one key in a batch, with
// the same limits or overlapping ones, peeks, costs of 0, above the limit
// and invalid, invalid keys, repeated names and limits with an invalid
// window, given request times or the database clock, settles
// (core.SettleAll: refunds and debts), and limits whose parameters change
// between batches (the states carried over). Every row and, after each
// batch, every state row (with the parameters that wrote it) must be the
// core's.
func TestDecideBatchDifferential(t *testing.T) {
	t.Parallel()
	n := 100
	if testing.Short() || raceEnabled {
		n = 40
	}
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runBatchDifferential(t, db, fmt.Sprint("bd", seed), 20260103+seed, n)
		})
	}
}

// batchReq is one request of a random batch.
type batchReq struct {
	key    string
	names  []string
	limits []core.Limit
	cost   int64
	take   bool
	settle bool
	now    int64
}

// runBatchDifferential runs n random batches through rl_decide_batch on
// db (a trusted role's pool), keys prefixed with prefix.
func runBatchDifferential(t *testing.T, db *pgxpool.Pool, prefix string, seed uint64, n int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	keys := []string{prefix + ":a", prefix + ":b", prefix + ":c"}
	_, err := db.Exec(ctx, `DELETE FROM rl.state WHERE key = ANY ($1)`, keys)
	require.NoError(t, err)
	// Each limit name has parameters of its own, changed now and then
	// between batches (a configuration change: the states carry over).
	catalog := map[string]core.Limit{}
	limit := func() core.Limit {
		a := core.Algorithm(1 + rng.IntN(len(core.Algorithms())))
		l := core.Limit{Algorithm: a, Limit: []int64{1, 3, 10, 40}[rng.IntN(4)], Window: []int64{100_000, 1_000_000, 10_000_000}[rng.IntN(3)]}
		if a == core.SlidingLog {
			l.Limit = min(l.Limit, 10)
		}
		if !a.Windowed() && rng.IntN(2) == 0 {
			l.Rate = 1 + rng.Int64N(l.Limit)
		}
		return l
	}
	for _, name := range []string{"x", "y", "z"} {
		catalog[name] = limit()
	}
	policies := [][]string{{"x"}, {"y"}, {"x", "y"}, {"y", "x"}, {"y", "z"}, {"z", "x", "y"}}
	states := map[[2]string]core.State{}
	state := func(k, name string) core.State {
		if s, ok := states[[2]string{k, name}]; ok {
			return s
		}
		return core.State{Log: make([]int64, 0, core.MaxLogLimit)}
	}
	var nreq, nerr, nadm, ndenied, nsettled int
	for b := range n {
		if rng.IntN(8) == 0 {
			catalog[[]string{"x", "y", "z"}[rng.IntN(3)]] = limit()
		}
		var now int64 // about the database clock, which the common call decides at
		require.NoError(t, db.QueryRow(ctx, `SELECT rl._clock()`).Scan(&now))
		now += rng.Int64N(700_000) - 200_000
		common := rng.IntN(3) == 0 // one limit, cost 1, takes, the database clock: the function's common call
		var reqs []batchReq
		for range 1 + rng.IntN(10) {
			r := batchReq{key: keys[rng.IntN(len(keys))], cost: 1, take: true, now: now - rng.Int64N(3)*rng.Int64N(200_000)}
			p := policies[rng.IntN(len(policies))]
			if common {
				p = policies[rng.IntN(2)]
			} else {
				r.cost = []int64{0, 1, 1, 1, 2, 11, -1}[rng.IntN(7)]
				r.take = rng.IntN(5) != 0
				if rng.IntN(6) == 0 {
					r.settle = true
					r.cost = []int64{-3, -1, 0, 1, 2, 5, 45}[rng.IntN(7)]
				}
				switch rng.IntN(40) {
				case 0:
					r.key = ""
				case 1:
					p = []string{"x", "x"}
				}
			}
			r.names = slices.Clone(p)
			for _, name := range p {
				l := catalog[name]
				if !common && rng.IntN(40) == 0 {
					l.Window = 0
				}
				r.limits = append(r.limits, l)
			}
			reqs = append(reqs, r)
		}
		got := decideBatch(t, ctx, db, reqs, common)
		// The core, request after request.
		var rowNow int64
		for _, g := range got {
			if g.now != nil {
				rowNow = *g.now
			}
		}
		i := 0
		for q, r := range reqs {
			where := fmt.Sprintf("batch %d request %d (%s %v cost %d take %v settle %v)", b, q, r.key, r.names, r.cost, r.take, r.settle)
			at := r.now
			if common {
				at = rowNow
			}
			require.Less(t, i, len(got), where)
			g := got[i]
			require.Equal(t, int32(q), g.req, where)
			wantCode := ""
			switch {
			case r.key == "":
				wantCode = "RL011"
			case len(r.names) == 2 && r.names[0] == r.names[1]:
				wantCode = "RL010"
			}
			ss := make([]core.State, len(r.names))
			ds := make([]core.Decision, len(r.names))
			var idx int
			if wantCode == "" {
				for j, name := range r.names {
					ss[j] = state(r.key, name)
					ss[j].Log = slices.Grow(slices.Clone(ss[j].Log), int(core.MaxLogLimit))
				}
				var err error
				switch {
				case r.settle:
					idx, err = core.SettleAll(r.limits, ss, at, r.cost, ds)
				case r.take:
					idx, err = core.TakeAll(r.limits, ss, at, r.cost, ds)
				default:
					idx, err = core.PeekAll(r.limits, ss, at, r.cost, ds)
				}
				var ce core.Error
				if err != nil {
					require.ErrorAs(t, err, &ce)
					wantCode = fmt.Sprintf("RL%03d", int32(ce))
				}
			}
			nreq++
			if wantCode != "" {
				nerr++
				require.NotNil(t, g.code, where)
				require.Equal(t, wantCode, *g.code, "%s: %v", where, g.message)
				require.Nil(t, g.ord, where)
				i++
				continue
			}
			require.Nil(t, g.code, "%s: %v", where, g.message)
			for j := range r.names {
				require.Less(t, i, len(got), where)
				g := got[i]
				require.Equal(t, int32(q), g.req, where)
				require.NotNil(t, g.ord, where)
				require.Equal(t, int32(j), *g.ord, where)
				require.Equal(t, r.names[j], *g.name, where)
				require.Equal(t, at, *g.now, where)
				require.Equal(t, ds[j], g.d, "%s limit %d", where, j)
				require.Equal(t, j == idx, g.deciding, "%s limit %d: deciding", where, j)
				i++
			}
			if !ds[idx].Allowed {
				ndenied++
			}
			if r.settle {
				nsettled++
			}
			if r.settle || r.take && ds[idx].Allowed {
				nadm++
				for j, name := range r.names {
					states[[2]string{r.key, name}] = ss[j]
				}
			}
		}
		require.Len(t, got, i, "batch %d: rows", b)
		// The rows as the core's states (a missing row is a fresh state).
		rows, err := db.Query(ctx, `SELECT key, name, algorithm, t, x, y, log, l, w, r FROM rl.state WHERE key = ANY ($1)`, keys)
		require.NoError(t, err)
		seen := map[[2]string]bool{}
		for rows.Next() {
			var (
				k, name string
				s       core.State
			)
			require.NoError(t, rows.Scan(&k, &name, &s.Algorithm, &s.T, &s.X, &s.Y, &s.Log, &s.L, &s.W, &s.R))
			w := state(k, name)
			require.True(t, s.Algorithm == w.Algorithm && s.T == w.T && s.X == w.X && s.Y == w.Y && slices.Equal(s.Log, w.Log) &&
				s.L == w.L && s.W == w.W && s.R == w.R,
				"batch %d: row %s/%s: %+v, want %+v", b, k, name, s, w)
			seen[[2]string{k, name}] = true
		}
		require.NoError(t, rows.Err())
		for kn, s := range states {
			require.True(t, seen[kn] || s.Algorithm == 0, "batch %d: row %v missing", b, kn)
		}
	}
	t.Logf("%d batches, %d requests: %d written (%d settles), %d denied, %d errors", n, nreq, nadm, nsettled, ndenied, nerr)
}

// batchRow is one row of rl_decide_batch.
type batchRow struct {
	req           int32
	ord           *int32
	name          *string
	d             core.Decision
	deciding      bool
	now           *int64
	code, message *string
}

// decideBatch sends reqs to rl_decide_batch: with common, as the function's
// common call (no costs, counts, times, take or settle flags: cost 1, one
// limit, takes, the database clock), else with every array.
func decideBatch(t *testing.T, ctx context.Context, db *pgxpool.Pool, reqs []batchReq, common bool) []batchRow {
	var (
		keys              []string
		names             []string
		algs              []int32
		lims, wins, rates []int64
		costs, nows       []int64
		counts            []int32
		takes, settles    []bool
	)
	for _, r := range reqs {
		keys, costs, nows, counts, takes = append(keys, r.key), append(costs, r.cost), append(nows, r.now), append(counts, int32(len(r.limits))), append(takes, r.take)
		settles = append(settles, r.settle)
		names = append(names, r.names...)
		for _, l := range r.limits {
			algs, lims, wins, rates = append(algs, int32(l.Algorithm)), append(lims, l.Limit), append(wins, l.Window), append(rates, l.Rate)
		}
	}
	args := []any{keys, names, algs, lims, wins, rates, costs, counts, nows, takes, settles}
	if common {
		args = append(args[:6], nil, nil, nil, nil, nil)
	}
	rows, err := db.Query(ctx, `SELECT req, ord, name, allowed, lim, remaining, reset_after_us, retry_after_us, delay_us,
			deciding, now_us, error_code, error_message, next_after_us
		FROM rl.rl_decide_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, args...)
	require.NoError(t, err)
	defer rows.Close()
	var out []batchRow
	for rows.Next() {
		var (
			r                        batchRow
			lim, rem, ra, rt, dl, na *int64
		)
		require.NoError(t, rows.Scan(&r.req, &r.ord, &r.name, &r.d.Allowed, &lim, &rem, &ra, &rt, &dl, &r.deciding, &r.now,
			&r.code, &r.message, &na))
		if lim != nil {
			r.d.Limit, r.d.Remaining, r.d.ResetAfter, r.d.RetryAfter, r.d.Delay, r.d.NextAfter = *lim, *rem, *ra, *rt, *dl, *na
		}
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}
