package store_test

import (
	"errors"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

func TestWithShadow(t *testing.T) {
	l := core.Limit{Algorithm: core.FixedWindow, Limit: 3, Window: 1_000_000}
	p := store.MustPolicy([]string{"a", "b", "c"}, l, l, l)
	q, err := p.WithShadow("c", "a")
	if err != nil {
		t.Fatal(err)
	}
	if q.ID() == p.ID() || !q.Shadowed() || p.Shadowed() || !q.Shadow(0) || q.Shadow(1) || !q.Shadow(2) {
		t.Fatalf("WithShadow(c, a): id %d (p %d), shadow %v %v %v", q.ID(), p.ID(), q.Shadow(0), q.Shadow(1), q.Shadow(2))
	}
	if r, err := q.WithShadow(); err != nil || r.Shadowed() || r.Len() != 3 {
		t.Fatalf("WithShadow(): %v %v", r, err)
	}
	if _, err := p.WithShadow("d"); !errors.Is(err, core.ErrLimits) {
		t.Fatalf("WithShadow(d): %v, want core.ErrLimits", err)
	}
}

// TestDecideWithoutShadow: a policy without shadow limits is decided as
// core.TakeAll decides it, natively (nil decider) or through a decider,
// and Deciding is ds[i].
func TestDecideWithoutShadow(t *testing.T) {
	ls := []core.Limit{{Algorithm: core.FixedWindow, Limit: 3, Window: 1_000_000}, {Algorithm: core.GCRA, Limit: 2, Window: 1_000_000}}
	p := store.MustPolicy([]string{"a", "b"}, ls...)
	const now = int64(1_767_225_600_000_000)
	model := make([]core.State, 2)
	decs := []core.Decider{nil, core.Native{}}
	states := [][]core.State{make([]core.State, 2), make([]core.State, 2)}
	for call := range 4 {
		wds := make([]core.Decision, 2)
		wi, err := core.TakeAll(ls, model, now, 1, wds)
		if err != nil {
			t.Fatal(err)
		}
		for k, dec := range decs {
			ds := make([]core.Decision, 2)
			i, err := p.Decide(dec, store.Take, states[k], now, 1, ds)
			if err != nil || i != wi || p.Deciding(ds, i) != wds[wi] || ds[0] != wds[0] || ds[1] != wds[1] {
				t.Fatalf("call %d (decider %v): %d %+v %v, core %d %+v", call, dec, i, ds, err, wi, wds)
			}
		}
	}
}
