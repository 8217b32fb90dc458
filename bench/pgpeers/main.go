// Command pgpeers measures this project's PostgreSQL stores beside the
// floors (what one statement costs) and the Go rate limiters that keep their
// state in PostgreSQL, on one database, in one run, and prints one markdown
// table: decisions/s, p50 and p99 latency, errors, and ratios to the
// durable upsert floor and to the PostgreSQL peer of the same durability,
// key count and concurrency.
//
// It is a module of its own (with replace github.com/rlcore/rl => ../..)
// so that the main module never depends on the peers.
//
//	go run . -d 3s                # DATABASE_URL or the pgtest default
//	go run . -only 'batched' -goroutines 64
//
// Every scenario admits every call (limit 2^30 per second: the state is
// written each time) through the library's public call: rl.Limiter.Allow
// for this project, ratelimit.RateLimiter.Allow for ajiwo. The pool has 16
// connections (-conns) whatever the number of goroutines. 10,000 keys are
// created before each scenario is timed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ajiwo "github.com/ajiwo/ratelimit"
	ajiwoPG "github.com/ajiwo/ratelimit/backends/postgres"
	ajiwoTB "github.com/ajiwo/ratelimit/strategies/tokenbucket"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/pgstore"
	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/store"
)

const (
	limit  = 1 << 30
	window = time.Second
)

type op func(ctx context.Context, key string) error

// scenario is one row of the table.
type scenario struct {
	group   string // the ratio's reference group: durable or fast
	name    string
	keys    int
	peer    bool // the PostgreSQL peer of its group
	floor   bool // the upsert floor of its group
	batched func() pgstore.BatchStats
	open    func() (op, func(), error)
	table   string // where its state lives: warmed once per run
}

var warmed = map[string]bool{}

type result struct {
	s          scenario
	goroutines int
	n, errs    int64
	elapsed    time.Duration
	p50, p99   time.Duration
	batch      float64
	firstErr   error
}

func main() {
	var (
		dur     = flag.Duration("d", 2*time.Second, "time per scenario")
		conns   = flag.Int("conns", 16, "pool size")
		gs      = flag.String("goroutines", "1,16,64", "concurrency levels (1: serial)")
		nkeys   = flag.Int("keys", 10000, "keys of the many-keys scenarios")
		only    = flag.String("only", "", "run only scenarios whose name matches this regexp")
		maxIn   = flag.Int("inflight", 0, "BatchConfig.MaxInFlight (0: the default)")
		maxWait = flag.Duration("maxwait", 0, "BatchConfig.MaxWait")
		native  = flag.Bool("native", false, "enable the native step (sql/native: CREATE EXTENSION rl_native, rl_native.enable(); needs it installed and a superuser URL)")
	)
	flag.Parse()
	ctx := context.Background()
	dbURL, drop, err := pgtest.Create(ctx, pgtest.URL())
	check(err)
	defer drop(context.Background())
	check(migrations.Up(ctx, dbURL))
	if *native {
		conn, err := pgx.Connect(ctx, dbURL)
		check(err)
		var msg string
		_, err = conn.Exec(ctx, "CREATE EXTENSION rl_native")
		check(err)
		check(conn.QueryRow(ctx, "SELECT rl_native.enable()").Scan(&msg))
		fmt.Fprintln(os.Stderr, "pgpeers:", msg)
		check(conn.Close(ctx))
	}

	pool := newPool(ctx, dbURL, *conns)
	defer pool.Close()
	_, err = pool.Exec(ctx, "CREATE TABLE upsert_floor (k text PRIMARY KEY, n bigint NOT NULL)")
	check(err)
	// ajiwo's backend opens its own pool (creating its table); the fast one
	// commits asynchronously, as its sessions' setting.
	ajiwoDurable, err := ajiwoPG.New(ajiwoPG.Config{ConnString: dbURL, MaxConns: int32(*conns)})
	check(err)
	defer ajiwoDurable.Close()
	ajiwoFast, err := ajiwoPG.New(ajiwoPG.Config{ConnString: dbURL + "&synchronous_commit=off", MaxConns: int32(*conns)})
	check(err)
	defer ajiwoFast.Close()

	keys := make([]string, *nkeys)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	var levels []int
	for _, g := range strings.Split(*gs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(g))
		check(err)
		levels = append(levels, n)
	}
	var re *regexp.Regexp
	if *only != "" {
		re = regexp.MustCompile(*only)
	}

	var all []scenario
	for _, d := range []struct {
		group string
		fast  bool
	}{{"durable", false}, {"fast", true}} {
		upsert := "INSERT INTO upsert_floor VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = upsert_floor.n + 1"
		if d.fast {
			upsert = "INSERT INTO upsert_floor SELECT $1, 1 FROM (SELECT set_config('synchronous_commit', 'off', true)) c ON CONFLICT (k) DO UPDATE SET n = upsert_floor.n + 1"
		}
		all = append(all, scenario{group: d.group, name: "floor: one-statement upsert, " + d.group, keys: *nkeys, floor: true, table: "floor",
			open: func() (op, func(), error) {
				return func(ctx context.Context, key string) error { _, err := pool.Exec(ctx, upsert, key); return err }, func() {}, nil
			}})
		for _, k := range []int{*nkeys, 1} {
			ap := ajiwoDurable
			if d.fast {
				ap = ajiwoFast // ajiwo has no durability setting: its sessions commit asynchronously
			}
			all = append(all, scenario{group: d.group, name: "ajiwo/ratelimit v0.0.9 + backends/postgres (token bucket), " + d.group, keys: k, peer: true, table: "ajiwo",
				open: func() (op, func(), error) { return openAjiwo(ap) }})
		}
		for _, k := range []int{*nkeys, 1} {
			cfg := pgstore.Config{Mode: pgstore.ModeSQL, QueueTimeout: -1}
			if d.fast {
				cfg.Durability = pgstore.DurabilityFast
			}
			all = append(all, scenario{group: d.group, name: "rl pgstore, one statement per decision (sql), " + d.group, keys: k, table: "rl",
				open: func() (op, func(), error) {
					s, err := pgstore.New(pool, cfg)
					if err != nil {
						return nil, nil, err
					}
					return openRL(s, func() { s.Close() })
				}})
			for _, mode := range []struct {
				name string
				m    pgstore.Mode
			}{{"sql", pgstore.ModeSQL}, {"go", pgstore.ModeGo}} {
				cfg := cfg
				cfg.Mode = mode.m
				sc := scenario{group: d.group, name: "rl pgstore.Batched (" + mode.name + "), " + d.group, keys: k, table: "rl"}
				var cur *pgstore.Batched
				sc.batched = func() pgstore.BatchStats { return cur.Stats() }
				sc.open = func() (op, func(), error) {
					s, err := pgstore.NewBatched(pool, cfg, pgstore.BatchConfig{MaxInFlight: *maxIn, MaxWait: *maxWait})
					if err != nil {
						return nil, nil, err
					}
					cur = s
					return openRL(s, func() { s.Close() })
				}
				all = append(all, sc)
			}
		}
	}

	fmt.Fprintf(os.Stderr, "pgpeers: %d CPUs, pool of %d, %v per scenario, PostgreSQL at %s\n",
		runtime.NumCPU(), *conns, *dur, migrations.Redact(pgtest.URL()))
	var results []result
	for _, g := range levels {
		for _, s := range all {
			if re != nil && !re.MatchString(s.name) {
				continue
			}
			if g == 1 && s.keys == 1 {
				continue // serial: the many-keys rows only
			}
			r := measure(ctx, s, g, keys, *dur)
			fmt.Fprintf(os.Stderr, "%-75s keys=%-5d g=%-3d %9.0f/s p50 %6.0fµs p99 %7.0fµs errs %d\n", s.name, s.keys, g,
				float64(r.n)/r.elapsed.Seconds(), us(r.p50), us(r.p99), r.errs)
			results = append(results, r)
		}
	}
	printTable(results, *conns)
	// HOT updates of the run: the pool's sessions report their statistics
	// when they end.
	pool.Close()
	if conn, err := pgx.Connect(ctx, dbURL); err == nil {
		var hot, upd, fhot, fupd int64
		if err := conn.QueryRow(ctx, `SELECT s.n_tup_hot_upd, s.n_tup_upd, f.n_tup_hot_upd, f.n_tup_upd
			FROM pg_stat_user_tables s, pg_stat_user_tables f
			WHERE s.relid = 'rl.state'::regclass AND f.relid = 'upsert_floor'::regclass`).Scan(&hot, &upd, &fhot, &fupd); err == nil {
			fmt.Printf("\nHOT updates (n_tup_hot_upd / n_tup_upd) over the run: rl.state %d of %d (%.1f%%), upsert_floor %d of %d (%.1f%%)\n",
				hot, upd, 100*float64(hot)/float64(max(upd, 1)), fhot, fupd, 100*float64(fhot)/float64(max(fupd, 1)))
		}
		conn.Close(ctx)
	}
	fmt.Println()
	fmt.Println("Not measured: github.com/mennanov/limiters v1.13.11 has no PostgreSQL state backend (only LockPostgreSQL, an " +
		"advisory-lock DistLocker, beside in-process, Redis, etcd, Memcached, DynamoDB and Cosmos DB state); " +
		"github.com/AliRizaAynaci/gorl/v2 v2.2.0 stores in memory or Redis only. Both are in bench/peers, in memory.")
}

func newPool(ctx context.Context, url string, conns int) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(url)
	check(err)
	cfg.MaxConns = int32(conns)
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	check(err)
	return p
}

func openRL(s store.Store, closeStore func()) (op, func(), error) {
	p, err := rl.NewPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: limit, Window: window})
	if err != nil {
		return nil, nil, err
	}
	l, err := rl.New(rl.Config{Store: s, Policy: p, BaseKey: "bench"})
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, key string) error {
			r, err := l.Allow(ctx, key)
			if err == nil && !r.Allowed {
				err = fmt.Errorf("denied")
			}
			return err
		}, func() {
			l.Close()
			closeStore()
		}, nil
}

func openAjiwo(backend *ajiwoPG.Backend) (op, func(), error) {
	l, err := ajiwo.New(
		ajiwo.WithBackend(backend),
		ajiwo.WithBaseKey("bench"),
		ajiwo.WithPrimaryStrategy(&ajiwoTB.Config{Burst: limit, Rate: float64(limit) / window.Seconds()}),
	)
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, key string) error {
		ok, err := l.Allow(ctx, ajiwo.AccessOptions{Key: key})
		if err == nil && !ok {
			err = fmt.Errorf("denied")
		}
		return err
	}, func() {}, nil
}

// measure warms s's keys, then runs g goroutines for d.
func measure(ctx context.Context, s scenario, g int, keys []string, d time.Duration) result {
	f, closeFn, err := s.open()
	check(err)
	defer closeFn()
	keys = keys[:s.keys]
	// Warm: every key exists (once per table), every statement is prepared
	// and compiled on every connection.
	var wg sync.WaitGroup
	var next atomic.Int64
	if warmed[s.table] {
		next.Store(int64(len(keys) - min(len(keys), 400)))
	}
	warmed[s.table] = true
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(keys)); i = next.Add(1) - 1 {
				f(ctx, keys[i])
			}
		}()
	}
	wg.Wait()
	var before pgstore.BatchStats
	if s.batched != nil {
		before = s.batched()
	}
	var (
		n, errs  atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		firstErr error
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, 4096)
			i := w * 7919
			for time.Now().Before(deadline) {
				t := time.Now()
				err := f(ctx, keys[i%len(keys)])
				mine = append(mine, time.Since(t))
				i++
				n.Add(1)
				if err != nil {
					if errs.Add(1) == 1 {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	r := result{s: s, goroutines: g, n: n.Load(), errs: errs.Load(), elapsed: elapsed, firstErr: firstErr}
	if len(lat) > 0 {
		r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	if s.batched != nil {
		after := s.batched()
		if b := after.Batches - before.Batches; b > 0 {
			r.batch = float64(after.Requests-before.Requests) / float64(b)
		}
	}
	if firstErr != nil {
		fmt.Fprintf(os.Stderr, "  first error: %v\n", firstErr)
	}
	return r
}

func printTable(rs []result, conns int) {
	rate := func(r result) float64 { return float64(r.n) / r.elapsed.Seconds() }
	ref := func(r result, pick func(result) bool) (float64, bool) {
		for _, o := range rs {
			if o.goroutines == r.goroutines && o.s.group == r.s.group && pick(o) {
				return rate(o), true
			}
		}
		return 0, false
	}
	fmt.Printf("| goroutines (pool of %d) | keys | what | decisions/s | p50 µs | p99 µs | errors | mean batch | × upsert floor (same durability) | × ajiwo (same durability, keys) |\n", conns)
	fmt.Println("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		g := strconv.Itoa(r.goroutines)
		if r.goroutines == 1 {
			g = "1 (serial)"
		}
		batch := ""
		if r.batch > 0 {
			batch = fmt.Sprintf("%.1f", r.batch)
		}
		floor, peer := "", ""
		if f, ok := ref(r, func(o result) bool { return o.s.floor }); ok && !r.s.floor {
			floor = fmt.Sprintf("%.2f×", rate(r)/f)
		}
		if p, ok := ref(r, func(o result) bool { return o.s.peer && o.s.keys == r.s.keys }); ok && !r.s.peer && !r.s.floor {
			peer = fmt.Sprintf("%.1f×", rate(r)/p)
		}
		fmt.Printf("| %s | %d | %s | %s | %.0f | %.0f | %d | %s | %s | %s |\n", g, r.s.keys, r.s.name, thousands(rate(r)),
			us(r.p50), us(r.p99), r.errs, batch, floor, peer)
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func thousands(f float64) string {
	s := strconv.FormatInt(int64(f+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgpeers:", err)
		os.Exit(1)
	}
}
