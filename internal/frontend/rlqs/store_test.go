package rlqs

import (
	"context"
	"errors"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/rlcore/rl/internal/request/quota"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/migrations"
)

// stores are the Stores every store test and every behavioural test of the
// Server runs against.
var stores = []struct {
	name string
	new  func(*testing.T) Store
}{
	{"memory", func(*testing.T) Store { return NewMemStore() }},
	{"postgres", func(t *testing.T) Store { return NewPGStore(migratedPool(t)) }},
}

// eachStore runs test once per Store.
func eachStore(t *testing.T, test func(t *testing.T, newStore func(*testing.T) Store)) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) { test(t, s.new) })
	}
}

// migratedPool returns a small pool on a new database migrated to the
// latest version.
func migratedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	url := pgtest.NewDatabase(t)
	require.NoError(t, migrations.Up(context.Background(), url))
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 4
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

var testLimit = quota.Limit{Fill: 6000, FillInterval: 60 * quota.Second, Burst: 100}

// newEntry is a create function for a bucket named name dividing l.
func newEntry(name string, l quota.Limit) func() (*Entry, error) {
	return func() (*Entry, error) {
		b, err := quota.NewBucket(l, quota.Config{})
		return &Entry{ID: &rlqsv3.BucketId{Bucket: map[string]string{"name": name}}, Bucket: b}, err
	}
}

// client returns the state of client id in e, or nil.
func client(e *Entry, id string) *quota.Client {
	for _, c := range e.Bucket.Clients() {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// The Store contract, for every Store: entries are created on demand,
// kept with every field between Updates, and dropped once empty.
func TestStoreContract(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(*testing.T) Store) {
		ctx := context.Background()
		s := newStore(t)
		keyA, keyB := "envoy\x00a", "envoy\x00b" // keys hold a zero byte
		now := t0

		t.Run("no create, no entry", func(t *testing.T) {
			ran := false
			require.NoError(t, s.Update(ctx, keyA, nil, func(*Entry) { ran = true }))
			require.False(t, ran)
			n, err := s.Len(ctx)
			require.NoError(t, err)
			require.Zero(t, n)
		})
		t.Run("create fails", func(t *testing.T) {
			boom := errors.New("boom")
			err := s.Update(ctx, keyA, func() (*Entry, error) { return nil, boom }, func(*Entry) { t.Fatal("fn ran") })
			require.ErrorIs(t, err, boom)
			keys, err := s.Keys(ctx)
			require.NoError(t, err)
			require.Empty(t, keys)
		})
		t.Run("created empty is not kept", func(t *testing.T) {
			require.NoError(t, s.Update(ctx, keyA, newEntry("a", testLimit), func(*Entry) {}))
			n, err := s.Len(ctx)
			require.NoError(t, err)
			require.Zero(t, n)
		})
		t.Run("kept between updates", func(t *testing.T) {
			for _, k := range []string{keyB, keyA} {
				require.NoError(t, s.Update(ctx, k, newEntry(k[len(k)-1:], testLimit), func(e *Entry) {
					e.Bucket.Report("c1", 1, 0, 1, now)
					e.Bucket.Step(now)
				}))
			}
			keys, err := s.Keys(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{keyA, keyB}, keys, "sorted")
			n, err := s.Len(ctx)
			require.NoError(t, err)
			require.Equal(t, 2, n)

			var want quota.Client
			require.NoError(t, s.Update(ctx, keyA, nil, func(e *Entry) {
				require.True(t, proto.Equal(&rlqsv3.BucketId{Bucket: map[string]string{"name": "a"}}, e.ID), "%v", e.ID)
				c := client(e, "c1")
				require.NotNil(t, c)
				require.Equal(t, uint64(1), c.Seq)
				require.False(t, c.Sent.IsZero(), "granted at the first Step")
				require.Equal(t, now, c.Refreshed)
				e.Bucket.Report("c1", 2, 7, 3, now+quota.Second)
				e.Bucket.Report("c2", 1, 0, 0, now+quota.Second)
				require.NoError(t, e.Bucket.SetLimit(quota.Limit{Fill: 50, FillInterval: quota.Second, Burst: 40}))
				want = *client(e, "c1")
			}))
			require.NoError(t, s.Update(ctx, keyA, nil, func(e *Entry) {
				require.Equal(t, quota.Limit{Fill: 50, FillInterval: quota.Second, Burst: 40}, e.Bucket.Limit())
				require.Len(t, e.Bucket.Clients(), 2)
				got := *client(e, "c1")
				require.Equal(t, exported(want), exported(got))
				require.Equal(t, uint64(7+3), got.Used)
				require.Equal(t, uint64(3), got.Denied)
			}))
		})
		t.Run("a repeated report counts once", func(t *testing.T) {
			for range 2 {
				require.NoError(t, s.Update(ctx, keyA, nil, func(e *Entry) { e.Bucket.Report("c1", 3, 5, 0, now+quota.Second) }))
			}
			require.NoError(t, s.Update(ctx, keyA, nil, func(e *Entry) {
				require.Equal(t, uint64(3), client(e, "c1").Seq)
				require.Equal(t, uint64(7+3+5), client(e, "c1").Used)
			}))
		})
		t.Run("dropped once empty", func(t *testing.T) {
			// Both clients close; once their grants expired (TTL 15 s
			// plus the guard) a Step forgets them and the bucket.
			require.NoError(t, s.Update(ctx, keyA, nil, func(e *Entry) {
				e.Bucket.Close("c1", now)
				e.Bucket.Close("c2", now)
				e.Bucket.Step(now + 17*quota.Second)
				require.True(t, e.Bucket.Empty())
			}))
			keys, err := s.Keys(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{keyB}, keys)
			n, err := s.Len(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			ran := false
			require.NoError(t, s.Update(ctx, keyA, nil, func(*Entry) { ran = true }))
			require.False(t, ran)
		})
	})
}
