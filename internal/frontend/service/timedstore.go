package service

import (
	"context"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// timedStore is the service's store, every call timed in
// rl_store_duration_seconds (by op and result): the latency of the memory
// store or of PostgreSQL as every front end (the proxy, the decision API,
// the gRPC service) sees it, apart from the service's own work.
type timedStore struct {
	store.Store
	m *metrics
}

var _ store.Store = (*timedStore)(nil)

func (t *timedStore) Decide(ctx context.Context, req store.Request, each []core.Decision) (int, core.Decision, error) {
	start := time.Now()
	i, d, err := t.Store.Decide(ctx, req, each)
	t.m.observeStore(0, time.Since(start).Seconds(), err != nil)
	return i, d, err
}

func (t *timedStore) Reset(ctx context.Context, prefix, key string, names []string) error {
	start := time.Now()
	err := t.Store.Reset(ctx, prefix, key, names)
	t.m.observeStore(1, time.Since(start).Seconds(), err != nil)
	return err
}
