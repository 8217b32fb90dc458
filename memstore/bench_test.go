package memstore_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
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

// BenchmarkDecideParallel measures the store alone under b.RunParallel
// (GOMAXPROCS goroutines), a token bucket that admits every call:
//
//	walk=shared     every goroutine walks all the keys, each from its own
//	                offset (as rl's and the peers' parallel benchmarks do):
//	                each decision takes its key's line from the core that
//	                last decided it
//	walk=disjoint   each goroutine walks a part of the keys of its own: no
//	                line is written by two cores
//
// On 10,000 keys, shared beside disjoint is what cores handing keys' lines
// to one another costs on the machine; disjoint beside BenchmarkDecide
// (serial) is the store's scaling with nothing shared but what lookups
// read.
//
//	go test ./memstore -run '^$' -bench 'Decide' -benchmem -count 5
func BenchmarkDecideParallel(b *testing.B) {
	p, err := store.NewPolicy([]string{"default"}, []core.Limit{{Algorithm: core.TokenBucket, Limit: 1_000_000_000, Window: 1_000_000}})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		keys     int
		disjoint bool
	}{{1, false}, {10_000, false}, {10_000, true}} {
		keys := make([]string, c.keys)
		for i := range keys {
			keys[i] = "user:" + strconv.Itoa(i)
		}
		walk := "shared"
		if c.disjoint {
			walk = "disjoint"
		}
		b.Run("keys="+strconv.Itoa(c.keys)+"/walk="+walk, func(b *testing.B) {
			s := memstore.New(&memstore.Config{SweepInterval: -1})
			defer s.Close()
			ctx := context.Background()
			now := time.Now().UnixMicro()
			for _, k := range keys {
				if _, _, err := s.Decide(ctx, store.Request{Policy: p, Key: k, Now: now, Cost: 1}, nil); err != nil {
					b.Fatal(err)
				}
			}
			g := int64(runtime.GOMAXPROCS(0))
			var worker atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := worker.Add(1) - 1
				lo, hi := 0, len(keys)
				if c.disjoint && int64(len(keys)) >= g {
					lo, hi = int(w%g)*len(keys)/int(g), int(w%g+1)*len(keys)/int(g)
				}
				i := lo + int((w+1)*7919)%(hi-lo) // each goroutine from its own offset
				for pb.Next() {
					_, d, err := s.Decide(ctx, store.Request{Policy: p, Key: keys[i], Now: now, Cost: 1}, nil)
					if err != nil || !d.Allowed {
						b.Error(d, err)
						return
					}
					if i++; i == hi {
						i = lo
					}
				}
			})
		})
	}
}
