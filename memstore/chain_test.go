package memstore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

var chainPolicy = must(store.NewPolicy([]string{"default"}, []core.Limit{{Algorithm: core.FixedWindow, Limit: 1, Window: 1}}))

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func chainReq(prefix, key string) *store.Request {
	return &store.Request{Policy: chainPolicy, Prefix: prefix, Key: key}
}

// TestHashChains forces entries onto one hash: find, unlink and dropIdle
// must keep each of them apart.
func TestHashChains(t *testing.T) {
	s := New(&Config{Shards: 1, SweepInterval: -1})
	defer s.Close()
	sh := &s.shards[0]
	const h = 42
	keys := []string{"a", "b", "c", "d"}
	for i, k := range keys {
		e, err := s.insert(sh, h, chainReq("p", k))
		if err != nil {
			t.Fatal(err)
		}
		e.expires = int64(i) // a expires at 0, b at 1, ...
	}
	if e, _ := s.insert(sh, h, chainReq("q", "a")); e == sh.find(h, "p", "a") {
		t.Fatal("prefixes not kept apart")
	}
	if sh.n != 5 {
		t.Fatalf("n = %d", sh.n)
	}
	sh.unlink(sh.find(h, "p", "c"))
	if sh.find(h, "p", "c") != nil || sh.find(h, "p", "d") == nil || sh.find(h, "p", "b") == nil {
		t.Fatal("unlink from the middle of a chain")
	}
	if n, _, _ := sh.dropIdle(1); n != 3 { // a, b and q/a (expires 0)
		t.Fatalf("dropped %d", n)
	}
	if sh.find(h, "p", "d") == nil || sh.find(h, "p", "a") != nil || sh.n != 1 {
		t.Fatal("dropIdle kept the wrong entries")
	}
	sh.unlink(sh.find(h, "p", "d"))
	tab := sh.tab.Load()
	if tab.bucket(h).Load() != nil || sh.n != 0 {
		t.Fatal("empty chain left behind")
	}
}

// TestResizeUnderReaders grows one shard's table many times while readers
// look keys up without locks: a lock-free lookup may miss during a resize
// (the caller then asks again under the mutex) but never finds a wrong
// entry, never loops, and finds every key once the resizes are over.
func TestResizeUnderReaders(t *testing.T) {
	s := New(&Config{Shards: 1, SweepInterval: -1, MaxBytes: -1})
	defer s.Close()
	sh := &s.shards[0]
	const n = 5_000
	hash := func(i int) uint64 { return uint64(i%97) << 32 } // long chains, every bucket size
	var done atomic.Bool
	var wg sync.WaitGroup
	var misses atomic.Int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; !done.Load(); i = (i + 7) % n {
				k := fmt.Sprint("k", i)
				if e := sh.find(hash(i), "", k); e == nil {
					misses.Add(1)
				} else if e.key() != k {
					t.Errorf("looked up %s, found %s", k, e.key())
					return
				}
			}
		}()
	}
	for i := range n {
		if _, err := s.insert(sh, hash(i), chainReq("", fmt.Sprint("k", i))); err != nil {
			t.Fatal(err)
		}
	}
	done.Store(true)
	wg.Wait()
	for i := range n {
		if e := sh.find(hash(i), "", fmt.Sprint("k", i)); e == nil {
			t.Fatalf("k%d lost", i)
		}
	}
	if got := len(sh.tab.Load().buckets); got < n {
		t.Fatalf("table of %d buckets for %d keys", got, n)
	}
	t.Logf("%d lookups missed (before their key was inserted, or during a resize)", misses.Load())
}
