package rl_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/wasm"
)

// Benchmarks of Limiter.Allow over the default in-memory store (memstore).
//
//	go test -run '^$' -bench Allow -benchmem -count 5 | benchstat -
//
// Names are key=value so benchstat groups them:
//
//	BenchmarkAllow/keys=1/serial          one hot key, default clock (CoarseClock), all admitted
//	BenchmarkAllow/keys=10000/parallel    10,000 keys, b.RunParallel
//	BenchmarkAllow/clock=system/...       the same with rl.SystemClock (time.Now per call)
//	BenchmarkAllow/deny=most/keys=1/...   one hot key under 100/s: nearly every call denied
//	BenchmarkAllow/decider=wasm/...       the same as the first, deciding with the WebAssembly core
//	BenchmarkAllow/walk=disjoint/keys=10000/parallel
//	                                      each goroutine walks a part of the keys of its own, where
//	                                      keys=10000/parallel has every goroutine walk all the keys
//	                                      (from its own offset, as bench/peers does): beside it, what
//	                                      cores taking keys' state lines from one another costs
//
// The admit/op metric is the fraction of calls admitted. The targets are
// 0 allocs/op, and on 10,000 keys parallel at most 0.55× serial on 2 cores
// (bench/peers/run.sh compares with other limiters).

// benchKeys returns n precomputed keys.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

func newBenchLimiter(b *testing.B, p *rl.Policy, clock rl.Clock, d core.Decider) *rl.Limiter {
	s := memstore.New(&memstore.Config{Clock: clock, Decider: d})
	b.Cleanup(func() { s.Close() })
	l, err := rl.New(rl.Config{Store: s, Policy: p, Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// admitAll is a token bucket of 1e9 per second: every call is admitted, so
// the admission path (state written) is what is measured.
var admitAll = rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 1_000_000_000, Window: time.Second})

// denyMost is a token bucket of 100 per second: on a hot key nearly every
// call is denied (state read, not written).
var denyMost = rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 100, Window: time.Second})

func BenchmarkAllow(b *testing.B) {
	type variant struct {
		prefix string
		policy *rl.Policy
		clock  rl.Clock
		keys   []int
		wasm   bool
		serial bool // run the serial benchmark too
		split  bool // parallel: each goroutine its own keys
	}
	variants := []variant{
		{"", admitAll, nil, []int{1, 10_000}, false, true, false},
		{"clock=system/", admitAll, rl.SystemClock, []int{1, 10_000}, false, true, false},
		{"deny=most/", denyMost, nil, []int{1}, false, true, false},
		{"decider=wasm/", admitAll, nil, []int{1, 10_000}, true, true, false},
		{"walk=disjoint/", admitAll, nil, []int{10_000}, false, false, true},
	}
	pool, err := wasm.New(context.Background(), wasm.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close(context.Background())
	for _, v := range variants {
		for _, nkeys := range v.keys {
			keys := benchKeys(nkeys)
			name := v.prefix + "keys=" + strconv.Itoa(nkeys)
			var d core.Decider
			if v.wasm {
				d = pool
			}
			if v.serial {
				b.Run(name+"/serial", func(b *testing.B) {
					l := newBenchLimiter(b, v.policy, v.clock, d)
					benchSerial(b, l, keys)
				})
			}
			b.Run(name+"/parallel", func(b *testing.B) {
				l := newBenchLimiter(b, v.policy, v.clock, d)
				benchParallel(b, l, keys, v.split)
			})
		}
	}
}

// warmKeys makes every key's entry exist, so the loops measure warm keys.
func warmKeys(b *testing.B, l *rl.Limiter, keys []string) {
	ctx := context.Background()
	for _, k := range keys {
		if _, err := l.Allow(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
}

func benchSerial(b *testing.B, l *rl.Limiter, keys []string) {
	ctx := context.Background()
	warmKeys(b, l, keys)
	admitted, i := 0, 0
	b.ReportAllocs()
	for b.Loop() {
		r, err := l.Allow(ctx, keys[i])
		if err != nil {
			b.Fatal(err)
		}
		if r.Allowed {
			admitted++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	b.ReportMetric(float64(admitted)/float64(b.N), "admit/op")
}

func benchParallel(b *testing.B, l *rl.Limiter, keys []string, split bool) {
	ctx := context.Background()
	warmKeys(b, l, keys)
	g := int64(runtime.GOMAXPROCS(0))
	var admitted, calls, worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine walks the keys (or its part of them, split)
		// from its own offset.
		w := worker.Add(1)
		lo, hi := 0, len(keys)
		if split && int64(len(keys)) >= g {
			lo, hi = int((w-1)%g)*len(keys)/int(g), int((w-1)%g+1)*len(keys)/int(g)
		}
		i := lo + int(w*7919)%(hi-lo)
		n, a := int64(0), int64(0)
		for pb.Next() {
			r, err := l.Allow(ctx, keys[i])
			if err != nil {
				b.Error(err)
				return
			}
			if r.Allowed {
				a++
			}
			n++
			if i++; i == hi {
				i = lo
			}
		}
		admitted.Add(a)
		calls.Add(n)
	})
	if n := calls.Load(); n > 0 {
		b.ReportMetric(float64(admitted.Load())/float64(n), "admit/op")
	}
}
