package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/failover"
	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/internal/testkit/tcpproxy"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/pgstore"
	"github.com/rlcore/rl/store"
	"github.com/rlcore/rl/store/storetest"
	"github.com/rlcore/rl/wasm"
)

// db is one migrated database shared by this package's tests; keys keep
// them apart.
var (
	dbOnce sync.Once
	dbURL  string
)

func database(t testing.TB) string {
	t.Helper()
	pgtest.SkipShort(t)
	dbOnce.Do(func() {
		// The database outlives the first test that asks for it: it is
		// dropped by TestMain.
		dbURL = newMigrated(t)
	})
	if dbURL == "" {
		t.Fatal("no database")
	}
	return dbURL
}

func newMigrated(t testing.TB) string {
	return pgtest.NewMigrated(&keep{TB: t}) // a copy of the migrated template
}

// keep defers a database's cleanup to TestMain.
type keep struct{ testing.TB }

var cleanups []func()

func (k *keep) Cleanup(f func()) { cleanups = append(cleanups, f) }

func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
	if code != 0 {
		panic(fmt.Sprintf("exit %d", code))
	}
}

const t0 = int64(1_767_225_600_000_000)

var modes = []struct {
	name string
	cfg  pgstore.Config
}{
	{"sql", pgstore.Config{Mode: pgstore.ModeSQL, RequestClock: true}},
	{"go", pgstore.Config{Mode: pgstore.ModeGo, RequestClock: true}},
	{"sql-fast", pgstore.Config{Mode: pgstore.ModeSQL, RequestClock: true, Durability: pgstore.DurabilityFast}},
	{"go-fast", pgstore.Config{Mode: pgstore.ModeGo, RequestClock: true, Durability: pgstore.DurabilityFast}},
}

func newStore(t testing.TB, pool *pgxpool.Pool, cfg pgstore.Config) *pgstore.Store {
	s, err := pgstore.New(pool, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // keys of their own (storetest.Run)
			cfg := storetest.Config{New: func(t *testing.T) store.Store { return newStore(t, pool, m.cfg) }}
			if m.cfg.Mode == pgstore.ModeGo {
				cfg.WithDecider = func(t *testing.T, d core.Decider) store.Store {
					c := m.cfg
					c.Decider = d
					return newStore(t, pool, c)
				}
			}
			storetest.Run(t, cfg)
		})
	}
}

var algorithms = core.Algorithms()

// TestExactness: 32 goroutines over one pool on a hot key, limit 100:
// exactly the limit admitted, zero errors; and two pools (two app
// instances) on one key share the limit exactly. Every algorithm, both
// paths, several trials.
func TestExactness(t *testing.T) {
	u := database(t)
	pools := []*pgxpool.Pool{pgtest.Pool(t, u), pgtest.Pool(t, u)}
	for _, m := range modes[:2] {
		stores := []*pgstore.Store{newStore(t, pools[0], m.cfg), newStore(t, pools[1], m.cfg)}
		for _, alg := range algorithms {
			for _, instances := range []int{1, 2} {
				t.Run(fmt.Sprintf("%s/%s/instances=%d", m.name, alg, instances), func(t *testing.T) {
					// Keys of their own: the cases run at once, so that
					// PostgreSQL commits the hot keys' transactions in
					// groups rather than one by one.
					t.Parallel()
					for trial := range 3 {
						key := fmt.Sprintf("exact-%s-%s-%d-%d-%d", m.name, alg, instances, trial, time.Now().UnixNano())
						lim := core.Limit{Algorithm: alg, Limit: 100, Window: 3_600_000_000}
						var admitted, errs atomic.Int64
						var wg sync.WaitGroup
						start := make(chan struct{})
						for g := range 32 {
							wg.Add(1)
							go func() {
								defer wg.Done()
								s := stores[g%instances]
								<-start
								for range 10 {
									_, d, err := s.Decide(context.Background(), store.Request{Key: key, Policy: store.MustPolicy([]string{"default"}, lim), Now: t0, Cost: 1}, nil)
									if err != nil {
										errs.Add(1)
										t.Error(err)
										return
									}
									if d.Allowed {
										admitted.Add(1)
									}
								}
							}()
						}
						close(start)
						wg.Wait()
						require.Zero(t, errs.Load())
						require.Equal(t, int64(100), admitted.Load(), "trial %d", trial)
					}
				})
			}
		}
	}
}

// TestInterleaved decides one key in turn through the SQL path, the Go
// transaction path with the native core, the same with the WebAssembly
// core, and rl_allow() or rl_settle_us() called directly, and compares
// every decision with the pure core's sequence, NextAfter included: takes
// and settles (debts and refunds), under a limit that changes now and
// then (another Limit, Window, Rate or algorithm: the state carried over).
// The stored row, with the parameters that wrote it, is the core's state.
func TestInterleaved(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	sqlStore := newStore(t, pool, pgstore.Config{Mode: pgstore.ModeSQL, RequestClock: true})
	goStore := newStore(t, pool, pgstore.Config{Mode: pgstore.ModeGo, RequestClock: true})
	wasmCore, err := wasm.New(context.Background(), wasm.Config{})
	require.NoError(t, err)
	defer wasmCore.Close(context.Background())
	wasmStore := newStore(t, pool, pgstore.Config{Mode: pgstore.ModeGo, RequestClock: true, Decider: wasmCore})
	for ai, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			lim := core.Limit{Algorithm: alg, Limit: 7, Window: 2_000_000, Rate: 0}
			// The limits the key moves between: its own, a lowered one, one
			// with another window (and rate), another algorithm.
			other := algorithms[(ai+3)%len(algorithms)]
			limits := []core.Limit{lim, {Algorithm: alg, Limit: 4, Window: 2_000_000}, {Algorithm: alg, Limit: 7, Window: 3_000_000},
				{Algorithm: other, Limit: 5, Window: 1_000_000}}
			if !alg.Windowed() {
				limits[2].Rate = 2
			}
			key := fmt.Sprintf("inter-%s-%d", alg, time.Now().UnixNano())
			st := core.State{Log: make([]int64, 0, core.MaxLogLimit)}
			now := t0
			for i := range 160 {
				now += int64((i*104729)%900_000) - 150_000
				if i%20 == 19 {
					lim = limits[(i/20)%len(limits)]
				}
				cost := int64(i%4) % 3
				settle := i%7 == 3
				var (
					want, got core.Decision
					next      core.State
					err       error
				)
				if settle {
					cost = int64(i%5) - 2 // -2 … 2
					want, next, err = core.Settle(lim, st, now, cost)
				} else {
					want, next, err = core.Take(lim, st, now, cost)
				}
				require.NoError(t, err)
				st = next
				if st.Log == nil {
					st.Log = make([]int64, 0, core.MaxLogLimit)
				}
				op := store.Take
				if settle {
					op = store.Settle
				}
				via := i % 4
				switch via {
				case 0, 1, 2:
					s := []*pgstore.Store{sqlStore, goStore, wasmStore}[via]
					_, got, err = s.Decide(context.Background(), store.Request{Key: key, Policy: store.MustPolicy([]string{"default"}, lim), Op: op, Now: now, Cost: cost}, nil)
				case 3:
					fn := "rl.rl_allow_us"
					if settle {
						fn = "rl.rl_settle_us"
					}
					err = pool.QueryRow(context.Background(),
						"SELECT allowed, lim, remaining, reset_after_us, retry_after_us, delay_us, next_after_us FROM "+fn+"($1, $2, $3, $4, $5, $6, 'default', $7)",
						key, lim.Algorithm.String(), lim.Limit, lim.Window, cost, lim.Rate, now).
						Scan(&got.Allowed, &got.Limit, &got.Remaining, &got.ResetAfter, &got.RetryAfter, &got.Delay, &got.NextAfter)
				}
				require.NoError(t, err, "step %d", i)
				require.Equal(t, want, got, "step %d via %s (%v now %d cost %d under %+v)", i, []string{"sql", "go", "wasm", "rl_allow"}[via], op, now, cost, lim)
			}
			// And the stored row is the core's state.
			var a int32
			var tt, x, y, l, w, r int64
			var log []int64
			require.NoError(t, pool.QueryRow(context.Background(), "SELECT algorithm, t, x, y, log, l, w, r FROM rl.state WHERE key = $1", key).Scan(&a, &tt, &x, &y, &log, &l, &w, &r))
			require.Equal(t, st.Algorithm, core.Algorithm(a))
			require.Equal(t, []int64{st.T, st.X, st.Y, st.L, st.W, st.R}, []int64{tt, x, y, l, w, r})
			require.Equal(t, len(st.Log), len(log))
		})
	}
}

// TestSettleShadowSQL: ModeSQL settles a policy with shadow limits as
// store.Policy.Decide settles it (migration 19), in Store (durable and
// fast) and in Batched, alone and queued into one batch with other calls:
// the enforced limits all or nothing, then each shadow limit alone; a
// shadow limit whose row is corrupt is left as it was and fails nothing
// (its decision allowed false with its limit, zeros), the enforced limits
// corrected all the same; with only shadow limits the settled one with the
// fewest remaining decides; an enforced limit's corrupt row fails the call
// (core.ErrState) and changes nothing. Every decision, the deciding index
// and the rows after are compared with Decide on the same states.
func TestSettleShadowSQL(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	ctx := context.Background()
	names := []string{"enforced", "candidate", "other"}
	ls := []core.Limit{
		{Algorithm: core.FixedWindow, Limit: 5, Window: 3_600_000_000},
		{Algorithm: core.GCRA, Limit: 3, Window: 1_000_000},
		{Algorithm: core.TokenBucket, Limit: 4, Window: 1_000_000},
	}
	policy := func(shadows ...string) *store.Policy {
		p, err := store.MustPolicy(names, ls...).WithShadow(shadows...)
		require.NoError(t, err)
		return p
	}
	// A corrupt row: a GCRA state whose remainder is beyond any rate.
	corrupt := core.State{Algorithm: core.GCRA, T: t0 + 1_000_000, X: core.MaxLimit + 1, Y: t0}
	type tcase struct {
		name    string
		p       *store.Policy
		corrupt []int // the limits whose rows are corrupt
		delta   int64
	}
	all := policy("enforced", "candidate", "other")
	cases := []tcase{
		{"one-shadow", policy("candidate"), nil, 4},
		{"one-shadow-corrupt", policy("candidate"), []int{1}, 4},
		{"one-shadow-corrupt-refund", policy("candidate"), []int{1}, -2},
		{"one-shadow-corrupt-zero", policy("candidate"), []int{1}, 0},
		{"two-shadows-one-corrupt", policy("candidate", "other"), []int{2}, 7},
		{"only-shadows", all, nil, 3},
		{"only-shadows-one-corrupt", all, []int{0}, 3},
		{"only-shadows-two-corrupt", all, []int{0, 2}, -1},
		{"only-shadows-all-corrupt", all, []int{0, 1, 2}, 5},
		{"enforced-corrupt", policy("enforced", "other"), []int{1}, 2},
		{"enforced-and-shadow-corrupt", policy("other"), []int{1, 2}, 2},
	}
	rows := func(key string) string {
		var s string
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(string_agg(format('%s %s %s %s %s %s', name, algorithm, t, x, y, log), '; ' ORDER BY name), '')
			FROM rl.state WHERE key = $1`, key).Scan(&s))
		return s
	}
	// prepare takes on a fresh key, corrupts a row if asked, and returns
	// the states Decide settles.
	prepare := func(s store.Store, key string, c tcase) []core.State {
		ss := make([]core.State, len(names))
		want := make([]core.Decision, len(names))
		_, err := c.p.Decide(nil, store.Take, ss, t0, 1, want)
		require.NoError(t, err)
		_, _, err = s.Decide(ctx, store.Request{Key: key, Policy: c.p, Op: store.Take, Now: t0, Cost: 1}, nil)
		require.NoError(t, err)
		for _, k := range c.corrupt {
			_, err := pool.Exec(ctx, `INSERT INTO rl.state AS s (key, name, algorithm, t, x, y) VALUES ($1, $2, $3, $4, $5, $6)
				ON CONFLICT (key, name) DO UPDATE SET algorithm = $3, t = $4, x = $5, y = $6, log = '{}', l = 0, w = 0, r = 0`,
				key, names[k], int32(corrupt.Algorithm), corrupt.T, corrupt.X, corrupt.Y)
			require.NoError(t, err)
			ss[k] = corrupt
		}
		return ss
	}
	// check settles ss as Decide and compares got (the store's result).
	check := func(what string, c tcase, ss []core.State, key, before string, i int, got core.Decision, each []core.Decision, err error) {
		want := make([]core.Decision, len(names))
		wi, werr := c.p.Decide(nil, store.Settle, ss, t0+1, c.delta, want)
		if werr != nil {
			require.ErrorIs(t, err, werr, "%s %s", what, c.name)
			require.Equal(t, before, rows(key), "%s %s: a refused settle wrote a row", what, c.name)
			return
		}
		require.NoError(t, err, "%s %s", what, c.name)
		require.Equal(t, want, each, "%s %s", what, c.name)
		require.Equal(t, wi, i, "%s %s: deciding", what, c.name)
		require.Equal(t, c.p.Deciding(want, wi), got, "%s %s", what, c.name)
		for _, k := range c.corrupt { // a shadow limit's: left as it was
			require.Equal(t, core.Decision{Limit: ls[k].Limit}, each[k], "%s %s", what, c.name)
			require.Contains(t, rows(key), fmt.Sprintf("%s %d %d %d %d {}", names[k], corrupt.Algorithm, corrupt.T, corrupt.X, corrupt.Y),
				"%s %s: the corrupt shadow row was written", what, c.name)
		}
	}
	stores := []struct {
		name string
		s    store.Store
	}{
		{"store", newStore(t, pool, pgstore.Config{RequestClock: true})},
		{"store-fast", newStore(t, pool, pgstore.Config{RequestClock: true, Durability: pgstore.DurabilityFast})},
		{"batched", newBatched(t, pool, pgstore.Config{RequestClock: true}, pgstore.BatchConfig{})},
	}
	for _, st := range stores {
		for _, c := range cases {
			key := fmt.Sprintf("shadow-settle-%s-%s-%d", st.name, c.name, time.Now().UnixNano())
			ss := prepare(st.s, key, c)
			before := rows(key)
			each := make([]core.Decision, len(names))
			i, got, err := st.s.Decide(ctx, store.Request{Key: key, Policy: c.p, Op: store.Settle, Now: t0 + 1, Cost: c.delta}, each)
			check(st.name, c, ss, key, before, i, got, each, err)
		}
	}

	// Every case queued into one rl_decide_batch statement, each on its
	// own key, behind a blocked one.
	b := newBatched(t, pool, modes[0].cfg, pgstore.BatchConfig{MaxInFlight: 1})
	blocker := fmt.Sprintf("shadow-settle-block-%d", time.Now().UnixNano())
	release := hold(t, pool, blocker)
	first := decideAsync(b, ctx, blocker, core.Limit{Algorithm: core.FixedWindow, Limit: 3, Window: 3_600_000_000}, 1)
	await.Until(t, "the blocked statement in flight", func() bool { return pgstore.QueueLen(b) == 0 && pgstore.InFlight(b) == 1 })
	type queued struct {
		key, before string
		ss          []core.State
		i           int
		got         core.Decision
		each        []core.Decision
		err         error
		done        chan struct{}
	}
	qs := make([]*queued, len(cases))
	for k, c := range cases {
		q := &queued{key: fmt.Sprintf("shadow-settle-batch-%s-%d", c.name, time.Now().UnixNano()), each: make([]core.Decision, len(names)), done: make(chan struct{})}
		q.ss = prepare(stores[0].s, q.key, c)
		q.before = rows(q.key)
		qs[k] = q
		go func() {
			defer close(q.done)
			q.i, q.got, q.err = b.Decide(ctx, store.Request{Key: q.key, Policy: c.p, Op: store.Settle, Now: t0 + 1, Cost: c.delta}, q.each)
		}()
		queueUp(t, b, k+1)
	}
	before := b.Stats()
	release()
	require.NoError(t, (<-first).err)
	for k, c := range cases {
		q := qs[k]
		<-q.done
		check("one batch", c, q.ss, q.key, q.before, q.i, q.got, q.each, q.err)
	}
	require.Equal(t, int64(1), b.Stats().Batches-before.Batches, "the queued settles went out in one statement")
}

// TestDeciderIsAStoreSetting: the decider is chosen with the store, and
// ModeSQL, which decides in PL/pgSQL, refuses one it would ignore.
func TestDeciderIsAStoreSetting(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none") // never dialled
	require.NoError(t, err)
	defer pool.Close()
	wasmCore, err := wasm.New(context.Background(), wasm.Config{})
	require.NoError(t, err)
	defer wasmCore.Close(context.Background())
	_, err = pgstore.New(pool, pgstore.Config{Mode: pgstore.ModeSQL, Decider: wasmCore})
	require.ErrorContains(t, err, "only with ModeGo")
	_, err = pgstore.NewBatched(pool, pgstore.Config{Decider: wasmCore}, pgstore.BatchConfig{})
	require.ErrorContains(t, err, "only with ModeGo")
	_, err = pgstore.New(pool, pgstore.Config{Mode: 7})
	require.ErrorContains(t, err, "unknown Mode")
	for _, cfg := range []pgstore.Config{{Mode: pgstore.ModeSQL, Decider: core.Native{}}, {Mode: pgstore.ModeGo, Decider: wasmCore}, {Mode: pgstore.ModeGo}} {
		s, err := pgstore.New(pool, cfg)
		require.NoError(t, err)
		s.Close()
	}
}

func TestInvalidInputAndCancel(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	for _, m := range modes[:2] {
		s := newStore(t, pool, m.cfg)
		// An invalid limit never reaches a store (store.NewPolicy refuses
		// it); an invalid cost does, and is the core's error.
		_, _, err := s.Decide(context.Background(), store.Request{Key: "bad", Policy: store.MustPolicy([]string{"default"}, core.Limit{Algorithm: core.GCRA, Limit: 5, Window: 10}), Now: t0, Cost: -1}, nil)
		require.ErrorIs(t, err, core.ErrCost, m.name)
		require.False(t, errors.Is(err, store.ErrUnavailable))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, _, err = s.Decide(ctx, store.Request{Key: "c", Policy: store.MustPolicy([]string{"default"}, core.Limit{Algorithm: core.GCRA, Limit: 5, Window: 10}), Now: t0, Cost: 1}, nil)
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, errors.Is(err, store.ErrUnavailable), "a caller giving up is not an outage: %v (%T)", err, errors.Unwrap(err))
	}
}

// TestOutage cuts the network between the pool and PostgreSQL: decisions
// fail fast with ErrUnavailable; behind failover they are served from
// memory; after the restore, PostgreSQL decides again without a restart.
func TestOutage(t *testing.T) {
	u := database(t)
	pu, _ := url.Parse(u)
	proxy, err := tcpproxy.New(pu.Host)
	require.NoError(t, err)
	defer proxy.Close()
	pu.Host = proxy.Addr()
	pool := pgtest.Pool(t, pu.String())
	// Generous: a timeout must never end a healthy call, and the cut call
	// must end by the cut (an error at once), never by the timeout.
	pg := newStore(t, pool, pgstore.Config{Timeout: 10 * time.Minute})
	var fallbacks atomic.Int64
	fo, err := failover.New(failover.Config{Primary: pg, Fallback: memstore.New(nil), Threshold: 2, Cooldown: 200 * time.Millisecond,
		OnFallback: func(error) { fallbacks.Add(1) }})
	require.NoError(t, err)
	lim := core.Limit{Algorithm: core.FixedWindow, Limit: 1000, Window: 3_600_000_000}
	key := fmt.Sprintf("outage-%d", time.Now().UnixNano())
	decide := func(s store.Store) (core.Decision, error) {
		_, d, err := s.Decide(context.Background(), store.Request{Key: key, Policy: store.MustPolicy([]string{"default"}, lim), Cost: 1}, nil)
		return d, err
	}
	for range 3 {
		d, err := decide(pg)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	proxy.Cut()
	_, err = decide(pg)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.False(t, errors.Is(err, context.DeadlineExceeded), "failed by the cut, not a timeout: %v", err)
	for range 10 {
		d, err := decide(fo)
		require.NoError(t, err, "failover answers during the outage")
		require.True(t, d.Allowed)
	}
	require.Equal(t, failover.Open, fo.State())
	proxy.Restore()
	await.Until(t, "the failover to close on PostgreSQL", func() bool {
		d, err := decide(fo)
		return err == nil && d.Allowed && fo.State() == failover.Closed
	})
	d, err := decide(pg)
	require.NoError(t, err)
	// PostgreSQL kept its count: 3 before, at least 1 probe after.
	require.LessOrEqual(t, d.Remaining, int64(1000-5))
	require.Positive(t, fallbacks.Load())
}

// TestExpiresAt: the Go path stores the expires_at the SQL functions store
// (rl._expires_at, migration 0013).
func TestExpiresAt(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	for _, c := range [][2]int64{{0, 1}, {1, 0}, {1767225600000000, 1}, {1767225600000000, 100_000},
		{1<<26 - 1, 1}, {1 << 26, 0}, {1<<26 + 1, 1<<26 - 1}, {253402300799999999, 1 << 61}} {
		var want int64
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT rl._expires_at($1, $2)", c[0], c[1]).Scan(&want))
		require.Equal(t, want, pgstore.ExpiresAt(c[0], c[1]), "%d + %d", c[0], c[1])
		require.GreaterOrEqual(t, want, c[0]+c[1], "never early")
		require.Less(t, want, c[0]+c[1]+1<<26)
	}
}

// TestExpiryBounded churns many keys and shows Expire keeps the table to
// the live ones.
func TestExpiryBounded(t *testing.T) {
	u := newMigrated(t) // a database of its own: it counts rows
	pool := pgtest.Pool(t, u)
	s := newStore(t, pool, pgstore.Config{})
	// Decisions at a request time long enough ago that every row written is
	// idle now: expires_at is the time a state is fresh again rounded up to
	// 2^26 µs (about 67 s), too long to sleep through.
	past := newStore(t, pool, pgstore.Config{RequestClock: true})
	lim := core.Limit{Algorithm: core.TokenBucket, Limit: 5, Window: 50_000} // 50 ms to refill
	ctx := context.Background()
	count := func() (n int64) {
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM rl.state").Scan(&n))
		return n
	}
	for round := range 5 {
		then := time.Now().UnixMicro() - 2<<26
		for i := range 200 {
			_, _, err := past.Decide(ctx, store.Request{Key: fmt.Sprintf("churn-%d-%d", round, i),
				Policy: store.MustPolicy([]string{"default"}, lim), Cost: 1, Now: then}, nil)
			require.NoError(t, err)
		}
		n, err := s.Expire(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(200), n)
		require.Zero(t, count())
	}
	// Live rows stay.
	_, _, err := s.Decide(ctx, store.Request{Key: "live", Policy: store.MustPolicy([]string{"default"}, core.Limit{Algorithm: core.FixedWindow, Limit: 5, Window: 3_600_000_000}), Cost: 1}, nil)
	require.NoError(t, err)
	_, err = s.Expire(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), count())
}

// TestNoDeadlock mixes multi-limit calls through both paths, with the limits
// in different orders, and resets, on a few keys from many goroutines.
func TestNoDeadlock(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	stores := []*pgstore.Store{
		newStore(t, pool, pgstore.Config{Mode: pgstore.ModeSQL, RequestClock: true}),
		newStore(t, pool, pgstore.Config{Mode: pgstore.ModeGo, RequestClock: true}),
	}
	a := core.Limit{Algorithm: core.TokenBucket, Limit: 1000, Window: 1_000_000}
	b := core.Limit{Algorithm: core.FixedWindow, Limit: 1000, Window: 1_000_000}
	c := core.Limit{Algorithm: core.SlidingLog, Limit: 1000, Window: 1_000_000}
	orders := []struct {
		names  []string
		limits []core.Limit
	}{
		{[]string{"a", "b", "c"}, []core.Limit{a, b, c}},
		{[]string{"c", "b", "a"}, []core.Limit{c, b, a}},
		{[]string{"b", "a"}, []core.Limit{b, a}},
		{[]string{"B", "a", "c"}, []core.Limit{b, a, c}}, // bytewise: "B" < "a"
	}
	prefix := fmt.Sprint("dl-", time.Now().UnixNano())
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				s := stores[(g+i)%2]
				o := orders[(g*7+i)%len(orders)]
				key := fmt.Sprint("k", i%3)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				var err error
				if (g+i)%11 == 0 {
					err = s.Reset(ctx, prefix, key, o.names)
				} else {
					_, _, err = s.Decide(ctx, store.Request{Prefix: prefix, Key: key, Policy: store.MustPolicy(o.names, o.limits...),
						Now: t0 + int64(i), Cost: 1}, nil)
				}
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A statement the server cancels for statement_timeout (SQLSTATE 57014) is
// a timeout, like one the client's deadline ends: store.ErrUnavailable and
// context.DeadlineExceeded, so that one alone is not taken for an outage
// (internal/request/outage counts runs of timeouts). The decision waits on a row
// another session holds locked.
func TestStatementTimeoutIsATimeout(t *testing.T) {
	u := database(t)
	pu, err := url.Parse(u)
	require.NoError(t, err)
	q := pu.Query()
	q.Set("statement_timeout", "200") // ms, a runtime parameter of every connection
	pu.RawQuery = q.Encode()
	pool := pgtest.Pool(t, pu.String())
	locker := pgtest.Pool(t, u)
	// The row is created through a pool without statement_timeout: only
	// the call that waits for the locked row meets the 200 ms, which must
	// fire, however slow the machine.
	lim := core.Limit{Algorithm: core.FixedWindow, Limit: 1000, Window: 3_600_000_000}
	for _, m := range modes[:2] {
		t.Run(m.name, func(t *testing.T) {
			cfg := m.cfg
			cfg.Timeout = time.Minute // the server's timeout comes first
			s := newStore(t, pool, cfg)
			key := fmt.Sprintf("stmt-timeout-%s-%d", m.name, time.Now().UnixNano())
			decideOn := func(s store.Store) error {
				_, _, err := s.Decide(context.Background(), store.Request{Key: key, Policy: store.MustPolicy([]string{"default"}, lim), Now: t0, Cost: 1}, nil)
				return err
			}
			decide := func() error { return decideOn(s) }
			require.NoError(t, decideOn(newStore(t, locker, cfg)), "the row exists")
			ctx := context.Background()
			tx, err := locker.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			var n int
			require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM rl.state WHERE strpos(key, $1) > 0 FOR UPDATE) l`, key).Scan(&n))
			require.Equal(t, 1, n, "one row locked")

			err = decide()
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "57014", pe.Code, "%v", err)
			require.ErrorIs(t, err, store.ErrUnavailable)
			require.ErrorIs(t, err, context.DeadlineExceeded, "a timeout, not an outage at once")
			require.False(t, errors.Is(err, store.ErrBusy))
		})
	}
}
