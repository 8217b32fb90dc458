package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/store"
	"github.com/rlcore/rl/store/storetest"
	"github.com/rlcore/rl/wasm"
)

func newStore(t *testing.T) store.Store {
	s := memstore.New(nil)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Config{New: newStore, WithDecider: func(t *testing.T, d core.Decider) store.Store {
		s := memstore.New(&memstore.Config{Decider: d})
		t.Cleanup(func() { s.Close() })
		return s
	}})
}

// TestConformanceWASM runs the suite with the WebAssembly core deciding.
func TestConformanceWASM(t *testing.T) {
	p, err := wasm.New(context.Background(), wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	storetest.Run(t, storetest.Config{New: func(t *testing.T) store.Store {
		s := memstore.New(&memstore.Config{Decider: p})
		t.Cleanup(func() { s.Close() })
		return s
	}})
}

const t0 = int64(1_767_225_600_000_000)

var fixed = core.Limit{Algorithm: core.FixedWindow, Limit: 10, Window: 60_000_000}

func take(s *memstore.Store, key string, now, cost int64, ls ...core.Limit) (core.Decision, error) {
	names := []string{"default", "second", "third"}[:len(ls)]
	_, d, err := s.Decide(context.Background(), store.Request{Policy: policy(names, ls), Key: key, Now: now, Cost: cost}, nil)
	return d, err
}

var policies sync.Map // fmt.Sprint(names, limits) → *store.Policy

// policy returns the store.Policy of names and ls, one per distinct list.
func policy(names []string, ls []core.Limit) *store.Policy {
	k := fmt.Sprint(names, ls)
	if p, ok := policies.Load(k); ok {
		return p.(*store.Policy)
	}
	p, err := store.NewPolicy(names, ls)
	if err != nil {
		panic(err)
	}
	got, _ := policies.LoadOrStore(k, p)
	return got.(*store.Policy)
}

func TestIdleKeysAreDropped(t *testing.T) {
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	defer s.Close()
	for i := range 1000 {
		if _, err := take(s, fmt.Sprint("k", i), t0, 1, fixed); err != nil {
			t.Fatal(err)
		}
	}
	// A peek and a denied call on unknown keys create nothing.
	take(s, "big", t0, 11, fixed)
	s.Decide(context.Background(), store.Request{Policy: policy([]string{"default"}, []core.Limit{fixed}), Key: "peeked", Op: store.Peek, Now: t0, Cost: 1}, nil)
	if n := s.Len(); n != 1001 { // "big" got an entry that is fresh at once
		t.Fatalf("Len = %d, want 1001", n)
	}
	if n := s.Sweep(t0); n != 1 {
		t.Fatalf("swept %d at t0, want only the denied key", n)
	}
	if n := s.Sweep(t0 + 60_000_000 - 1); n != 0 {
		t.Fatalf("swept %d keys before the window ended", n)
	}
	if n := s.Sweep(t0 + 60_000_000); n != 1000 || s.Len() != 0 {
		t.Fatalf("swept %d, %d left", n, s.Len())
	}
	// A key used again after being swept starts fresh, as it would anyway.
	d, _ := take(s, "k1", t0+60_000_000, 10, fixed)
	if !d.Allowed {
		t.Fatal("swept key not fresh")
	}
}

func TestMaxKeys(t *testing.T) {
	s := memstore.New(&memstore.Config{Shards: 1, MaxKeys: 10, SweepInterval: -1, Clock: func() int64 { return t0 }})
	defer s.Close()
	for i := range 10 {
		if _, err := take(s, fmt.Sprint("k", i), t0, 1, fixed); err != nil {
			t.Fatal(err)
		}
	}
	_, err := take(s, "one-too-many", t0, 1, fixed)
	if !errors.Is(err, store.ErrFull) || !errors.Is(err, store.ErrBusy) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("got %v, want ErrFull", err)
	}
	// Known keys still work.
	if d, err := take(s, "k3", t0, 1, fixed); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
}

func TestMaxKeysMakesRoomFromIdle(t *testing.T) {
	now := t0
	s := memstore.New(&memstore.Config{Shards: 1, MaxKeys: 2, SweepInterval: -1, Clock: func() int64 { return now }})
	defer s.Close()
	take(s, "a", t0, 1, fixed)
	take(s, "b", t0, 1, fixed)
	now = t0 + 60_000_000 // both idle now
	if _, err := take(s, "c", now, 1, fixed); err != nil {
		t.Fatalf("idle keys not reclaimed: %v", err)
	}
}

func TestWarmKeyAllocatesNothing(t *testing.T) {
	s := memstore.New(nil)
	defer s.Close()
	tb := core.Limit{Algorithm: core.TokenBucket, Limit: 1 << 30, Window: 1_000_000}
	log := core.Limit{Algorithm: core.SlidingLog, Limit: 4096, Window: 1_000_000}
	for _, ls := range [][]core.Limit{{tb}, {tb, fixed}, {log}} {
		take(s, "warm", t0, 1, ls...)
		req := store.Request{Policy: policy([]string{"default", "second"}[:len(ls)], ls), Key: "warm", Now: t0, Cost: 1}
		ctx := context.Background()
		allocs := testing.AllocsPerRun(1000, func() {
			req.Now++
			if _, _, err := s.Decide(ctx, req, nil); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Fatalf("%d limits: %v allocs per warm decision", len(ls), allocs)
		}
		s.Reset(context.Background(), "", "warm", nil)
	}
}

// TestSweepRace sweeps while many goroutines decide: no lost decision, no
// race (run with -race).
func TestSweepRace(t *testing.T) {
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	defer s.Close()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				s.Sweep(t0 + 1) // entries expire at t0+1
			}
		}
	}()
	short := core.Limit{Algorithm: core.TokenBucket, Limit: 1000, Window: 1000}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				if _, err := take(s, fmt.Sprint("race", (g*31+i)%50), t0, 1, short); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
}

// Issue 10: after a sweep at a later time, a clock stepping back was
// admitted again at the earlier time, as if the swept state had never been.
// Now a store that sweeps never admits more than one that keeps every
// state, whatever the clock does after the sweep.
func TestSweepNeverRefunds(t *testing.T) {
	const t0, minute = int64(1_700_000_000_000_000), int64(60_000_000)
	for _, alg := range core.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			swept := memstore.New(&memstore.Config{SweepInterval: -1})
			defer swept.Close()
			kept := memstore.New(&memstore.Config{SweepInterval: -1})
			defer kept.Close()
			lim := []core.Limit{{Algorithm: alg, Limit: 2, Window: minute}}
			take := func(s *memstore.Store, now int64) bool {
				req := store.Request{Policy: policy([]string{"default"}, lim), Key: "k", Cost: 1, Now: now}
				_, d, err := s.Decide(context.Background(), req, nil)
				if err != nil {
					t.Fatal(err)
				}
				return d.Allowed
			}
			for range 3 {
				take(swept, t0)
				take(kept, t0)
			}
			if n := swept.Sweep(t0 + 10*minute); n != 1 {
				t.Fatalf("swept %d keys, want 1", n)
			}
			// The clock is back just after the admissions and runs on for
			// two minutes and a bit.
			a, b := 0, 0
			for now := t0 + 1; now < t0+2*minute+10_000_000; now += 1_000_000 {
				if take(swept, now) {
					a++
				}
				if take(kept, now) {
					b++
				}
			}
			if a > b {
				t.Fatalf("after the sweep %d admitted, %d without it: the sweep refunded", a, b)
			}
		})
	}
}

// TestDecideInto runs the same calls through Decide on one store and
// DecideInto on another: the same results, each limit's too, and the
// request left as it was, also when a swept key moves the decision's time
// to the horizon.
func TestDecideInto(t *testing.T) {
	tb := core.Limit{Algorithm: core.TokenBucket, Limit: 3, Window: 60_000_000}
	one, two := policy([]string{"default"}, []core.Limit{tb}), policy([]string{"default", "second"}, []core.Limit{tb, fixed})
	for _, c := range []struct {
		name  string
		sweep int64 // sweep at this time before the call (0: none)
		req   store.Request
		each  int
	}{
		{"new key", 0, store.Request{Policy: one, Key: "a", Now: t0, Cost: 1}, 0},
		{"warm key", 0, store.Request{Policy: one, Key: "a", Now: t0 + 1, Cost: 2}, 1},
		{"denied", 0, store.Request{Policy: one, Key: "a", Now: t0 + 2, Cost: 1}, 0},
		{"peek", 0, store.Request{Policy: one, Key: "a", Op: store.Peek, Now: t0 + 3, Cost: 1}, 1},
		{"peek of no key", 0, store.Request{Policy: one, Key: "none", Op: store.Peek, Now: t0, Cost: 1}, 1},
		{"settle", 0, store.Request{Policy: one, Key: "a", Op: store.Settle, Now: t0 + 4, Cost: -2}, 0},
		{"other limits", 0, store.Request{Policy: two, Key: "a", Now: t0 + 5, Cost: 1}, 2},
		{"prefix", 0, store.Request{Policy: one, Prefix: "p:", Key: "a", Now: t0, Cost: 1}, 0},
		{"long key", 0, store.Request{Policy: two, Key: "a-key-longer-than-the-entry-text-holds", Now: t0, Cost: 1}, 2},
		{"swept, clock behind", t0 + 3_600_000_000, store.Request{Policy: one, Key: "a", Now: t0 + 6, Cost: 1}, 0},
		{"invalid cost", 0, store.Request{Policy: one, Key: "a", Now: t0 + 7, Cost: -1}, 0},
		{"no policy", 0, store.Request{Key: "a", Now: t0, Cost: 1}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Each case on two stores with the same history.
			a := memstore.New(&memstore.Config{SweepInterval: -1})
			defer a.Close()
			b := memstore.New(&memstore.Config{SweepInterval: -1})
			defer b.Close()
			ctx := context.Background()
			for _, before := range []store.Request{
				{Policy: one, Key: "a", Now: t0, Cost: 1},
				{Policy: one, Prefix: "p:", Key: "a", Now: t0, Cost: 1},
			} {
				a.Decide(ctx, before, nil)
				b.Decide(ctx, before, nil)
			}
			if c.sweep != 0 {
				a.Sweep(c.sweep)
				b.Sweep(c.sweep)
			}
			eachA, eachB := make([]core.Decision, c.each), make([]core.Decision, c.each)
			i, d, err := a.Decide(ctx, c.req, eachA)
			req := c.req
			var dInto core.Decision
			iInto, errInto := b.DecideInto(&req, eachB, &dInto)
			if req != c.req {
				t.Errorf("DecideInto changed the request: %+v, was %+v", req, c.req)
			}
			if iInto != i || dInto != d || fmt.Sprint(errInto) != fmt.Sprint(err) {
				t.Errorf("DecideInto: %d, %+v, %v; Decide: %d, %+v, %v", iInto, dInto, errInto, i, d, err)
			}
			if fmt.Sprint(eachB) != fmt.Sprint(eachA) {
				t.Errorf("DecideInto's limits %+v, Decide's %+v", eachB, eachA)
			}
		})
	}
}
