package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/store"
)

// BenchmarkDecide measures the store alone (no limiter): one warm key, or
// 10,000, a token bucket that admits every call.
//
//	go test ./memstore -run '^$' -bench Decide -benchmem
func BenchmarkDecide(b *testing.B) {
	p, err := store.NewPolicy([]string{"default"}, []core.Limit{{Algorithm: core.TokenBucket, Limit: 1_000_000_000, Window: 1_000_000}})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 10_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "user:" + strconv.Itoa(i)
		}
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			s := memstore.New(&memstore.Config{SweepInterval: -1})
			defer s.Close()
			ctx := context.Background()
			now := time.Now().UnixMicro()
			for _, k := range keys {
				if _, _, err := s.Decide(ctx, store.Request{Policy: p, Key: k, Now: now, Cost: 1}, nil); err != nil {
					b.Fatal(err)
				}
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				_, d, err := s.Decide(ctx, store.Request{Policy: p, Key: keys[i], Now: now, Cost: 1}, nil)
				if err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
	}
}
