package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/store"
)

func decideNames(s *memstore.Store, key string, now, cost int64, names []string, ls []core.Limit) (core.Decision, error) {
	_, d, err := s.Decide(context.Background(), store.Request{Policy: policy(names, ls), Key: key, Now: now, Cost: cost}, nil)
	return d, err
}

// logPolicy is the inline policy of issue 9: 16 sliding logs of 4,096.
func logPolicy() ([]string, []core.Limit) {
	names := make([]string, 16)
	ls := make([]core.Limit, 16)
	for i := range ls {
		names[i] = fmt.Sprintf("log%d", i)
		ls[i] = core.Limit{Algorithm: core.SlidingLog, Limit: 4096, Window: int64(i+1) * 1_000_000}
	}
	return names, ls
}

// TestBudgetJunkDoesNotLockOut fills the budget with junk keys: new keys
// are refused with ErrBudget (an ErrFull) and the store stops growing, while
// the keys that were there first are decided exactly as before.
func TestBudgetJunkDoesNotLockOut(t *testing.T) {
	now := t0
	s := memstore.New(&memstore.Config{MaxBytes: 64 << 10, SweepInterval: -1, Clock: func() int64 { return now }})
	defer s.Close()
	old := []string{"alice", "bob", "carol"}
	for _, k := range old {
		if d, err := take(s, k, now, 1, fixed); err != nil || !d.Allowed {
			t.Fatal(k, d, err)
		}
	}
	var err error
	junk := 0
	for ; junk < 100_000; junk++ {
		if _, err = take(s, fmt.Sprint("junk", junk), now, 1, fixed); err != nil {
			break
		}
	}
	if !errors.Is(err, memstore.ErrBudget) || !errors.Is(err, store.ErrFull) || !errors.Is(err, store.ErrBusy) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("after %d junk keys: %v, want ErrBudget matching ErrFull and ErrBusy, not ErrUnavailable", junk, err)
	}
	if junk < 100 {
		t.Fatalf("only %d keys fit 64 KiB", junk)
	}
	n, used := s.Len(), s.Bytes()
	if used > 64<<10 {
		t.Fatalf("%d bytes used, over the budget", used)
	}
	for i := range 1000 { // refused again and again, without growing
		if _, err := take(s, fmt.Sprint("more", i), now, 1, fixed); !errors.Is(err, memstore.ErrBudget) {
			t.Fatalf("new key admitted into a full store: %v", err)
		}
	}
	if s.Len() != n || s.Bytes() != used {
		t.Fatalf("store grew while full: %d keys, %d bytes → %d, %d", n, used, s.Len(), s.Bytes())
	}
	// The old keys: exactly the 9 units left of their 10, then denied.
	for _, k := range old {
		for i := range 10 {
			d, err := take(s, k, now, 1, fixed)
			if err != nil {
				t.Fatalf("%s locked out: %v", k, err)
			}
			if d.Allowed != (i < 9) {
				t.Fatalf("%s call %d: allowed %v", k, i, d.Allowed)
			}
		}
	}
	// A peek of a new key needs no memory: still answered.
	if _, _, err := s.Decide(context.Background(), store.Request{Policy: policy([]string{"default"}, []core.Limit{fixed}), Key: "peek", Op: store.Peek, Now: now, Cost: 1}, nil); err != nil {
		t.Fatal(err)
	}
	// An existing key that gains a limit asks for more, and is refused.
	if _, err := decideNames(s, "alice", now, 0, []string{"default", "other"}, []core.Limit{fixed, fixed}); !errors.Is(err, memstore.ErrBudget) {
		t.Fatalf("new limit on a full store: %v", err)
	}
	if d, err := take(s, "alice", now, 0, fixed); err != nil || d.Remaining != 0 {
		t.Fatal("alice after the refused growth:", d, err)
	}
	// The sweeper returns the bytes once the keys are idle.
	now += 60_000_000
	if swept := s.Sweep(now); swept != n || s.Bytes() != 0 || s.Len() != 0 {
		t.Fatalf("swept %d of %d, %d bytes left", swept, n, s.Bytes())
	}
	if _, err := take(s, "new", now, 1, fixed); err != nil {
		t.Fatal(err)
	}
}

// TestBudgetReclaimsIdle: a full budget sweeps the idle keys (at most once a
// second) before refusing a new one.
func TestBudgetReclaimsIdle(t *testing.T) {
	now := t0
	s := memstore.New(&memstore.Config{MaxBytes: 16 << 10, SweepInterval: -1, Clock: func() int64 { return now }})
	defer s.Close()
	i := 0
	for ; ; i++ {
		if _, err := take(s, fmt.Sprint("k", i), now, 1, fixed); err != nil {
			break
		}
	}
	now += 60_000_000 // every key idle
	if _, err := take(s, "fresh", now, 1, fixed); err != nil {
		t.Fatalf("idle keys not reclaimed: %v", err)
	}
	if s.Len() != 1 {
		t.Fatalf("%d keys after the reclaim, want 1", s.Len())
	}
}

// TestBudgetSlidingLogCharge: a key under 16 sliding logs of 4,096 is
// charged its logs at creation, about 0.5 MiB, and asks for nothing more as
// its logs fill.
func TestBudgetSlidingLogCharge(t *testing.T) {
	clock := func() int64 { return t0 }
	s := memstore.New(&memstore.Config{SweepInterval: -1, Clock: clock})
	defer s.Close()
	names, ls := logPolicy()
	if _, err := decideNames(s, "k", t0, 1, names, ls); err != nil {
		t.Fatal(err)
	}
	got := s.Bytes()
	const logs = 16 * 4096 * 8 // 512 KiB
	if got < logs || got > logs+4096 {
		t.Fatalf("charged %d bytes, want 512 KiB and a little", got)
	}
	for i := range 4095 {
		if d, err := decideNames(s, "k", t0+int64(i), 1, names, ls); err != nil || !d.Allowed {
			t.Fatal(i, d, err)
		}
	}
	if s.Bytes() != got {
		t.Fatalf("charge grew from %d to %d as the logs filled", got, s.Bytes())
	}
	// A budget of 4 MiB holds 7 such keys, not 8.
	small := memstore.New(&memstore.Config{MaxBytes: 4 << 20, SweepInterval: -1, Clock: clock})
	defer small.Close()
	n := 0
	for ; n < 100; n++ {
		if _, err := decideNames(small, fmt.Sprint("k", n), t0, 1, names, ls); err != nil {
			break
		}
	}
	if n != 7 {
		t.Fatalf("%d keys of 0.5 MiB fit 4 MiB, want 7", n)
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestBudgetBoundsMemory fills a 32 MiB budget with sliding-log keys and
// then small keys, and measures the heap: it grows by about what was
// charged (a loose bound: the charge is honest, not exact) and stops
// growing when the budget is full.
func TestBudgetBoundsMemory(t *testing.T) {
	const budget = 32 << 20
	for _, tc := range []struct {
		name  string
		names []string
		ls    []core.Limit
	}{
		{"16 sliding logs of 4096", nil, nil},
		{"one fixed window", []string{"default"}, []core.Limit{fixed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.names == nil {
				tc.names, tc.ls = logPolicy()
			}
			before := heap()
			s := memstore.New(&memstore.Config{MaxBytes: budget, SweepInterval: -1, Clock: func() int64 { return t0 }})
			defer s.Close()
			keys := 0
			for ; keys < 10_000_000; keys++ {
				if _, err := decideNames(s, fmt.Sprint("key:", keys), t0, 1, tc.names, tc.ls); err != nil {
					if !errors.Is(err, memstore.ErrBudget) {
						t.Fatal(err)
					}
					break
				}
			}
			full := heap()
			for i := range 20_000 { // refused: nothing more is held
				decideNames(s, fmt.Sprint("more:", i), t0, 1, tc.names, tc.ls)
			}
			after := heap()
			grew := float64(full) - float64(before)
			ratio := grew / float64(s.Bytes())
			t.Logf("%d keys, charged %d bytes, heap grew %.0f bytes (%.2f× the charge), then %+d while refusing",
				keys, s.Bytes(), grew, ratio, int64(after)-int64(full))
			if s.Bytes() > budget || s.Bytes() < budget*9/10 {
				t.Fatalf("charged %d of a %d budget", s.Bytes(), budget)
			}
			if ratio < 0.5 || ratio > 1.5 {
				t.Fatalf("heap grew %.2f× what was charged: the charge is not honest", ratio)
			}
			if after > full+budget/8 {
				t.Fatalf("heap grew by %d while the store was full", after-full)
			}
			runtime.KeepAlive(s)
		})
	}
}
