package pgstore_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/pgstore"
	"github.com/rlcore/rl/store"
)

// latencies collects per-call latencies from many goroutines.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(ds []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, ds...)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B, elapsed time.Duration, n int) {
	slices.Sort(l.all)
	if len(l.all) == 0 {
		return
	}
	q := func(p float64) float64 { return float64(l.all[int(p*float64(len(l.all)-1))].Microseconds()) }
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(float64(n)/elapsed.Seconds(), "decisions/s")
}

// run runs op serially or with 16 goroutines, recording latencies.
func run(b *testing.B, parallel bool, op func(i int) error) {
	var lat latencies
	var errs atomic.Int64
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if parallel {
		b.SetParallelism(max(1, 16/runtimeProcs()))
		b.RunParallel(func(pb *testing.PB) {
			var mine []time.Duration
			for pb.Next() {
				i := int(seq.Add(1))
				t := time.Now()
				if err := op(i); err != nil {
					errs.Add(1)
				}
				mine = append(mine, time.Since(t))
			}
			lat.add(mine)
		})
	} else {
		mine := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t := time.Now()
			if err := op(i); err != nil {
				errs.Add(1)
			}
			mine = append(mine, time.Since(t))
		}
		lat.add(mine)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if errs.Load() > 0 {
		b.Fatalf("%d errors", errs.Load())
	}
	lat.report(b, elapsed, b.N)
}

func benchPool(b *testing.B) *pgxpool.Pool {
	return pgtest.Pool(b, database(b))
}

// BenchmarkFloor measures what a decision cannot beat: a round trip, and a
// one-statement upsert of a row (durable and with synchronous_commit off).
func BenchmarkFloor(b *testing.B) {
	pool := benchPool(b)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS bench_upsert (k text PRIMARY KEY, n bigint NOT NULL)")
	if err != nil {
		b.Fatal(err)
	}
	for _, parallel := range []bool{false, true} {
		name := map[bool]string{false: "serial", true: "parallel=16"}[parallel]
		b.Run("op=select1/"+name, func(b *testing.B) {
			run(b, parallel, func(int) error {
				var one int
				return pool.QueryRow(ctx, "SELECT 1").Scan(&one)
			})
		})
		for _, fast := range []bool{false, true} {
			q := "INSERT INTO bench_upsert SELECT $1, 1 ON CONFLICT (k) DO UPDATE SET n = bench_upsert.n + 1"
			d := "durable"
			if fast { // the same statement, its transaction committed asynchronously
				q = "INSERT INTO bench_upsert SELECT $1, 1 FROM (SELECT set_config('synchronous_commit', 'off', true)) c ON CONFLICT (k) DO UPDATE SET n = bench_upsert.n + 1"
				d = "fast"
			}
			b.Run("op=upsert/durability="+d+"/"+name, func(b *testing.B) {
				run(b, parallel, func(i int) error {
					_, err := pool.Exec(ctx, q, fmt.Sprint("k", i%10000))
					return err
				})
			})
		}
	}
}

// BenchmarkDecide measures pgstore decisions: both paths, both durabilities,
// on 10,000 keys and on one hot key, serial and 16-way parallel.
func BenchmarkDecide(b *testing.B) {
	pool := benchPool(b)
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench-%d", i)
	}
	lim := []core.Limit{{Algorithm: core.TokenBucket, Limit: 1 << 30, Window: 1_000_000}}
	names := []string{"default"}
	pol := store.MustPolicy(names, lim...)
	for _, mode := range []struct {
		name string
		m    pgstore.Mode
	}{{"sql", pgstore.ModeSQL}, {"go", pgstore.ModeGo}} {
		for _, dur := range []struct {
			name string
			d    pgstore.Durability
		}{{"durable", pgstore.DurabilityDurable}, {"fast", pgstore.DurabilityFast}} {
			s := newStore(b, pool, pgstore.Config{Mode: mode.m, Durability: dur.d})
			for _, nkeys := range []int{10000, 1} {
				for _, parallel := range []bool{false, true} {
					name := fmt.Sprintf("mode=%s/durability=%s/keys=%d/%s", mode.name, dur.name, nkeys,
						map[bool]string{false: "serial", true: "parallel=16"}[parallel])
					b.Run(name, func(b *testing.B) {
						ctx := context.Background()
						run(b, parallel, func(i int) error {
							_, _, err := s.Decide(ctx, store.Request{Key: keys[i%nkeys], Policy: pol, Cost: 1}, nil)
							return err
						})
					})
				}
			}
		}
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
