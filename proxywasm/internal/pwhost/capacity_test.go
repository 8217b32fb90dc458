package pwhost

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestCapacity: random keys fill 90% of the filter's default capacity
// (16,384 slots × 4 keys per slot, README.md's stated share) through the
// committed rl-filter.wasm without one refusal: every request is
// forwarded, and the no-room counter stays 0. (The placement of shared-data
// encoding 1, one slot per key, answered its 7,097th key here 503.) Under
// the race detector, 2,048 slots: the same share of a smaller capacity
// (the native TestStoreCapacity fills the default there).
func TestCapacity(t *testing.T) {
	h := newHost(t)
	slots := 16384
	if raceEnabled {
		slots = 2048
	}
	vm, err := h.NewVM(context.Background(), fmt.Appendf(nil, `{"slots":%d,"rules":[{"name":"r","strategy":"fixed","limit":5,"window":"1h","key_by":"header:x-user"}]}`, slots))
	if err != nil {
		t.Fatal(err)
	}
	capacity := slots * 4
	n := capacity * 90 / 100
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		key := fmt.Sprintf("%016x%016x", rnd.Uint64(), rnd.Uint64())
		st, err := vm.Request([][2]string{{":method", "GET"}, {":authority", "api.example.com"}, {":path", "/"}, {"x-user", key}},
			nil, [][2]string{{":status", "200"}})
		if err != nil {
			t.Fatal(err)
		}
		if st.Local != nil {
			t.Fatalf("key %d of %d (%.1f%% of %d): answered %d %q", i+1, n, 100*float64(i+1)/float64(capacity), capacity, st.Local.Status, st.Local.Body)
		}
	}
	if v, ok := h.Metric("rl_filter.no_room"); !ok || v != 0 {
		t.Fatalf("rl_filter.no_room: %d (defined %v)", v, ok)
	}
	if k := h.SharedKeys(); k != slots {
		t.Fatalf("%d shared-data keys, want the %d slots", k, slots)
	}
}

// TestPlacementExact: 4 VMs under 16 concurrent clients, on slots too
// small for every key at home (12 live keys, 8 slots of 2), so keys live
// in alternates and move: each key is admitted exactly its limit.
func TestPlacementExact(t *testing.T) {
	h := newHost(t)
	const vms, clients, perClient, users, limit = 4, 16, 60, 12, 30
	var pool []*VM
	for range vms {
		vm, err := h.NewVM(context.Background(), []byte(`{"slots":8,"keys_per_slot":2,"rules":[{"name":"r","strategy":"fixed","limit":30,"window":"1h","key_by":"header:x-user"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		pool = append(pool, vm)
	}
	var mu sync.Mutex
	admitted, sent := make([]int, users), make([]int, users)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				u := (c*5 + i) % users
				s, err := pool[(c+i)%vms].Request([][2]string{{":method", "GET"}, {":authority", "x"}, {":path", "/"}, {"x-user", fmt.Sprint("user-", u)}},
					nil, [][2]string{{":status", "200"}})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				sent[u]++
				switch {
				case s.Local == nil:
					admitted[u]++
				case s.Local.Status != 429:
					t.Errorf("user %d: %d %q", u, s.Local.Status, s.Local.Body)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for u := range users {
		if admitted[u] != limit {
			t.Errorf("user %d: admitted %d of %d, want %d", u, admitted[u], sent[u], limit)
		}
	}
	t.Logf("%d writes, %d cas mismatches retried", h.Writes.Load(), h.Mismatches.Load())
}
