package rlqs

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	"github.com/rlcore/rl/internal/request/quota"
	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/internal/testkit/pgtest"
)

// openAs opens a stream presenting client ID id in the metadata the
// servers of these tests read (Config.ClientIDMetadata).
func (f *fixture) openAs(t *testing.T, id string) (stream, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s, err := f.client.StreamRateLimitQuotas(metadata.AppendToOutgoingContext(ctx, "x-rlqs-client", id))
	require.NoError(t, err)
	return s, cancel
}

// A second server over the same database takes over a client's stream: it
// knows the client's grant (no hold after its start, the same grant
// extended at once) and the commitments of the others (a newcomer waits
// for a cut, as on the first server).
func TestPGStoreTakeover(t *testing.T) {
	pool := migratedPool(t)
	set := func(c *Config) { c.Store, c.KeepsState, c.ClientIDMetadata = NewPGStore(pool), true, "x-rlqs-client" }
	a := newFixtureCfg(t, set)

	e1, dropE1 := a.openAs(t, "e1")
	report(t, e1, api, 0, 1, 0)
	g1, _, _ := tokenBucket(t, e1)
	require.Equal(t, uint32(6000), g1.TokensPerFill.GetValue())

	// Server A goes away: e1's stream ends, and A marks e1 gone.
	dropE1()
	store := NewPGStore(pool)
	gone := func() bool {
		var g bool
		require.NoError(t, store.Update(context.Background(), apiKey, nil, func(e *Entry) {
			g = client(e, "id:e1").Gone
		}))
		return g
	}
	await.Until(t, "server A to close e1's stream", gone)

	// Server B, a second later by its own clock (the same one here).
	b := newFixtureCfg(t, set)
	b.now.Store(t0 + quota.Second)
	e1b, _ := b.openAs(t, "e1")
	report(t, e1b, api, 100, 0, 1)
	ext, _, _ := tokenBucket(t, e1b)
	require.Equal(t, g1.TokensPerFill.GetValue(), ext.TokensPerFill.GetValue(), "the same grant: B continued A's division")
	require.Equal(t, g1.MaxTokens, ext.MaxTokens)

	// A newcomer on B: e1 is cut on its stream with B, the newcomer gets
	// nothing until the cut is acknowledged.
	e2, _ := b.openAs(t, "e2")
	report(t, e2, api, 0, 1, 0)
	cut, _, _ := tokenBucket(t, e1b)
	require.Less(t, cut.TokensPerFill.GetValue(), g1.TokensPerFill.GetValue())
	report(t, e2, map[string]string{"name": "other"}, 1, 0, 0)
	tb, _, id := tokenBucket(t, e2)
	require.Nil(t, tb)
	require.Equal(t, "other", id["name"], "e2 was granted before e1's cut was acknowledged")
}

// apiKey is the Store's key of the bucket {name: api} in domain envoy.
var apiKey = "envoy\x00" + canonical(&rlqsv3.BucketId{Bucket: api})

// Two servers' stores update one bucket at once, from its creation on:
// the bucket's row lock serialises them, so no report is lost (nor any
// change of the limit, each Update adding a token to the burst), and a
// report applied twice (the same sequence number) counts once.
func TestPGStoreConcurrent(t *testing.T) {
	pool := migratedPool(t)
	stores := []*PGStore{NewPGStore(pool), NewPGStore(migratedPoolOn(t, pool))}
	const clients, reports = 6, 20
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[i%len(stores)]
			id := fmt.Sprintf("c%d", i)
			for seq := uint64(1); seq <= reports; seq++ {
				for range 2 { // every report twice
					err := s.Update(context.Background(), apiKey, newEntry("api", testLimit), func(e *Entry) {
						e.Bucket.Report(id, seq, 1, 1, t0) // one clock instant: nothing is measured, Used sums
						e.Bucket.Step(t0)
						l := e.Bucket.Limit()
						l.Burst++
						if err := e.Bucket.SetLimit(l); err != nil {
							panic(err)
						}
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var sent quota.Grant
	require.NoError(t, stores[0].Update(context.Background(), apiKey, nil, func(e *Entry) {
		require.Equal(t, testLimit.Burst+2*clients*reports, e.Bucket.Limit().Burst, "an Update lost")
		require.Len(t, e.Bucket.Clients(), clients)
		for _, c := range e.Bucket.Clients() {
			// The first report makes the client and counts nothing.
			require.Equal(t, uint64(2*(reports-1)), c.Used, "client %s", c.ID)
			require.Equal(t, uint64(reports), c.Seq)
			sent.Fill += c.Sent.Fill
			sent.Tokens += c.Sent.Tokens
		}
		c := e.Bucket.Committed(t0)
		require.LessOrEqual(t, c.Fill, testLimit.Fill)
		require.LessOrEqual(t, c.Tokens, e.Bucket.Limit().Burst)
	}))
	require.LessOrEqual(t, sent.Fill, testLimit.Fill)
}

// migratedPoolOn opens a second pool on the database of p, as a second
// server would.
func migratedPoolOn(t *testing.T, p *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	q, err := pgxpool.NewWithConfig(context.Background(), p.Config())
	require.NoError(t, err)
	t.Cleanup(q.Close)
	return q
}

// A client that reconnects keeps numbering its reports where its previous
// stream stopped, so the first report on the new stream counts even when
// the clock has not moved (a repeat would be ignored).
func TestReconnectCountsEveryReport(t *testing.T) { eachStore(t, testReconnectCountsEveryReport) }

func testReconnectCountsEveryReport(t *testing.T, newStore func(*testing.T) Store) {
	store := newStore(t)
	f := newFixtureCfg(t, func(c *Config) { c.Store, c.KeepsState, c.ClientIDMetadata = store, true, "x-rlqs-client" })
	s1, _ := f.openAs(t, "e1")
	report(t, s1, api, 0, 1, 0) // creates the client: counts nothing
	_, _, _ = tokenBucket(t, s1)
	report(t, s1, api, 5, 0, 0)
	_, _, _ = tokenBucket(t, s1)
	s2, _ := f.openAs(t, "e1")
	report(t, s2, api, 7, 0, 0)
	_, _, _ = tokenBucket(t, s2)
	require.NoError(t, store.Update(context.Background(), apiKey, nil, func(e *Entry) {
		require.Equal(t, uint64(5+7), client(e, "id:e1").Used)
	}))
}

// A database that never answers fails each operation after its timeout,
// rather than holding a report's stream or the tick forever.
func TestPGStoreHungDatabase(t *testing.T) {
	pgtest.SkipShort(t)
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + pgtest.HungServer(t) + "/db?sslmode=disable")
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := NewPGStore(pool)
	s.timeout = 200 * time.Millisecond
	err = s.Update(context.Background(), apiKey, newEntry("api", testLimit), func(*Entry) { t.Error("fn ran") })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = s.Keys(context.Background())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = s.Len(context.Background())
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
