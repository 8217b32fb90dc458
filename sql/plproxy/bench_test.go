package plproxy_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl/sql/plproxy/plproxytest"
)

// BenchmarkDecide measures rl_allow_us (a token bucket, cost 1, random keys
// among 10 000, synchronous_commit = off on the shards) called directly on
// one shard, through the router with one shard behind it, and through the
// router with two; serially (one client: the latency) and from 8 clients
// (the throughput the machine gives). Every database is on the local
// server, so the router and the shards share its cores: the per-node cost
// and the router's added latency are the figures to read, not the ratio of
// the two-shard throughput to the one-shard one (docs/scaling.md).
//
//	go test -run '^$' -bench BenchmarkDecide -benchtime 5s ./sql/plproxy/
func BenchmarkDecide(b *testing.B) {
	one := plproxytest.New(b, 1, 0)
	two := plproxytest.New(b, 2, 0)
	for _, tc := range []struct {
		name string
		url  string
	}{
		{"direct", one.Shards[0]},
		{"router-1-shard", one.Router},
		{"router-2-shards", two.Router},
	} {
		for _, clients := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/clients=%d", tc.name, clients), func(b *testing.B) {
				cfg, err := pgxpool.ParseConfig(tc.url)
				if err != nil {
					b.Fatal(err)
				}
				cfg.MaxConns = int32(clients)
				p, err := pgxpool.NewWithConfig(ctx, cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				// Warm every connection (and the router's to the shards).
				for range clients * 4 {
					if _, err := p.Exec(ctx, "SELECT rl.rl_allow_us('warm', 'token_bucket', 1000000, 1000000)"); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				if clients == 1 {
					r := rand.New(rand.NewPCG(1, 2))
					for b.Loop() {
						decide(b, p, r)
					}
				} else {
					b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0))) // clients goroutines
					b.RunParallel(func(pb *testing.PB) {
						r := rand.New(rand.NewPCG(rand.Uint64(), 2))
						for pb.Next() {
							decide(b, p, r)
						}
					})
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
			})
		}
	}
}

func decide(b *testing.B, p *pgxpool.Pool, r *rand.Rand) {
	var ok bool
	if err := p.QueryRow(ctx, "SELECT allowed FROM rl.rl_allow_us($1, 'token_bucket', 1000000, 1000000)",
		fmt.Sprintf("bench:%d", r.IntN(10000))).Scan(&ok); err != nil {
		b.Error(err)
	}
}

// BenchmarkNodeCPU measures what a decision costs each node in CPU time,
// which the load of a shared machine disturbs far less than wall time: the
// server processes' user+system time (from /proc, so the server must be
// local) of the shard's backend when called directly, and of the router's
// backend and the shard's backend behind it when called through the router.
// One client, sequential calls.
//
//	go test -run '^$' -bench BenchmarkNodeCPU -benchtime 20000x ./sql/plproxy/
func BenchmarkNodeCPU(b *testing.B) {
	c := plproxytest.New(b, 1, 0)
	// direct-unprepared parses and plans the statement on every call, as
	// PL/Proxy does on the shard.
	for _, via := range []string{"direct", "direct-unprepared", "router"} {
		b.Run(via, func(b *testing.B) {
			u := c.Shards[0]
			if via == "router" {
				u = c.Router
			}
			cfg, err := pgx.ParseConfig(u)
			if err != nil {
				b.Fatal(err)
			}
			if via == "direct-unprepared" {
				cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
			}
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			var pid int
			if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				b.Fatal(err)
			}
			call := func(i int) {
				var ok bool
				if err := conn.QueryRow(ctx, "SELECT allowed FROM rl.rl_allow_us($1, 'token_bucket', 1000000, 1000000)",
					fmt.Sprintf("bench:%d", i%10000)).Scan(&ok); err != nil {
					b.Fatal(err)
				}
			}
			call(0) // opens the router's connection to the shard
			shardPid := pid
			if via == "router" {
				// The shard's backend serving the router's connection.
				sc, err := pgx.Connect(ctx, c.Shards[0])
				if err != nil {
					b.Fatal(err)
				}
				err = sc.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'").Scan(&shardPid)
				sc.Close(ctx)
				if err != nil {
					b.Fatal(err)
				}
			}
			r0, s0 := cpuTime(b, pid), cpuTime(b, shardPid)
			start := time.Now()
			i := 0
			for b.Loop() {
				i++
				call(i)
			}
			n := float64(b.N)
			b.ReportMetric(float64(time.Since(start).Microseconds())/n, "µs-wall/op")
			b.ReportMetric(float64((cpuTime(b, shardPid)-s0).Microseconds())/n, "µs-shard-cpu/op")
			if via == "router" {
				b.ReportMetric(float64((cpuTime(b, pid)-r0).Microseconds())/n, "µs-router-cpu/op")
			}
		})
	}
}

// cpuTime returns the user+system CPU time of process pid (Linux, clock
// ticks of 10 ms).
func cpuTime(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatalf("the server must run on this machine: %v", err)
	}
	// Fields after the command name (which is in parentheses).
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
