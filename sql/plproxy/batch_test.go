package plproxy_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/plproxy/plproxytest"
)

type batchCall struct {
	keys              []*string
	names             []string
	algs              []int32
	lims, wins, rates []int64
	costs             []int64
	counts            []int32
	nows              []int64
	takes             []bool
}

func randomBatch(r *rand.Rand, now int64) batchCall {
	var b batchCall
	n := 1 + r.IntN(20)
	for range n {
		k := fmt.Sprintf("batch:%d", r.IntN(30))
		switch r.IntN(25) {
		case 0:
			b.keys = append(b.keys, nil) // RL011
		case 1:
			e := ""
			b.keys = append(b.keys, &e) // RL011
		default:
			b.keys = append(b.keys, &k)
		}
		c := 1 + r.IntN(3)
		if r.IntN(25) == 0 {
			c = 0 // RL010
		}
		for j := range c {
			name := fmt.Sprintf("l%d", j)
			if r.IntN(30) == 0 {
				name = "l0" // a duplicate: RL010
			}
			b.names = append(b.names, name)
			b.algs = append(b.algs, int32(1+r.IntN(len(core.Algorithms()))))
			b.lims = append(b.lims, int64(1+r.IntN(10)))
			b.wins = append(b.wins, int64(1+r.IntN(5))*1_000_000)
			b.rates = append(b.rates, 0)
		}
		b.counts = append(b.counts, int32(c))
		b.costs = append(b.costs, int64(r.IntN(3)))
		b.nows = append(b.nows, now+int64(r.IntN(1000)))
		b.takes = append(b.takes, r.IntN(5) != 0)
	}
	return b
}

func runBatch(t *testing.T, p *pgxpool.Pool, b batchCall) []string {
	rows, err := p.Query(ctx, "SELECT b::text FROM rl.rl_decide_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) b",
		b.keys, b.names, b.algs, b.lims, b.wins, b.rates, b.costs, b.counts, b.nows, b.takes)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// TestBatch: rl_decide_batch through the router returns exactly what it
// returns on one node, row for row (requests on both shards, several limits
// each, peeks, costs 0, invalid requests), round after round as the states
// evolve; and a malformed call fails whole, with the shard's error.
func TestBatch(t *testing.T) {
	t.Parallel() // a cluster of its own (plproxytest.New)
	c := plproxytest.New(t, 2, 0)
	single := pgtest.NewMigrated(t)
	router, one := pool(t, c.Router, 2), pool(t, single, 2)
	r := rand.New(rand.NewPCG(7, 8))
	now := t0
	seen := map[string]int{}
	for round := range 40 {
		b := randomBatch(r, now)
		want := runBatch(t, one, b)
		require.Equal(t, want, runBatch(t, router, b), "round %d", round)
		for _, row := range want {
			for _, what := range []string{"RL010", "RL011", ",t,", ",f,"} {
				if strings.Contains(row, what) {
					seen[what]++
				}
			}
		}
		now += 700_000
	}
	for _, what := range []string{"RL010", "RL011", ",t,", ",f,"} {
		require.Positive(t, seen[what], "no row with %s", what)
	}
	for i, s := range c.Shards {
		require.Positive(t, count(t, s, "SELECT count(*) FROM rl.state WHERE key LIKE 'batch:%'"), "shard %d", i)
	}
	for _, p := range []*pgxpool.Pool{one, router} {
		_, err := p.Exec(ctx, "SELECT * FROM rl.rl_decide_batch('{a}', '{x,y}', '{4,4}', '{1,1}', '{1,1}', '{0,0}')")
		requireCode(t, err, "RL010")
		var n int
		require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM rl.rl_decide_batch('{}', '{}', '{}', '{}', '{}', '{}')").Scan(&n))
		require.Zero(t, n)
	}
}
