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

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/failover"
	"github.com/rlcore/rl/internal/testkit/tcpproxy"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/pgstore"
	"github.com/rlcore/rl/sql/plproxy"
	"github.com/rlcore/rl/sql/plproxy/plproxytest"
	"github.com/rlcore/rl/store"
	"github.com/rlcore/rl/store/storetest"
)

// smallPool opens a pool of at most max connections, closed when the test
// ends (the test server has 100 connections for every package's tests).
func smallPool(t testing.TB, u string, max int32) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(u)
	require.NoError(t, err)
	cfg.MaxConns = max
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// shardedOver returns a Sharded store with one *pgstore.Store per shard,
// in the cluster's partition order.
//
// The stores of these tests wait for a connection as long as it takes
// (QueueTimeout -1): on a loaded test machine opening one can take over the
// default second, and the tests are about decisions, not queueing.
func shardedOver(t testing.TB, c *plproxytest.Cluster, cfg pgstore.Config, shards []string) *pgstore.Sharded {
	cfg.QueueTimeout = -1
	var stores []store.Store
	for _, u := range shards {
		stores = append(stores, newStore(t, smallPool(t, u, 8), cfg))
	}
	parts := make([]store.Store, c.Partitions)
	for i := range parts {
		parts[i] = stores[i%len(stores)]
	}
	s, err := pgstore.NewSharded(parts)
	require.NoError(t, err)
	return s
}

// TestShardedConformance runs the store suite over the sharded store (both
// paths, 8 partitions on 2 shards) and over a plain Store on the router
// database (the SQL path through PL/Proxy).
func TestShardedConformance(t *testing.T) {
	c := plproxytest.New(t, 2, 8)
	for _, m := range modes[:2] {
		t.Run("sharded/"+m.name, func(t *testing.T) {
			s := shardedOver(t, c, m.cfg, c.Shards)
			cfg := storetest.Config{New: func(t *testing.T) store.Store { return s }}
			storetest.Run(t, cfg)
		})
	}
	t.Run("router/sql", func(t *testing.T) {
		s := newStore(t, smallPool(t, c.Router, 8), pgstore.Config{RequestClock: true, QueueTimeout: -1})
		storetest.Run(t, storetest.Config{New: func(t *testing.T) store.Store { return s }})
		n, err := s.Expire(context.Background())
		require.NoError(t, err)
		require.GreaterOrEqual(t, n, int64(0))
	})
	t.Run("router/go", func(t *testing.T) {
		s := newStore(t, smallPool(t, c.Router, 2), pgstore.Config{Mode: pgstore.ModeGo})
		_, _, err := s.Decide(context.Background(), store.Request{Key: "k", Policy: store.MustPolicy([]string{"default"}, core.Limit{Algorithm: core.GCRA, Limit: 1, Window: 1_000_000}), Cost: 1}, nil)
		require.ErrorContains(t, err, "this database is a PL/Proxy router", "the Go path says why it cannot run on a router")
	})
}

func TestNewSharded(t *testing.T) {
	s := newStore(t, smallPool(t, database(t), 1), pgstore.Config{})
	for _, n := range []int{0, 3, 6} {
		_, err := pgstore.NewSharded(make([]store.Store, n))
		require.ErrorContains(t, err, "power of two")
	}
	_, err := pgstore.NewSharded([]store.Store{s, nil})
	require.ErrorContains(t, err, "partition 1 is nil")
	sh, err := pgstore.NewSharded([]store.Store{s, s, s, s})
	require.NoError(t, err)
	for _, k := range []string{"a", "user:42", "ключ"} {
		require.Equal(t, plproxy.Partition("api:"+k, 4), sh.Partition("api", k))
		require.Equal(t, plproxy.Partition(k, 4), sh.Partition("", k))
	}
}

// TestShardedWithRouter: 32 goroutines on one key, half deciding through
// the router (SQL) and half through the sharded store (Go path, row locks
// on the shard), admit exactly the limit together: both send the key to
// the same shard. Keys on every shard, every algorithm.
func TestShardedWithRouter(t *testing.T) {
	c := plproxytest.New(t, 2, 4)
	sharded := shardedOver(t, c, pgstore.Config{Mode: pgstore.ModeGo, RequestClock: true}, c.Shards)
	viaRouter := newStore(t, smallPool(t, c.Router, 8), pgstore.Config{RequestClock: true, QueueTimeout: -1})
	onShard := map[int]bool{}
	for i, alg := range algorithms {
		key := fmt.Sprintf("both-%s", alg)
		for c.ShardOf(pgstore.FullKey("p", key)) != i%2 {
			key += "+"
		}
		onShard[c.ShardOf(pgstore.FullKey("p", key))] = true
		lim := core.Limit{Algorithm: alg, Limit: 100, Window: 3_600_000_000}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 32)
		for g := range 32 {
			s := store.Store(sharded)
			if g%2 == 1 {
				s = viaRouter
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 8 {
					_, d, err := s.Decide(context.Background(), store.Request{Prefix: "p", Key: key, Policy: store.MustPolicy([]string{"default"}, lim), Now: t0, Cost: 1}, nil)
					if err != nil {
						errs <- fmt.Errorf("goroutine %d (%s): %w", g, map[bool]string{true: "router", false: "sharded"}[g%2 == 1], err)
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
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		require.Equal(t, int64(100), admitted.Load(), key)
	}
	require.Len(t, onShard, 2)
}

// TestShardedShardDown: one shard cut off. Its keys fail with
// store.ErrUnavailable and the other shard's keep deciding; with a
// failover store per shard, its keys fall back to memory while the other
// shard's stay on PostgreSQL.
func TestShardedShardDown(t *testing.T) {
	c := plproxytest.New(t, 2, 2)
	pu, err := url.Parse(c.Shards[1])
	require.NoError(t, err)
	px, err := tcpproxy.New(pu.Host)
	require.NoError(t, err)
	defer px.Close()
	pu.Host = px.Addr()
	// Generous: a timeout must never end a healthy call, and a call to the
	// cut shard must end by the cut (an error at once), never by it.
	cfg := pgstore.Config{Mode: pgstore.ModeGo, RequestClock: true, Timeout: 10 * time.Minute}
	pg := []store.Store{newStore(t, smallPool(t, c.Shards[0], 4), cfg), newStore(t, smallPool(t, pu.String(), 4), cfg)}
	plain, err := pgstore.NewSharded(pg)
	require.NoError(t, err)
	var fo []store.Store
	for _, s := range pg {
		f, err := failover.New(failover.Config{Primary: s, Fallback: memstore.New(nil), Threshold: 1, Cooldown: time.Hour})
		require.NoError(t, err)
		fo = append(fo, f)
	}
	withFailover, err := pgstore.NewSharded(fo)
	require.NoError(t, err)

	var keys [2][]string
	for i := 0; len(keys[0]) < 5 || len(keys[1]) < 5; i++ {
		k := fmt.Sprintf("down-%d", i)
		keys[plain.Partition("", k)] = append(keys[plain.Partition("", k)], k)
	}
	lim := core.Limit{Algorithm: core.FixedWindow, Limit: 1000, Window: 3_600_000_000}
	decide := func(s store.Store, k string) (core.Decision, error) {
		_, d, err := s.Decide(context.Background(), store.Request{Key: k, Policy: store.MustPolicy([]string{"default"}, lim),
			Now: t0, Cost: 1}, nil)
		return d, err
	}
	for _, ks := range keys {
		for _, k := range ks {
			_, err := decide(plain, k)
			require.NoError(t, err)
		}
	}
	px.Cut()
	for _, k := range keys[0] {
		d, err := decide(plain, k)
		require.NoError(t, err, "a key of the live shard")
		require.Equal(t, int64(998), d.Remaining)
		d, err = decide(withFailover, k)
		require.NoError(t, err)
		require.Equal(t, int64(997), d.Remaining, "still on PostgreSQL")
	}
	for _, k := range keys[1] {
		_, err := decide(plain, k)
		require.ErrorIs(t, err, store.ErrUnavailable, "a key of the cut shard")
		require.False(t, errors.Is(err, context.DeadlineExceeded), "failed by the cut, not a timeout: %v", err)
		d, err := decide(withFailover, k)
		require.NoError(t, err, "the failover of the cut shard answers")
		require.Equal(t, int64(999), d.Remaining, "from memory")
	}
	require.Equal(t, failover.Closed, fo[0].(*failover.Store).State())
	require.Equal(t, failover.Open, fo[1].(*failover.Store).State())
}
