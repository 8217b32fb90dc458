package migrations_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/await"
)

var algorithms = []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket", "gcra"}

// now is fixed in these tests so that time does not move: exactly the limit
// may pass.
const concNow = int64(1767225600000000)

// waitsForLock reports whether conn's session is waiting for a lock (seen
// from another session).
func waitsForLock(t *testing.T, conn *pgx.Conn) bool {
	t.Helper()
	var waiting bool
	require.NoError(t, db.QueryRow(context.Background(),
		"SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity WHERE pid = $1", conn.PgConn().PID()).Scan(&waiting))
	return waiting
}

func uniqueKey(prefix string) string {
	return fmt.Sprintf("%s:%x", prefix, rand.Uint64())
}

// hammer calls rl_allow_us on key from workers goroutines per pool, calls
// times each, and returns how many were allowed.
func hammer(t *testing.T, pools []*pgxpool.Pool, workers, calls int, key, alg string, limit int64) int64 {
	t.Helper()
	var (
		allowed atomic.Int64
		wg      sync.WaitGroup
		errs    = make(chan error, workers*len(pools))
	)
	for _, p := range pools {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range calls {
					var ok bool
					err := p.QueryRow(context.Background(),
						`SELECT allowed FROM rl.rl_allow_us($1, $2, $3, 60000000, 1, 0, 'default', $4)`,
						key, alg, limit, concNow).Scan(&ok)
					if err != nil {
						errs <- err
						return
					}
					if ok {
						allowed.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return allowed.Load()
}

// TestConcurrentExactlyLimit: 32 goroutines taking from one new key admit
// exactly the limit, for every algorithm.
func TestConcurrentExactlyLimit(t *testing.T) {
	t.Parallel()
	for _, alg := range algorithms {
		key := uniqueKey("conc")
		got := hammer(t, []*pgxpool.Pool{db}, 32, 8, key, alg, 100)
		require.Equal(t, int64(100), got, alg)
	}
}

// TestTwoInstancesShareOneLimit: two pools, as two app instances would
// have, share one limit exactly.
func TestTwoInstancesShareOneLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var pools []*pgxpool.Pool
	for range 2 {
		cfg, err := pgxpool.ParseConfig(dbURL)
		require.NoError(t, err)
		cfg.MaxConns = 8
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		defer p.Close()
		pools = append(pools, p)
	}
	for _, alg := range algorithms {
		key := uniqueKey("two")
		got := hammer(t, pools, 8, 20, key, alg, 100)
		require.Equal(t, int64(100), got, alg)
	}
}

// TestConcurrentMulti: concurrent all-or-nothing calls over two limits,
// listed in both orders, neither deadlock nor over-admit nor consume the
// other limit's quota when denied.
func TestConcurrentMulti(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := uniqueKey("multi")
	ab := `[{"name":"a","algorithm":"token_bucket","limit":100,"window_us":60000000},
	        {"name":"b","algorithm":"fixed_window","limit":50,"window_us":60000000}]`
	ba := `[{"name":"b","algorithm":"fixed_window","limit":50,"window_us":60000000},
	        {"name":"a","algorithm":"token_bucket","limit":100,"window_us":60000000}]`
	var (
		allowed atomic.Int64
		wg      sync.WaitGroup
		errs    = make(chan error, 32)
	)
	for i := range 32 {
		limits := ab
		if i%2 == 1 {
			limits = ba
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 6 {
				var ok bool
				err := db.QueryRow(ctx, `SELECT bool_and(allowed) FROM rl.rl_allow_multi($1, $2::jsonb, 1, $3)`,
					key, limits, concNow).Scan(&ok)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(50), allowed.Load())
	var remaining int64
	require.NoError(t, db.QueryRow(ctx, `SELECT remaining FROM rl.rl_peek_us($1, 'token_bucket', 100, 60000000, 0, 0, 'a', $2)`,
		key, concNow).Scan(&remaining))
	require.Equal(t, int64(50), remaining, "denied calls must not consume the other limit")
}

// TestCreateRace: two sessions create the same key at once. The second
// waits for the first, then decides against its committed row.
func TestCreateRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call string
	}{
		{"single", `SELECT bool_and(allowed) FROM rl.rl_allow_us($1, 'fixed_window', 1, 60000000, 1, 0, 'default', $2)`},
		{"multi-ab", `SELECT bool_and(allowed) FROM rl.rl_allow_multi($1,
			'[{"name":"a","algorithm":"fixed_window","limit":1,"window_us":60000000},
			  {"name":"b","algorithm":"gcra","limit":5,"window_us":60000000}]', 1, $2)`},
		{"multi-ba", `SELECT bool_and(allowed) FROM rl.rl_allow_multi($1,
			'[{"name":"b","algorithm":"gcra","limit":5,"window_us":60000000},
			  {"name":"a","algorithm":"fixed_window","limit":1,"window_us":60000000}]', 1, $2)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey("race")
			a, b := connect(t, dbURL), connect(t, dbURL)
			txA, err := a.Begin(ctx)
			require.NoError(t, err)
			var ok bool
			require.NoError(t, txA.QueryRow(ctx, tc.call, key, concNow).Scan(&ok))
			require.True(t, ok)

			type result struct {
				ok  bool
				err error
			}
			done := make(chan result, 1)
			go func() {
				var r result
				r.err = b.QueryRow(ctx, tc.call, key, concNow).Scan(&r.ok)
				done <- r
			}()
			// The second session must be seen waiting for the first's lock
			// (an event, however slow the machine), never answer first.
			await.Until(t, "the second session to wait for the first's lock", func() bool {
				select {
				case r := <-done:
					t.Fatalf("second session did not wait for the first: %+v", r)
				default:
				}
				return waitsForLock(t, b)
			})
			require.NoError(t, txA.Commit(ctx))
			r := await.Recv(t, "the second session to answer once the first committed", done)
			require.NoError(t, r.err)
			require.False(t, r.ok, "the limit of 1 was taken by the first session")
			var x int64
			require.NoError(t, db.QueryRow(ctx, `SELECT x FROM rl.state WHERE key = $1 AND name IN ('default', 'a')`, key).Scan(&x))
			require.Equal(t, int64(1), x)
		})
	}
}

// TestCreateRaceRepeatableRead: under REPEATABLE READ the loser cannot see
// the winner's row and gets a serialization failure (40001) to retry.
func TestCreateRaceRepeatableRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := uniqueKey("rr")
	call := `SELECT allowed FROM rl.rl_allow_us($1, 'fixed_window', 1, 60000000, 1, 0, 'default', $2)`
	a, b := connect(t, dbURL), connect(t, dbURL)
	txA, err := a.Begin(ctx)
	require.NoError(t, err)
	var ok bool
	require.NoError(t, txA.QueryRow(ctx, call, key, concNow).Scan(&ok))
	require.True(t, ok)
	txB, err := b.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer txB.Rollback(ctx)
	_, err = txB.Exec(ctx, "SELECT 1") // take the snapshot now
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- txB.QueryRow(ctx, call, key, concNow).Scan(&ok) }()
	await.Until(t, "the loser to wait for the winner's row", func() bool { return waitsForLock(t, b) })
	require.NoError(t, txA.Commit(ctx))
	err = <-done
	require.Equal(t, "40001", sqlState(err), "%v", err)
}

// TestPeekTakesNoLock: a peek answers while another transaction holds the
// row, and a denied call writes nothing.
func TestPeekTakesNoLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := uniqueKey("peek")
	a := connect(t, dbURL)
	tx, err := a.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SELECT rl.rl_allow_us($1, 'token_bucket', 2, 1000000, 2, 0, 'default', $2)`, key, concNow)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	tx, err = a.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SELECT 1 FROM rl.state WHERE key = $1 FOR UPDATE`, key)
	require.NoError(t, err)
	// The peek must answer while the row is held: seen waiting for a lock
	// instead, it fails at once (no time bound: the lock is held until the
	// test releases it).
	p := connect(t, dbURL)
	peeked := make(chan error, 1)
	var allowed bool
	go func() {
		peeked <- p.QueryRow(ctx, `SELECT allowed FROM rl.rl_peek_us($1, 'token_bucket', 2, 1000000, 1, 0, 'default', $2)`,
			key, concNow).Scan(&allowed)
	}()
	var perr error
	await.Until(t, "the peek to answer", func() bool {
		select {
		case perr = <-peeked:
			return true
		default:
		}
		require.False(t, waitsForLock(t, p), "the peek waits for the row's lock")
		return false
	})
	require.NoError(t, perr)
	require.False(t, allowed)
	require.NoError(t, tx.Rollback(ctx))

	var xmin1, xmin2 string
	require.NoError(t, db.QueryRow(ctx, `SELECT xmin::text FROM rl.state WHERE key = $1`, key).Scan(&xmin1))
	require.NoError(t, db.QueryRow(ctx, `SELECT allowed FROM rl.rl_allow_us($1, 'token_bucket', 2, 1000000, 1, 0, 'default', $2)`,
		key, concNow).Scan(&allowed))
	require.False(t, allowed)
	require.NoError(t, db.QueryRow(ctx, `SELECT xmin::text FROM rl.state WHERE key = $1`, key).Scan(&xmin2))
	require.Equal(t, xmin1, xmin2, "a denied call must not write the row")
}

// TestNoDeadlocks mixes single-limit, multi-limit (random subsets of three
// names in random orders) and reset calls on a few keys, new ones appearing
// all the time: no call may fail (a deadlock would raise 40P01).
func TestNoDeadlocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	all := []string{"a", "b", "c"}
	algs := map[string]string{"a": "token_bucket", "b": "fixed_window", "c": "sliding_log"}
	var (
		wg   sync.WaitGroup
		errs = make(chan error, 16)
	)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range 40 {
				key := fmt.Sprintf("dl:%d:%d", i/10, r.IntN(2))
				var err error
				switch x := r.IntN(10); {
				case x == 0:
					_, err = db.Exec(ctx, `SELECT rl.rl_reset($1)`, key)
				case x < 4:
					n := all[r.IntN(3)]
					_, err = db.Exec(ctx, `SELECT rl.rl_allow_us($1, $2, 5, 60000000, 1, 0, $3, $4)`, key, algs[n], n, concNow)
				default:
					names := slices.Clone(all)
					r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
					names = names[:1+r.IntN(3)]
					var b strings.Builder
					b.WriteString("[")
					for j, n := range names {
						if j > 0 {
							b.WriteString(",")
						}
						fmt.Fprintf(&b, `{"name":%q,"algorithm":%q,"limit":5,"window_us":60000000}`, n, algs[n])
					}
					b.WriteString("]")
					_, err = db.Exec(ctx, `SELECT * FROM rl.rl_allow_multi($1, $2::jsonb, $3, $4)`,
						key, b.String(), r.Int64N(3), concNow)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestDeniedMultiLeavesNothing: a denied all-or-nothing call on a new key
// creates no rows.
func TestDeniedMultiLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := uniqueKey("nothing")
	var allowed bool
	require.NoError(t, db.QueryRow(ctx, `SELECT bool_and(allowed) FROM rl.rl_allow_multi($1,
		'[{"name":"a","algorithm":"gcra","limit":5,"window_us":1000000},
		  {"name":"b","algorithm":"fixed","limit":2,"window_us":1000000}]', 3, $2)`, key, concNow).Scan(&allowed))
	require.False(t, allowed)
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM rl.state WHERE key = $1`, key).Scan(&n))
	require.Zero(t, n)
}
