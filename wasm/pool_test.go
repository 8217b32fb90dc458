package wasm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/wasm"
)

var tb1 = []core.Limit{{Algorithm: core.TokenBucket, Limit: 10, Window: 1_000_000}}

func newPool(t *testing.T, cfg wasm.Config) *wasm.Pool {
	t.Helper()
	p, err := wasm.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func TestNewRejectsOtherModules(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		mod  []byte
		abi  bool // want ErrABIVersion
	}{
		{"abi_version 1", fake{abi: 1, bufferSize: 527168}.module(), true},
		{"abi_version 0", fake{abi: 0, bufferSize: 527168}.module(), true},
		{"no abi_version", fake{abi: 2, bufferSize: 527168, omit: "abi_version"}.module(), true},
		{"no rl_take_all", fake{abi: 2, bufferSize: 527168, omit: "rl_take_all"}.module(), true},
		{"no memory", fake{abi: 2, bufferSize: 527168, omit: "memory"}.module(), true},
		{"smaller buffer", fake{abi: 2, bufferSize: 1000}.module(), true},
		{"not wasm", []byte("\x00asm garbage"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := wasm.New(ctx, wasm.Config{Module: tc.mod})
			if err == nil {
				p.Close(ctx)
				t.Fatal("New accepted the module")
			}
			if errors.Is(err, wasm.ErrABIVersion) != tc.abi {
				t.Fatalf("error %v: errors.Is(ErrABIVersion) = %v, want %v", err, !tc.abi, tc.abi)
			}
		})
	}
	// The fake at the right version is accepted.
	newPool(t, wasm.Config{Module: defaultFake().module()})
}

// TestTrap makes an instance trap and shows that the pool discards it, never
// reuses it, and keeps serving on a fresh instance.
func TestTrap(t *testing.T) {
	p := newPool(t, wasm.Config{Module: defaultFake().module(), MaxInstances: 1})
	ss, ds := make([]core.State, 1), make([]core.Decision, 1)
	const now = 1767225600000000
	if _, err := p.TakeAll(tb1, ss, now, 1, ds); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"TakeAll": func() error { _, err := p.TakeAll(tb1, ss, now, 666, ds); return err },
		"PeekAll": func() error { _, err := p.PeekAll(tb1, ss, now, 666, ds); return err },
		"Take":    func() error { _, _, err := p.Take(tb1[0], ss[0], now, 666); return err },
		"Peek":    func() error { _, err := p.Peek(tb1[0], ss[0], now, 666); return err },
	}
	discarded := uint64(0)
	for name, call := range calls {
		before := p.Stats()
		err := call()
		if !errors.Is(err, wasm.ErrTrap) || !strings.Contains(err.Error(), "discarded") || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("%s: error %v, want ErrTrap saying the instance was discarded and why", name, err)
		}
		discarded++
		st := p.Stats()
		if st.Discarded != discarded || st.Instances != before.Instances-1 || st.Idle != 0 {
			t.Fatalf("%s: stats %+v after a trap (before %+v)", name, st, before)
		}
		// The pool keeps serving, on a new instance.
		if _, err := p.TakeAll(tb1, ss, now, 1, ds); err != nil {
			t.Fatalf("%s: after the trap: %v", name, err)
		}
		if st2 := p.Stats(); st2.Started != st.Started+1 || st2.Instances != 1 {
			t.Fatalf("%s: stats %+v after serving again (after trap %+v)", name, st2, st)
		}
	}

	// Concurrently: traps and ordinary calls interleave on a pool of two.
	p = newPool(t, wasm.Config{Module: defaultFake().module(), MaxInstances: 2})
	var wg sync.WaitGroup
	var mu sync.Mutex
	traps := 0
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss, ds := make([]core.State, 1), make([]core.Decision, 1)
			for i := range 200 {
				cost := int64(1)
				if (g+i)%7 == 0 {
					cost = 666
				}
				_, err := p.TakeAll(tb1, ss, now, cost, ds)
				switch {
				case cost == 666 && errors.Is(err, wasm.ErrTrap):
					mu.Lock()
					traps++
					mu.Unlock()
				case err != nil:
					t.Errorf("cost %d: %v", cost, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if st := p.Stats(); st.Discarded != uint64(traps) || st.Instances > 2 {
		t.Fatalf("stats %+v after %d traps", st, traps)
	}
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	p, err := wasm.New(ctx, wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ss, ds := make([]core.State, 1), make([]core.Decision, 1)
	if _, err := p.TakeAll(tb1, ss, 0, 1, ds); !errors.Is(err, wasm.ErrClosed) {
		t.Fatalf("TakeAll: %v", err)
	}
	if _, err := p.PeekAll(tb1, ss, 0, 1, ds); !errors.Is(err, wasm.ErrClosed) {
		t.Fatalf("PeekAll: %v", err)
	}
	if _, _, err := p.Take(tb1[0], ss[0], 0, 1); !errors.Is(err, wasm.ErrClosed) {
		t.Fatalf("Take: %v", err)
	}
	if _, err := p.Peek(tb1[0], ss[0], 0, 1); !errors.Is(err, wasm.ErrClosed) {
		t.Fatalf("Peek: %v", err)
	}
	if st := p.Stats(); st.Instances != 0 || st.Idle != 0 {
		t.Fatalf("stats after Close: %+v", st)
	}
}

func TestLimitCount(t *testing.T) {
	ls := make([]core.Limit, wasm.MaxLimits+1)
	for i := range ls {
		ls[i] = core.Limit{Algorithm: core.FixedWindow, Limit: int64(i + 1), Window: 1000}
	}
	ss, ds := make([]core.State, len(ls)), make([]core.Decision, len(ls))
	if _, err := pool.TakeAll(ls, ss, 0, 1, ds); !errors.Is(err, wasm.ErrTooManyLimits) {
		t.Fatalf("%d limits: %v", len(ls), err)
	}
	// MaxLimits is accepted; the index is the fewest remaining.
	if i, err := pool.TakeAll(ls[:wasm.MaxLimits], ss, 0, 1, ds); err != nil || i != 0 {
		t.Fatalf("%d limits: %d %v", wasm.MaxLimits, i, err)
	}
	for _, tc := range []struct {
		name    string
		l, s, d int
	}{{"none", 0, 1, 1}, {"short states", 2, 1, 2}, {"short decisions", 2, 2, 1}} {
		i, err := pool.TakeAll(ls[:tc.l], ss[:tc.s], 0, 1, ds[:tc.d])
		in, en := core.TakeAll(ls[:tc.l], ss[:tc.s], 0, 1, ds[:tc.d])
		if !errors.Is(err, core.ErrLimits) || i != in || err != en {
			t.Fatalf("%s: %d %v, native %d %v", tc.name, i, err, in, en)
		}
	}
}

func TestCacheDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	for i := range 2 {
		start := time.Now()
		p := newPool(t, wasm.Config{CacheDir: dir})
		d, _, err := p.Take(tb1[0], core.State{}, 1767225600000000, 1)
		if err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		p.Close(context.Background())
		t.Logf("New + first call, run %d: %v", i, time.Since(start))
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("cache dir: %v, %d entries", err, len(entries))
	}
}

// TestNoGrowth checks that calls allocate nothing in the module: its memory
// does not grow over many decisions of every algorithm.
func TestNoGrowth(t *testing.T) {
	p := newPool(t, wasm.Config{MaxInstances: 1})
	before, err := p.InstanceMemory()
	if err != nil {
		t.Fatal(err)
	}
	ls := []core.Limit{
		{Algorithm: core.FixedWindow, Limit: 1000, Window: 1_000_000},
		{Algorithm: core.SlidingWindow, Limit: 1000, Window: 1_000_000},
		{Algorithm: core.SlidingLog, Limit: 4096, Window: 1_000_000},
		{Algorithm: core.TokenBucket, Limit: 1000, Window: 1_000_000},
		{Algorithm: core.LeakyBucket, Limit: 1000, Window: 1_000_000},
		{Algorithm: core.GCRA, Limit: 1000, Window: 1_000_000},
	}
	ss, ds := make([]core.State, len(ls)), make([]core.Decision, len(ls))
	ss[2].Log = make([]int64, 0, core.MaxLogLimit)
	now := int64(1767225600000000)
	single := core.State{Log: make([]int64, 0, core.MaxLogLimit)}
	for i := range 20000 {
		now += 100
		if _, err := p.TakeAll(ls, ss, now, 1+int64(i%3), ds); err != nil {
			t.Fatal(err)
		}
		if _, _, err := p.Take(ls[i%len(ls)], single, now, 1); err != nil {
			t.Fatal(err)
		}
	}
	if after, _ := p.InstanceMemory(); after != before {
		t.Fatalf("memory grew from %d to %d bytes", before, after)
	}
	t.Logf("instance memory: %d bytes (%d pages)", before, before/65536)
}

// TestZeroAllocs: the decision calls allocate nothing, on every path
// (allowed, denied, errors, sliding logs, several limits).
func TestZeroAllocs(t *testing.T) {
	ls := []core.Limit{
		{Algorithm: core.SlidingLog, Limit: 100, Window: 1_000_000},
		{Algorithm: core.GCRA, Limit: 5, Window: 1_000_000},
	}
	ss, ds := []core.State{{Log: make([]int64, 0, 4096)}, {}}, make([]core.Decision, 2)
	now := int64(1767225600000000)
	for name, f := range map[string]func(){
		"TakeAll": func() { now += 1000; pool.TakeAll(ls, ss, now, 1, ds) },
		"PeekAll": func() { pool.PeekAll(ls, ss, now, 3, ds) },
		"Take":    func() { now += 1000; d, s, _ := pool.Take(ls[0], ss[0], now, 1); ss[0] = s; ds[0] = d },
		"Peek":    func() { ds[0], _ = pool.Peek(ls[1], ss[1], now, 1) },
		"error":   func() { pool.TakeAll(ls, ss, -1, 1, ds) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocs per call", name, n)
		}
	}
}
