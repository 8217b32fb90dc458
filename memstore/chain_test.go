package memstore

import (
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

func chainReq(prefix, key string) *store.Request {
	return &store.Request{Prefix: prefix, Key: key, Names: []string{"default"},
		Limits: []core.Limit{{Algorithm: core.FixedWindow, Limit: 1, Window: 1}}}
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
	sh.unlink(h, sh.find(h, "p", "c"))
	if sh.find(h, "p", "c") != nil || sh.find(h, "p", "d") == nil || sh.find(h, "p", "b") == nil {
		t.Fatal("unlink from the middle of a chain")
	}
	if n, _ := sh.dropIdle(1); n != 3 { // a, b and q/a (expires 0)
		t.Fatalf("dropped %d", n)
	}
	if sh.find(h, "p", "d") == nil || sh.find(h, "p", "a") != nil || sh.n != 1 {
		t.Fatal("dropIdle kept the wrong entries")
	}
	sh.unlink(h, sh.find(h, "p", "d"))
	if len(sh.m) != 0 || sh.n != 0 {
		t.Fatal("empty chain left behind")
	}
}
