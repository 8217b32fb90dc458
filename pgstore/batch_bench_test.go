package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/pgstore"
	"github.com/rlcore/rl/store"
)

// runN runs op b.N times from g goroutines, recording latencies.
func runN(b *testing.B, g int, op func(i int) error) {
	var lat latencies
	var errs, seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := int(seq.Add(1)) - 1; i < b.N; i = int(seq.Add(1)) - 1 {
				t := time.Now()
				if err := op(i); err != nil {
					errs.Add(1)
				}
				mine = append(mine, time.Since(t))
			}
			lat.add(mine)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if errs.Load() > 0 {
		b.Fatalf("%d errors", errs.Load())
	}
	lat.report(b, elapsed, b.N)
}

// BenchmarkBatched measures pgstore.Batched: both paths, both durabilities,
// 10,000 keys and one hot key, 1 (serial), 16 and 64 goroutines over a pool
// of 16 connections; mean batch size reported. bench/pgpeers prints the
// same beside the floors and the peers in one table.
func BenchmarkBatched(b *testing.B) {
	cfg, err := pgxpool.ParseConfig(database(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = fmt.Sprintf("bbench-%d", i)
	}
	lim := []core.Limit{{Algorithm: core.TokenBucket, Limit: 1 << 30, Window: 1_000_000}}
	names := []string{"default"}
	pol := store.MustPolicy(names, lim...)
	// Every key's row exists before timing (all modes share the rows).
	warm := newBatched(b, pool, pgstore.Config{QueueTimeout: -1}, pgstore.BatchConfig{})
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(keys)); i = next.Add(1) - 1 {
				if _, _, err := warm.Decide(context.Background(), store.Request{Key: keys[i], Policy: pol, Cost: 1}, nil); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, mode := range []struct {
		name string
		m    pgstore.Mode
	}{{"sql", pgstore.ModeSQL}, {"go", pgstore.ModeGo}} {
		for _, dur := range []struct {
			name string
			d    pgstore.Durability
		}{{"durable", pgstore.DurabilityDurable}, {"fast", pgstore.DurabilityFast}} {
			s := newBatched(b, pool, pgstore.Config{Mode: mode.m, Durability: dur.d, QueueTimeout: -1}, pgstore.BatchConfig{})
			for _, nkeys := range []int{10000, 1} {
				for _, g := range []int{1, 16, 64} {
					b.Run(fmt.Sprintf("mode=%s/durability=%s/keys=%d/goroutines=%d", mode.name, dur.name, nkeys, g), func(b *testing.B) {
						ctx := context.Background()
						before := s.Stats()
						runN(b, g, func(i int) error {
							_, _, err := s.Decide(ctx, store.Request{Key: keys[i%nkeys], Policy: pol, Cost: 1}, nil)
							return err
						})
						after := s.Stats()
						if n := after.Batches - before.Batches; n > 0 {
							b.ReportMetric(float64(after.Requests-before.Requests)/float64(n), "requests/batch")
						}
					})
				}
			}
		}
	}
}
