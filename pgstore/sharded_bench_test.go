package pgstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/pgstore"
	"github.com/rlcore/rl/sql/plproxy/plproxytest"
	"github.com/rlcore/rl/store"
)

// BenchmarkShardedDecide compares pgstore's SQL path on one shard directly,
// through a PL/Proxy router (one shard behind it), and routed by the
// application over two shards with Sharded: a token bucket, cost 1, random
// keys among 10 000, 1 and 8 clients, -benchmem. All databases share the
// local server (docs/scaling.md, "Measured").
//
//	go test -run '^$' -bench BenchmarkShardedDecide -benchmem -benchtime 3s ./pgstore/
func BenchmarkShardedDecide(b *testing.B) {
	one := plproxytest.New(b, 1, 0)
	two := plproxytest.New(b, 2, 0)
	cfg := pgstore.Config{QueueTimeout: -1}
	for _, tc := range []struct {
		name string
		new  func(clients int32) store.Store
	}{
		{"direct", func(n int32) store.Store { return newStore(b, smallPool(b, one.Shards[0], n), cfg) }},
		{"router-1-shard", func(n int32) store.Store { return newStore(b, smallPool(b, one.Router, n), cfg) }},
		{"sharded-2-shards", func(n int32) store.Store {
			s, err := pgstore.NewSharded([]store.Store{
				newStore(b, smallPool(b, two.Shards[0], n), cfg), newStore(b, smallPool(b, two.Shards[1], n), cfg)})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	} {
		for _, clients := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/clients=%d", tc.name, clients), func(b *testing.B) {
				s := tc.new(int32(clients))
				lim := []core.Limit{{Algorithm: core.TokenBucket, Limit: 1_000_000, Window: 1_000_000}}
				names := []string{"default"}
				pol := store.MustPolicy(names, lim...)
				decide := func(r *rand.Rand) {
					if _, _, err := s.Decide(context.Background(), store.Request{Key: fmt.Sprintf("bench:%d", r.IntN(10000)),
						Policy: pol, Cost: 1}, nil); err != nil {
						b.Error(err)
					}
				}
				for i := range clients * 4 { // warm the connections
					decide(rand.New(rand.NewPCG(uint64(i), 1)))
				}
				start := time.Now()
				if clients == 1 {
					r := rand.New(rand.NewPCG(1, 2))
					for b.Loop() {
						decide(r)
					}
				} else {
					b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0)))
					b.RunParallel(func(pb *testing.PB) {
						r := rand.New(rand.NewPCG(rand.Uint64(), 2))
						for pb.Next() {
							decide(r)
						}
					})
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
			})
		}
	}
}
