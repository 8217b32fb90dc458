package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/sql/plproxy"
	"github.com/rlcore/rl/store"
)

// Sharded is a store.Store over the shards of a PL/Proxy cluster
// (sql/plproxy), for the decision path that needs row locks on the shard
// itself (ModeGo: the Go or WebAssembly core decides in a transaction).
// It sends each key to the partition the router's RUN ON hashtext(key)
// chooses for the same stored key (FullKey(prefix, key)), computed in Go by
// plproxy.Partition, so a key decided through the router and through
// Sharded, interleaved, has one state on one shard.
//
// Each partition is a store of its own: usually a *Store over a pool on the
// shard's database, one per partition of the router's server definition,
// in the same order (partitions sharing a database may share one *Store).
// Wrapping each in a failover.Store gives every shard its own circuit
// breaker, so a shard that is down falls back for its keys alone.
//
// The SQL path (ModeSQL) needs none of this: a *Store over a pool on the
// router database decides through it unchanged.
type Sharded struct {
	parts    []store.Store
	distinct []store.Store
}

var _ store.Store = (*Sharded)(nil)

// NewSharded returns a Sharded store over partitions, whose count must be a
// power of two: the router's partition count. It does not own them, except
// that Close closes them.
func NewSharded(partitions []store.Store) (*Sharded, error) {
	n := len(partitions)
	if n == 0 || n&(n-1) != 0 || n > plproxy.MaxPartitions {
		return nil, fmt.Errorf("pgstore: %d partitions: want a power of two from 1 to %d, as the router has", n, plproxy.MaxPartitions)
	}
	s := &Sharded{parts: slices.Clone(partitions)}
	for i, p := range partitions {
		if p == nil {
			return nil, fmt.Errorf("pgstore: partition %d is nil", i)
		}
		if !slices.Contains(s.distinct, p) {
			s.distinct = append(s.distinct, p)
		}
	}
	return s, nil
}

// Partition returns the index of the partition holding the key prefix, key.
func (s *Sharded) Partition(prefix, key string) int {
	return plproxy.Partition(FullKey(prefix, key), len(s.parts))
}

// Decide implements store.Store on the key's partition.
func (s *Sharded) Decide(ctx context.Context, req store.Request, each []core.Decision) (int, core.Decision, error) {
	return s.parts[s.Partition(req.Prefix, req.Key)].Decide(ctx, req, each)
}

// Reset implements store.Store on the key's partition.
func (s *Sharded) Reset(ctx context.Context, prefix, key string, names []string) error {
	return s.parts[s.Partition(prefix, key)].Reset(ctx, prefix, key, names)
}

// Expire runs Expire on every distinct partition store that has one (as
// *Store does) and returns the total deleted, with the errors joined.
func (s *Sharded) Expire(ctx context.Context) (int64, error) {
	var (
		total int64
		errs  []error
	)
	for i, p := range s.distinct {
		e, ok := p.(interface {
			Expire(context.Context) (int64, error)
		})
		if !ok {
			continue
		}
		n, err := e.Expire(ctx)
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("pgstore: shard %d: %w", i, err))
		}
	}
	return total, errors.Join(errs...)
}

// Close closes every distinct partition store that is an io.Closer.
func (s *Sharded) Close() error {
	var errs []error
	for _, p := range s.distinct {
		if c, ok := p.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
