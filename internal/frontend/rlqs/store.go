package rlqs

import (
	"context"
	"slices"
	"sync"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/rlcore/rl/internal/request/quota"
)

// Entry is one bucket: the BucketId Envoy named it by, and its division.
type Entry struct {
	ID     *rlqsv3.BucketId
	Bucket *quota.Bucket
}

// Store holds the buckets of a Server. A bucket is changed only inside
// Update, which serialises the changes of one key. MemStore keeps them in
// memory; PGStore in PostgreSQL, one row per bucket and one per bucket and
// client, so that they outlive the server and several servers share them.
// fn may run more than once for one Update (a store retrying a
// transaction): the Server numbers reports so that a repeat counts once.
type Store interface {
	// Update runs fn on the entry of key. When the key has none, create
	// makes it (a nil create: do nothing). An entry whose bucket is Empty
	// after fn is dropped.
	Update(ctx context.Context, key string, create func() (*Entry, error), fn func(*Entry)) error
	// Keys lists the keys that have an entry.
	Keys(ctx context.Context) ([]string, error)
	// Len counts the entries.
	Len(ctx context.Context) (int, error)
}

// MemStore is a Store in memory, one lock for all its buckets.
type MemStore struct {
	mu      sync.Mutex
	buckets map[string]*Entry
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{buckets: map[string]*Entry{}} }

// Update implements Store.
func (m *MemStore) Update(_ context.Context, key string, create func() (*Entry, error), fn func(*Entry)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.buckets[key]
	if b == nil {
		if create == nil {
			return nil
		}
		var err error
		if b, err = create(); err != nil {
			return err
		}
		m.buckets[key] = b
	}
	fn(b)
	if b.Bucket.Empty() {
		delete(m.buckets, key)
	}
	return nil
}

// Keys implements Store.
func (m *MemStore) Keys(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]string, 0, len(m.buckets))
	for k := range m.buckets {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

// Len implements Store.
func (m *MemStore) Len(context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.buckets), nil
}
