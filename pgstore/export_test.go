package pgstore

import (
	"context"
	"errors"
)

// QueueLen and InFlight let tests see a Batched store's queue.
func QueueLen(b *Batched) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.queue {
		if !c.left.Load() {
			n++
		}
	}
	return n
}

// InFlight is the number of running batch statements.
func InFlight(b *Batched) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight
}

// ExpiresAt is expiresAt, for comparing with rl._expires_at.
func ExpiresAt(now, resetAfter int64) int64 { return expiresAt(now, resetAfter) }

// IsNotMigrated reports whether classify reads err as an unmigrated
// database.
func IsNotMigrated(err error) bool {
	return errors.Is(classify(context.Background(), err), ErrNotMigrated)
}

// Classify is classify, for a test's own errors.
func Classify(err error) error { return classify(context.Background(), err) }
