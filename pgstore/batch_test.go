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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
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
)

func newBatched(t testing.TB, pool *pgxpool.Pool, cfg pgstore.Config, bcfg pgstore.BatchConfig) *pgstore.Batched {
	s, err := pgstore.NewBatched(pool, cfg, bcfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestBatchedConformance(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // keys of their own (storetest.Run)
			cfg := storetest.Config{New: func(t *testing.T) store.Store {
				return newBatched(t, pool, m.cfg, pgstore.BatchConfig{})
			}}
			if m.cfg.Mode == pgstore.ModeGo {
				cfg.WithDecider = func(t *testing.T, d core.Decider) store.Store {
					c := m.cfg
					c.Decider = d
					return newBatched(t, pool, c, pgstore.BatchConfig{})
				}
			}
			storetest.Run(t, cfg)
		})
	}
}

// TestBatchedExactness: 64 and 256 goroutines on a hot key admit exactly
// the limit through both paths, for every algorithm, with 0 errors, and the
// decisions went out in batches.
func TestBatchedExactness(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	for _, m := range modes[:2] {
		s := newBatched(t, pool, m.cfg, pgstore.BatchConfig{MaxInFlight: 2})
		for _, alg := range algorithms {
			for _, goroutines := range []int{64, 256} {
				t.Run(fmt.Sprintf("%s/%s/goroutines=%d", m.name, alg, goroutines), func(t *testing.T) {
					before := s.Stats()
					const calls = 3
					limit := int64(goroutines * calls / 3)
					key := fmt.Sprintf("bexact-%s-%s-%d-%d", m.name, alg, goroutines, time.Now().UnixNano())
					lim := core.Limit{Algorithm: alg, Limit: limit, Window: 3_600_000_000}
					var admitted, errs atomic.Int64
					var wg sync.WaitGroup
					start := make(chan struct{})
					for range goroutines {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							for range calls {
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
					require.Equal(t, limit, admitted.Load())
					after := s.Stats()
					require.Equal(t, int64(goroutines*calls), after.Requests-before.Requests)
					require.Less(t, after.Batches-before.Batches, after.Requests-before.Requests, "no batch carried two decisions")
				})
			}
		}
	}
}

// hold locks the row (key, "default") from a connection of its own until
// release is called.
func hold(t *testing.T, pool *pgxpool.Pool, key string) (release func()) {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, "INSERT INTO rl.state (key, name) VALUES ($1, 'default') ON CONFLICT DO NOTHING", key)
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1 FROM rl.state WHERE key = $1 AND name = 'default' FOR UPDATE", key)
	require.NoError(t, err)
	var once sync.Once
	release = func() { once.Do(func() { require.NoError(t, tx.Rollback(ctx)) }) }
	t.Cleanup(release)
	return release
}

type result struct {
	d   core.Decision
	err error
}

func decideAsync(s store.Store, ctx context.Context, key string, lim core.Limit, cost int64) chan result {
	ch := make(chan result, 1)
	go func() {
		_, d, err := s.Decide(ctx, store.Request{Key: key, Policy: store.MustPolicy([]string{"default"}, lim),
			Now: t0, Cost: cost}, nil)
		ch <- result{d, err}
	}()
	return ch
}

// queueUp waits until n calls are queued.
func queueUp(t *testing.T, b *pgstore.Batched, n int) {
	t.Helper()
	await.Until(t, fmt.Sprintf("%d calls queued", n), func() bool { return pgstore.QueueLen(b) == n })
}

// TestBatchedOneKeyInOrder: requests queued behind a blocked statement go
// out in one batch; several requests for one key are decided in arrival
// order (as the core decides them one after the other), an invalid one gets
// its own error, a multi-limit one stays all or nothing, and a peek sees the
// takes before it.
func TestBatchedOneKeyInOrder(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	for _, m := range modes[:2] {
		t.Run(m.name, func(t *testing.T) {
			s := newBatched(t, pool, m.cfg, pgstore.BatchConfig{MaxInFlight: 1})
			blocker := fmt.Sprintf("border-block-%s-%d", m.name, time.Now().UnixNano())
			key := fmt.Sprintf("border-%s-%d", m.name, time.Now().UnixNano())
			release := hold(t, pool, blocker)
			fw := core.Limit{Algorithm: core.FixedWindow, Limit: 3, Window: 3_600_000_000}
			first := decideAsync(s, context.Background(), blocker, fw, 1)
			await.Until(t, "the blocked statement in flight", func() bool { return pgstore.QueueLen(s) == 0 && pgstore.InFlight(s) == 1 })
			type step struct {
				names  []string
				limits []core.Limit
				op     store.Op
				cost   int64
			}
			tb := core.Limit{Algorithm: core.TokenBucket, Limit: 2, Window: 3_600_000_000}
			steps := []step{
				{[]string{"default"}, []core.Limit{fw}, store.Take, 1},
				{[]string{"default"}, []core.Limit{fw}, store.Take, -1},          // invalid
				{[]string{"default", "tb"}, []core.Limit{fw, tb}, store.Take, 2}, // tb admits 2, fw only 2 left: admitted
				{[]string{"default"}, []core.Limit{fw}, store.Peek, 1},           // fw: 0 left
				{[]string{"tb", "default"}, []core.Limit{tb, fw}, store.Take, 1}, // denied by both: nothing taken
				{[]string{"default"}, []core.Limit{fw}, store.Take, 0},
			}
			chans := make([]chan result, len(steps))
			eaches := make([][]core.Decision, len(steps))
			for i, st := range steps {
				ch := make(chan result, 1)
				chans[i] = ch
				eaches[i] = make([]core.Decision, len(st.limits))
				go func() {
					_, d, err := s.Decide(context.Background(), store.Request{Key: key, Policy: store.MustPolicy(st.names, st.limits...),
						Op: st.op, Now: t0, Cost: st.cost}, eaches[i])
					ch <- result{d, err}
				}()
				queueUp(t, s, i+1) // arrival order is the order of steps
			}
			before := s.Stats()
			release()
			require.NoError(t, (<-first).err)
			// The same sequence through the core.
			states := map[string]core.State{}
			for i, st := range steps {
				r := <-chans[i]
				ss := make([]core.State, len(st.names))
				for j, n := range st.names {
					ss[j] = states[n]
				}
				want := make([]core.Decision, len(st.limits))
				var idx int
				var err error
				if st.op == store.Peek {
					idx, err = core.PeekAll(st.limits, ss, t0, st.cost, want)
				} else {
					idx, err = core.TakeAll(st.limits, ss, t0, st.cost, want)
				}
				if err != nil {
					require.ErrorIs(t, r.err, err, "step %d", i)
					continue
				}
				require.NoError(t, r.err, "step %d", i)
				require.Equal(t, want[idx], r.d, "step %d", i)
				require.Equal(t, want, eaches[i], "step %d", i)
				if st.op == store.Take && want[idx].Allowed {
					for j, n := range st.names {
						states[n] = ss[j]
					}
				}
			}
			after := s.Stats()
			require.Equal(t, int64(1), after.Batches-before.Batches, "the queued requests went out in one statement")
		})
	}
}

// TestBatchedCancel: a caller canceled while queued returns its context's
// error at once (not an outage) and is not charged; the rest of its batch is
// decided.
func TestBatchedCancel(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	for _, m := range modes[:2] {
		t.Run(m.name, func(t *testing.T) {
			s := newBatched(t, pool, m.cfg, pgstore.BatchConfig{MaxInFlight: 1})
			blocker := fmt.Sprintf("bcancel-block-%s-%d", m.name, time.Now().UnixNano())
			key := fmt.Sprintf("bcancel-%s-%d", m.name, time.Now().UnixNano())
			release := hold(t, pool, blocker)
			lim := core.Limit{Algorithm: core.FixedWindow, Limit: 10, Window: 3_600_000_000}
			first := decideAsync(s, context.Background(), blocker, lim, 1)
			await.Until(t, "the blocked statement in flight", func() bool { return pgstore.QueueLen(s) == 0 && pgstore.InFlight(s) == 1 })
			ctx, cancel := context.WithCancel(context.Background())
			gone := decideAsync(s, ctx, key, lim, 4)
			queueUp(t, s, 1)
			stays := decideAsync(s, context.Background(), key, lim, 1)
			queueUp(t, s, 2)
			cancel()
			// The statement stays blocked until release: a canceled caller
			// that waited for it would never return.
			r := await.Recv(t, "the canceled caller to return while the statement is blocked", gone)
			require.ErrorIs(t, r.err, context.Canceled)
			require.False(t, errors.Is(r.err, store.ErrUnavailable))
			release()
			require.NoError(t, (<-first).err)
			r = <-stays
			require.NoError(t, r.err)
			require.Equal(t, int64(9), r.d.Remaining, "the canceled request was not charged")
		})
	}
}

// TestBatchedQueueTimeout: waiting in the queue longer than QueueTimeout
// is load (store.ErrBusy), not an outage.
func TestBatchedQueueTimeout(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	// The queue timeout must fire (the statement ahead stays blocked until
	// release); the statement's own Timeout is generous, so that the
	// blocked call outlasts the test's steps however slow the machine.
	s := newBatched(t, pool, pgstore.Config{RequestClock: true, Timeout: 10 * time.Minute, QueueTimeout: 300 * time.Millisecond},
		pgstore.BatchConfig{MaxInFlight: 1})
	blocker := fmt.Sprintf("bbusy-block-%d", time.Now().UnixNano())
	lim := core.Limit{Algorithm: core.FixedWindow, Limit: 10, Window: 3_600_000_000}
	// An open connection in the pool and a compiled statement: the blocked
	// call below must wait for the row, not for a new connection.
	require.NoError(t, (<-decideAsync(s, context.Background(), blocker, lim, 0)).err)
	release := hold(t, pgtest.Pool(t, database(t)), blocker) // from a pool of its own
	first := decideAsync(s, context.Background(), blocker, lim, 1)
	await.Until(t, "the blocked statement in flight", func() bool { return pgstore.QueueLen(s) == 0 && pgstore.InFlight(s) == 1 })
	r := <-decideAsync(s, context.Background(), "bbusy-other", lim, 1)
	require.ErrorIs(t, r.err, store.ErrBusy)
	require.False(t, errors.Is(r.err, store.ErrUnavailable))
	release()
	require.NoError(t, (<-first).err)
}

// TestBatchedConnectionCut: the connection of a statement carrying several
// requests dies mid-statement: every request of the batch gets
// store.ErrUnavailable and none is charged; later ones, queued behind it,
// fail the same way while the database is unreachable; behind failover
// they are answered from memory; after the restore PostgreSQL decides again.
func TestBatchedConnectionCut(t *testing.T) {
	u := database(t)
	direct := pgtest.Pool(t, u)
	pu, _ := url.Parse(u)
	proxy, err := tcpproxy.New(pu.Host)
	require.NoError(t, err)
	defer proxy.Close()
	pu.Host = proxy.Addr()
	q := pu.Query()
	q.Set("application_name", "rl-batch-cut")
	pu.RawQuery = q.Encode()
	pool := pgtest.Pool(t, pu.String())
	for _, m := range modes[:2] {
		t.Run(m.name, func(t *testing.T) {
			cfg := m.cfg
			cfg.Timeout = 10 * time.Minute // the batch stays blocked until the cut, however slow the machine
			s := newBatched(t, pool, cfg, pgstore.BatchConfig{MaxInFlight: 1})
			lim := core.Limit{Algorithm: core.FixedWindow, Limit: 100, Window: 3_600_000_000}
			first := fmt.Sprintf("bcut-first-%s-%d", m.name, time.Now().UnixNano())
			key := fmt.Sprintf("bcut-%s-%d", m.name, time.Now().UnixNano())
			releaseFirst := hold(t, direct, first)
			releaseKey := hold(t, direct, key)
			r0 := decideAsync(s, context.Background(), first, lim, 1)
			await.Until(t, "the blocked statement in flight", func() bool { return pgstore.QueueLen(s) == 0 && pgstore.InFlight(s) == 1 })
			var chans []chan result
			for i := range 8 {
				chans = append(chans, decideAsync(s, context.Background(), key, lim, 1))
				queueUp(t, s, i+1)
			}
			before := s.Stats()
			releaseFirst()
			require.NoError(t, (<-r0).err)
			// The batch of 8 is now in flight, waiting for key's row.
			// Stats counts batches and requests in two steps: wait for both.
			await.Until(t, "the batch of 8 in flight", func() bool {
				st := s.Stats()
				return pgstore.QueueLen(s) == 0 && st.Batches > before.Batches && st.Requests >= before.Requests+8
			})
			require.Equal(t, before.Requests+8, s.Stats().Requests)
			const waiting = "FROM pg_stat_activity WHERE application_name = 'rl-batch-cut' AND wait_event_type = 'Lock'"
			await.Until(t, "the batch's statement to wait for the row", func() bool {
				var n int
				return direct.QueryRow(context.Background(), "SELECT count(*) "+waiting).Scan(&n) == nil && n == 1
			})
			proxy.Cut()
			// The server has not noticed yet: end the statement's session
			// as a real network failure eventually would.
			_, err := direct.Exec(context.Background(), "SELECT pg_terminate_backend(pid) "+waiting)
			require.NoError(t, err)
			for _, ch := range chans {
				r := <-ch
				require.ErrorIs(t, r.err, store.ErrUnavailable)
			}
			// Queued behind the dead database: unavailable too, promptly
			// (the cut, not a timeout).
			r := <-decideAsync(s, context.Background(), key, lim, 1)
			require.ErrorIs(t, r.err, store.ErrUnavailable)
			require.False(t, errors.Is(r.err, context.DeadlineExceeded), "%v", r.err)
			// Failover answers from memory meanwhile.
			fo, err := failover.New(failover.Config{Primary: s, Fallback: memstore.New(nil), Threshold: 1, Cooldown: 100 * time.Millisecond})
			require.NoError(t, err)
			r = <-decideAsync(fo, context.Background(), key, lim, 1)
			require.NoError(t, r.err)
			require.True(t, r.d.Allowed)
			proxy.Restore()
			releaseKey()
			await.Until(t, "a decision on PostgreSQL after the restore", func() bool {
				r := <-decideAsync(s, context.Background(), key, lim, 0)
				return r.err == nil
			})
			// Nothing of the cut batch was charged.
			var x int64
			require.NoError(t, direct.QueryRow(context.Background(), "SELECT x FROM rl.state WHERE key = $1 AND name = 'default'", key).Scan(&x))
			require.Zero(t, x)
		})
	}
}

// TestBatchedNoDeadlock mixes batched multi-limit calls (both paths, limits
// in different orders), single-request calls, resets and rl.lock_states on
// a few keys from many goroutines: no deadlock, no error.
func TestBatchedNoDeadlock(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	// Opening connections on a loaded machine can take longer than the
	// default queue bound: only the test's deadline bounds the wait.
	const q = -1
	stores := []store.Store{
		newBatched(t, pool, pgstore.Config{Mode: pgstore.ModeSQL, RequestClock: true, QueueTimeout: q}, pgstore.BatchConfig{MaxInFlight: 3}),
		newBatched(t, pool, pgstore.Config{Mode: pgstore.ModeGo, RequestClock: true, QueueTimeout: q}, pgstore.BatchConfig{MaxInFlight: 3}),
		newStore(t, pool, pgstore.Config{Mode: pgstore.ModeSQL, RequestClock: true, QueueTimeout: q}),
		newStore(t, pool, pgstore.Config{Mode: pgstore.ModeGo, RequestClock: true, QueueTimeout: q}),
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
		{[]string{"B", "a", "c"}, []core.Limit{b, a, c}},
	}
	prefix := fmt.Sprint("bdl-", time.Now().UnixNano())
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				s := stores[(g+i)%len(stores)]
				o := orders[(g*7+i)%len(orders)]
				key := fmt.Sprint("k", (g+i)%5)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				var err error
				switch {
				case (g+i)%13 == 0:
					err = s.Reset(ctx, prefix, key, o.names)
				case (g+i)%17 == 0:
					err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, "SELECT count(*) FROM rl.lock_states($1, $2)", pgstore.FullKey(prefix, key), o.names)
						return err
					})
				default:
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

// TestDecideBatchSQL calls rl.rl_decide_batch directly: rows in input
// order, one error row for an invalid request, a tenant held to its prefix
// (42501 for the other key, the rest decided), and a request time ignored
// for a role that is not trusted.
func TestDecideBatchSQL(t *testing.T) {
	u := newMigrated(t) // a database of its own: it lists a tenant
	pool := pgtest.Pool(t, u)
	ctx := context.Background()
	role := fmt.Sprintf("rl_batch_tenant_%d", time.Now().UnixNano())
	_, err := pool.Exec(ctx, "CREATE ROLE "+role+" NOLOGIN IN ROLE rl_app")
	require.NoError(t, err)
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
	_, err = pool.Exec(ctx, "INSERT INTO rl.tenants VALUES ($1::regrole, 'tx:')", role)
	require.NoError(t, err)
	t.Cleanup(func() { pool.Exec(context.Background(), "DELETE FROM rl.tenants") })

	type row struct {
		req       int32
		ord       *int32
		allowed   bool
		remaining *int64
		now       *int64
		code      *string
	}
	call := func(q pgx.Tx) []row {
		rows, err := q.Query(ctx, `SELECT req, ord, allowed, remaining, now_us, error_code FROM rl.rl_decide_batch(
			ARRAY['tx:a', 'tx:a', 'other', '', 'tx:b', 'tx:a'], ARRAY['d', 'd', 'd', 'd', 'd', 'e', 'd'],
			ARRAY[1, 1, 1, 1, 1, 1, 1], ARRAY[2, 2, 2, 2, 2, 5, 2]::bigint[], ARRAY[1000000, 1000000, 1000000, 1000000, 0, 1000000, 1000000]::bigint[],
			ARRAY[0, 0, 0, 0, 0, 0, 0]::bigint[], NULL, ARRAY[1, 1, 1, 1, 2, 1], ARRAY[5, 5, 5, 5, 5, 5]::bigint[])`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			return x, r.Scan(&x.req, &x.ord, &x.allowed, &x.remaining, &x.now, &x.code)
		})
		require.NoError(t, err)
		return out
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SET LOCAL ROLE "+role)
	require.NoError(t, err)
	got := call(tx)
	require.Len(t, got, 6)
	code := func(i int) string {
		if got[i].code == nil {
			return ""
		}
		return *got[i].code
	}
	for i, want := range []struct {
		req       int32
		allowed   bool
		remaining int64
		code      string
	}{
		{0, true, 1, ""}, {1, true, 0, ""}, {2, false, 0, "42501"}, {3, false, 0, "RL011"},
		{4, false, 0, "RL003"}, // the invalid window of its first limit
		{5, false, 0, ""},      // tx:a has none left: denied, in order after requests 0 and 1
	} {
		require.Equal(t, want.req, got[i].req, "row %d", i)
		require.Equal(t, want.code, code(i), "row %d", i)
		if want.code == "" {
			require.Equal(t, want.allowed, got[i].allowed, "row %d", i)
			require.Equal(t, want.remaining, *got[i].remaining, "row %d", i)
			require.Greater(t, *got[i].now, int64(5), "an untrusted role's request time is ignored")
		}
	}
	require.NoError(t, tx.Rollback(ctx))

	// The Go path's functions are for trusted roles only.
	for _, q := range []string{"SELECT count(*) FROM rl.lock_states_batch(ARRAY['tx:a'], ARRAY['d'])",
		"SELECT rl.drop_fresh_states(ARRAY['tx:a'], ARRAY['d'])"} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SET LOCAL ROLE "+role)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, q)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, q)
		require.Equal(t, "42501", pe.Code, q)
		require.NoError(t, tx.Rollback(ctx))
	}
}

// refusingDecider is the native core, except that it counts its takes and
// settles and refuses cost 7777, which the core would accept.
type refusingDecider struct{ takes, settles atomic.Int64 }

func (d *refusingDecider) TakeAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	d.takes.Add(1)
	if cost == 7777 {
		return 0, core.ErrCost
	}
	return core.TakeAll(ls, ss, now, cost, ds)
}

func (d *refusingDecider) PeekAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	return core.PeekAll(ls, ss, now, cost, ds)
}

func (d *refusingDecider) SettleAll(ls []core.Limit, ss []core.State, now, delta int64, ds []core.Decision) (int, error) {
	d.settles.Add(1)
	if delta == 7777 {
		return 0, core.ErrCost
	}
	return core.SettleAll(ls, ss, now, delta, ds)
}

// TestBatchedGoPathUsesItsDecider: in batches of several requests (not only
// the single-request statement the conformance suite reaches), the Go path
// decides and settles with the store's decider, and its answers are each
// request's own.
func TestBatchedGoPathUsesItsDecider(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	d := &refusingDecider{}
	s := newBatched(t, pool, pgstore.Config{Mode: pgstore.ModeGo, RequestClock: true, Decider: d}, pgstore.BatchConfig{MaxInFlight: 1})
	lim := []core.Limit{{Algorithm: core.GCRA, Limit: 1000, Window: 1_000_000}}
	prefix := fmt.Sprintf("bspy-%d-", time.Now().UnixNano())
	const n = 64
	before := s.Stats()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			cost, op := int64(1), store.Take
			if i%4 == 0 {
				cost = 7777
			}
			if i%8 < 2 {
				op = store.Settle
			}
			_, got, err := s.Decide(context.Background(), store.Request{Key: prefix + fmt.Sprint(i), Policy: store.MustPolicy([]string{"default"}, lim...), Op: op, Now: t0, Cost: cost}, nil)
			if cost == 7777 {
				assert.ErrorIs(t, err, core.ErrCost, "request %d", i)
			} else if assert.NoError(t, err, "request %d", i) {
				assert.True(t, got.Allowed, "request %d", i)
			}
		})
	}
	close(start)
	wg.Wait()
	after := s.Stats()
	require.Equal(t, int64(n), after.Requests-before.Requests)
	require.Less(t, after.Batches-before.Batches, int64(n), "no batch carried two decisions")
	require.Equal(t, int64(n*3/4), d.takes.Load())
	require.Equal(t, int64(n/4), d.settles.Load())
}

// TestBatchedShadowInOneBatch: calls of a policy with a shadow limit
// queued into one Go-path batch are decided in arrival order as one by one:
// the shadow limit charged only when its call is admitted and it admits
// itself; ModeSQL decides them too (rl_decide_batch's shadow flags).
func TestBatchedShadowInOneBatch(t *testing.T) {
	pool := pgtest.Pool(t, database(t))
	sql := newBatched(t, pool, modes[0].cfg, pgstore.BatchConfig{})
	sp := store.MustPolicy([]string{"default"}, core.Limit{Algorithm: core.FixedWindow, Limit: 3, Window: 60_000_000})
	shadowed, err := sp.WithShadow("default")
	require.NoError(t, err)
	_, got, err := sql.Decide(context.Background(), store.Request{Key: fmt.Sprintf("shadow-sql-%d", time.Now().UnixNano()), Policy: shadowed, Now: t0, Cost: 1}, nil)
	require.NoError(t, err)
	require.True(t, got.Allowed)

	s := newBatched(t, pool, modes[1].cfg, pgstore.BatchConfig{MaxInFlight: 1})
	blocker := fmt.Sprintf("shadow-block-%d", time.Now().UnixNano())
	key := fmt.Sprintf("shadow-batch-%d", time.Now().UnixNano())
	release := hold(t, pool, blocker)
	fw := core.Limit{Algorithm: core.FixedWindow, Limit: 3, Window: 3_600_000_000}
	first := decideAsync(s, context.Background(), blocker, fw, 1)
	await.Until(t, "the blocked statement in flight", func() bool { return pgstore.QueueLen(s) == 0 && pgstore.InFlight(s) == 1 })
	names := []string{"enforced", "candidate"}
	plain := store.MustPolicy(names, fw, core.Limit{Algorithm: core.SlidingLog, Limit: 2, Window: 3_600_000_000})
	p, err := plain.WithShadow("candidate")
	require.NoError(t, err)
	type step struct {
		p    *store.Policy
		op   store.Op
		cost int64
		// want: the call's Allowed, the candidate's Allowed, each limit's
		// Remaining
		allowed, candidate bool
		remaining          [2]int64
	}
	steps := []step{
		{p, store.Take, 1, true, true, [2]int64{2, 1}},
		{p, store.Take, 2, true, false, [2]int64{0, 1}}, // a would-deny: the candidate keeps its 1
		{p, store.Take, 1, false, true, [2]int64{0, 0}}, // denied: the candidate peeked, not charged
		{plain, store.Peek, 0, true, true, [2]int64{0, 1}},
	}
	chans := make([]chan result, len(steps))
	eaches := make([][]core.Decision, len(steps))
	for i, st := range steps {
		ch := make(chan result, 1)
		chans[i] = ch
		eaches[i] = make([]core.Decision, 2)
		go func() {
			_, d, err := s.Decide(context.Background(), store.Request{Key: key, Policy: st.p, Op: st.op, Now: t0, Cost: st.cost}, eaches[i])
			ch <- result{d, err}
		}()
		queueUp(t, s, i+1)
	}
	before := s.Stats()
	release()
	require.NoError(t, (<-first).err)
	for i, st := range steps {
		r := <-chans[i]
		require.NoError(t, r.err, "step %d", i)
		require.Equal(t, st.allowed, r.d.Allowed, "step %d", i)
		require.Equal(t, st.candidate, eaches[i][1].Allowed, "step %d: the candidate", i)
		require.Equal(t, st.remaining, [2]int64{eaches[i][0].Remaining, eaches[i][1].Remaining}, "step %d", i)
	}
	require.Equal(t, int64(1), s.Stats().Batches-before.Batches, "the queued requests went out in one statement")
}
