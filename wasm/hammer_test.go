package wasm_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/wasm"
)

// key is one simulated store key: its limits and, behind its mutex (the
// store's row lock), the states as the module leaves them and as the native
// core leaves them, and its clock.
type key struct {
	mu     sync.Mutex
	ls     []core.Limit
	ws, ns []core.State
	now    int64
	calls  int
}

func newKey(rng *rand.Rand) *key {
	all := []core.Limit{
		{Algorithm: core.FixedWindow, Limit: 20, Window: 1_000_000},
		{Algorithm: core.SlidingWindow, Limit: 15, Window: 2_000_000},
		{Algorithm: core.SlidingLog, Limit: 10, Window: 1_000_000},
		{Algorithm: core.TokenBucket, Limit: 8, Window: 1_000_000, Rate: 3},
		{Algorithm: core.LeakyBucket, Limit: 6, Window: 500_000},
		{Algorithm: core.GCRA, Limit: 5, Window: 1_000_000, Rate: 7},
	}
	k := &key{now: 1767225600000000}
	for _, i := range rng.Perm(len(all))[:1+rng.IntN(3)] {
		k.ls = append(k.ls, all[i])
	}
	for range k.ls {
		k.ws = append(k.ws, core.State{Log: make([]int64, 0, core.MaxLogLimit)})
		k.ns = append(k.ns, core.State{Log: make([]int64, 0, core.MaxLogLimit)})
	}
	return k
}

// TestHammer runs many goroutines through one small pool, on keys shared by
// all of them and keys of their own. Under each key's lock it decides with
// the pool and with the native core on the same sequence, and requires the
// same answers; a trap or any other error fails the test. Run it with -race.
func TestHammer(t *testing.T) {
	p := newPool(t, wasm.Config{MaxInstances: 3})
	const goroutines = 16
	ops := 5000
	if testing.Short() {
		ops = 300
	}
	rng := rand.New(rand.NewPCG(1, 2))
	shared := make([]*key, 4)
	for i := range shared {
		shared[i] = newKey(rng)
	}
	own := make([]*key, goroutines)
	for i := range own {
		own[i] = newKey(rng)
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			ds, dn := make([]core.Decision, 3), make([]core.Decision, 3)
			for range ops {
				k := own[g]
				if rng.IntN(2) == 0 {
					k = shared[rng.IntN(len(shared))]
				}
				if err := k.step(p, rng, ds, dn); err != nil {
					errs <- fmt.Errorf("goroutine %d: %w", g, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := p.Stats()
	if st.Instances > 3 || st.Discarded != 0 {
		t.Fatalf("stats %+v", st)
	}
	calls := 0
	for _, k := range append(shared, own...) {
		calls += k.calls
	}
	t.Logf("%d calls, pool %+v", calls, st)
}

func (k *key) step(p *wasm.Pool, rng *rand.Rand, ds, dn []core.Decision) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls++
	switch rng.IntN(10) {
	case 0:
		k.now -= rng.Int64N(100_000) // the clock steps back
	case 1:
		k.now += rng.Int64N(5_000_000)
	default:
		k.now += rng.Int64N(200_000)
	}
	cost := rng.Int64N(4)
	n := len(k.ls)
	switch op := rng.IntN(4); op {
	case 0, 1:
		var iw, in int
		var ew, en error
		if op == 0 {
			iw, ew = p.TakeAll(k.ls, k.ws, k.now, cost, ds)
			in, en = core.TakeAll(k.ls, k.ns, k.now, cost, dn)
		} else {
			iw, ew = p.PeekAll(k.ls, k.ws, k.now, cost, ds)
			in, en = core.PeekAll(k.ls, k.ns, k.now, cost, dn)
		}
		if ew != nil || en != nil || iw != in || !slices.Equal(ds[:n], dn[:n]) {
			return fmt.Errorf("op %d now %d cost %d: wasm %d %v %+v, native %d %v %+v", op, k.now, cost, iw, ew, ds[:n], in, en, dn[:n])
		}
	default:
		i := rng.IntN(n)
		dw, sw, ew := p.Take(k.ls[i], k.ws[i], k.now, cost)
		dn, sn, en := core.Take(k.ls[i], k.ns[i], k.now, cost)
		if ew != nil || en != nil || dw != dn {
			return fmt.Errorf("Take now %d cost %d: wasm %+v %v, native %+v %v", k.now, cost, dw, ew, dn, en)
		}
		k.ws[i], k.ns[i] = sw, sn
	}
	for i := range k.ls {
		w, n := k.ws[i], k.ns[i]
		if w.Algorithm != n.Algorithm || w.T != n.T || w.X != n.X || w.Y != n.Y || !slices.Equal(w.Log, n.Log) {
			return fmt.Errorf("limit %d state: wasm %+v, native %+v", i, w, n)
		}
	}
	return nil
}
