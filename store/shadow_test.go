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

// TestSettleShadow: a settle of a policy with shadow limits settles the
// enforced limits all or nothing, then each shadow limit alone; a shadow
// limit that cannot be settled (a corrupt state) is left as it was and
// never cancels the enforced limits' debt; the call's own errors come
// first, at index 0.
func TestSettleShadow(t *testing.T) {
	const now = int64(1_767_225_600_000_000)
	ls := []core.Limit{
		{Algorithm: core.FixedWindow, Limit: 1000, Window: 3_600_000_000},
		{Algorithm: core.TokenBucket, Limit: 1000, Window: 86_400_000_000},
		{Algorithm: core.GCRA, Limit: 10, Window: 1_000_000},
	}
	p, err := store.MustPolicy([]string{"enforced", "candidate", "broken"}, ls...).WithShadow("candidate", "broken")
	if err != nil {
		t.Fatal(err)
	}
	corrupt := core.State{Algorithm: core.GCRA, T: now, X: core.MaxLimit + 1, Y: now} // X beyond any rate
	for _, dec := range []core.Decider{nil, core.Native{}} {
		ss := []core.State{{}, {}, corrupt}
		ds := make([]core.Decision, 3)
		i, err := p.Decide(dec, store.Settle, ss, now, 100_000_000, ds)
		if err != nil || i != 0 {
			t.Fatalf("decider %v: settle: %d %v, want index 0 and no error", dec, i, err)
		}
		if ss[0].X != 100_000_000 || ds[0].Remaining != 0 {
			t.Fatalf("decider %v: the enforced limit's debt: state %+v, decision %+v", dec, ss[0], ds[0])
		}
		if ss[1].Algorithm != core.TokenBucket || ds[1].Remaining != 0 {
			t.Fatalf("decider %v: the candidate was not charged: state %+v, decision %+v", dec, ss[1], ds[1])
		}
		if !sameWords(ss[2], corrupt) || ds[2] != (core.Decision{Limit: 10}) {
			t.Fatalf("decider %v: the broken shadow limit: state %+v, decision %+v", dec, ss[2], ds[2])
		}
		d := make([]core.Decision, 3)
		if _, err := p.Decide(dec, store.Take, []core.State{ss[0], ss[1], {}}, now+1, 1, d); err != nil || p.Deciding(d, 0).Allowed {
			t.Fatalf("decider %v: a take after the debt: %+v %v, want denied", dec, d, err)
		}
		for _, c := range []struct {
			now, delta int64
			want       error
		}{{-1, 1, core.ErrTime}, {now, core.MaxCost + 1, core.ErrCost}} {
			if i, err := p.Decide(dec, store.Settle, []core.State{{}, {}, {}}, c.now, c.delta, ds); i != 0 || !errors.Is(err, c.want) {
				t.Fatalf("decider %v: settle(%d, %d): %d %v, want index 0 and %v", dec, c.now, c.delta, i, err, c.want)
			}
		}
	}
	// Only shadow limits: call errors are still refused, a broken one is skipped.
	q, err := store.MustPolicy([]string{"a", "b"}, ls[1], ls[2]).WithShadow("a", "b")
	if err != nil {
		t.Fatal(err)
	}
	ss, ds := []core.State{{}, corrupt}, make([]core.Decision, 2)
	if i, err := q.Decide(nil, store.Settle, ss, now, 5, ds); err != nil || i != 0 || ds[0].Remaining != 995 || !sameWords(ss[1], corrupt) {
		t.Fatalf("shadow only: %d %v %+v %+v", i, err, ds, ss)
	}
	if _, err := q.Decide(nil, store.Settle, ss, -1, 5, ds); !errors.Is(err, core.ErrTime) {
		t.Fatalf("shadow only, now -1: %v, want ErrTime", err)
	}
}

// sameWords reports whether a and b are the same state, logs aside.
func sameWords(a, b core.State) bool {
	return a.Algorithm == b.Algorithm && a.T == b.T && a.X == b.X && a.Y == b.Y && a.L == b.L && a.W == b.W && a.R == b.R
}

// TestSettleCharged: SettleCharged settles, on all of p's states, what a
// settle under p.Charged settles by name, and leaves the rest as it was.
func TestSettleCharged(t *testing.T) {
	const now = int64(1_767_225_600_000_000)
	fixed := func(lim int64) core.Limit {
		return core.Limit{Algorithm: core.FixedWindow, Limit: lim, Window: 3_600_000_000}
	}
	p, err := store.MustPolicy([]string{"small", "enforced", "large"}, fixed(2), fixed(100), fixed(50)).WithShadow("small", "large")
	if err != nil {
		t.Fatal(err)
	}
	for _, dec := range []core.Decider{nil, core.Native{}} {
		ss, ds := make([]core.State, 3), make([]core.Decision, 3)
		for _, cost := range []int64{2, 1} {
			if _, err := p.Decide(dec, store.Take, ss, now, cost, ds); err != nil {
				t.Fatal(err)
			}
		}
		charged := append([]core.Decision(nil), ds...) // small: a would-deny
		i, err := p.SettleCharged(dec, charged, ss, now+1, 5, ds)
		if err != nil || i != 1 {
			t.Fatalf("decider %v: %d %v", dec, i, err)
		}
		if ss[0].X != 2 || ss[1].X != 8 || ss[2].X != 8 {
			t.Fatalf("decider %v: counts %d %d %d, want 2 8 8", dec, ss[0].X, ss[1].X, ss[2].X)
		}
		if ds[0].Remaining != 0 || ds[0].ResetAfter <= 0 || ds[1].Remaining != 92 || ds[2].Remaining != 42 {
			t.Fatalf("decider %v: decisions %+v", dec, ds)
		}
	}
}

// TestChargedBounded: Charged keeps at most a bounded number of policies
// per policy, however many sets of shadow limits callers leave out.
func TestChargedBounded(t *testing.T) {
	names := []string{"e"}
	ls := []core.Limit{{Algorithm: core.FixedWindow, Limit: 10, Window: 1_000_000}}
	for i := range 10 {
		names = append(names, "s"+string(rune('a'+i)))
		ls = append(ls, ls[0])
	}
	p, err := store.MustPolicy(names, ls...).WithShadow(names[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	ds := make([]core.Decision, len(ls))
	var first *store.Policy
	for mask := range 1 << 10 {
		for i := range 10 {
			ds[i+1].Allowed = mask&(1<<i) == 0
		}
		q := p.Charged(ds)
		if mask == 1 {
			first = q
		}
		if mask != 0 && (q == nil || q.Len() != 11-bitsSet(mask)) {
			t.Fatalf("mask %b: %v", mask, q)
		}
	}
	for i := range 10 {
		ds[i+1].Allowed = i != 0
	}
	if p.Charged(ds) != first {
		t.Fatal("the first sets' policies are kept")
	}
	for i := range 10 {
		ds[i+1].Allowed = true
	}
	ds[10].Allowed, ds[9].Allowed, ds[8].Allowed = false, false, false
	if a, b := p.Charged(ds), p.Charged(ds); a == b {
		t.Fatal("a set beyond the bound is kept")
	}
}

func bitsSet(m int) int {
	n := 0
	for ; m != 0; m &= m - 1 {
		n++
	}
	return n
}
