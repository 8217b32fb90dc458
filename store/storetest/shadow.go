package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// shadow runs the shadow-limit cases, or, for a store that refuses shadow
// limits, checks that it refuses them.
func shadow(t *testing.T, cfg Config, prefix string) {
	if cfg.ShadowRefused != nil {
		t.Run("Refused", func(t *testing.T) { shadowRefused(t, cfg, prefix) })
		return
	}
	t.Run("SameAsModel", func(t *testing.T) { shadowSameAsModel(t, cfg, prefix) })
	t.Run("ChargedOnlyWhenAdmitted", func(t *testing.T) { shadowCharged(t, cfg, prefix) })
	t.Run("OnlyShadow", func(t *testing.T) { shadowOnly(t, cfg, prefix) })
	t.Run("PeekChangesNothing", func(t *testing.T) { shadowPeek(t, cfg, prefix) })
	t.Run("Race", func(t *testing.T) { shadowRace(t, cfg, prefix) })
	t.Run("SettleCharged", func(t *testing.T) { shadowSettleCharged(t, cfg, prefix) })
}

// shadowSettleCharged: a settle under Policy.Charged of the take's
// decisions corrects the enforced limits and the shadow limits the take
// charged, and leaves a would-deny's state as it was; the store decides
// the smaller policy on the key's existing states, by name.
func shadowSettleCharged(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	ctx := context.Background()
	fixed := func(lim int64) core.Limit {
		return core.Limit{Algorithm: core.FixedWindow, Limit: lim, Window: 3_600_000_000}
	}
	p := withShadow(t, policy(t, []string{"enforced", "small", "large"}, fixed(100), fixed(2), fixed(50)), "small", "large")
	each := make([]core.Decision, 3)
	for i, cost := range []int64{2, 1} {
		if _, d, err := s.Decide(ctx, req(prefix, "settle-charged", store.Take, t0+int64(i), cost, p), each); err != nil || !d.Allowed {
			t.Fatalf("take %d: %+v %v", cost, d, err)
		}
	}
	if each[1].Allowed || !each[2].Allowed {
		t.Fatalf("the second take: small should be a would-deny, large charged: %+v", each)
	}
	q := p.Charged(each)
	if q == nil || q.Len() != 2 || q.Names()[0] != "enforced" || q.Names()[1] != "large" || !q.Shadow(1) {
		t.Fatalf("Charged: %+v", q)
	}
	if _, _, err := s.Decide(ctx, req(prefix, "settle-charged", store.Settle, t0+2, 5, q), nil); err != nil {
		t.Fatalf("settle: %v", err)
	}
	if _, _, err := s.Decide(ctx, req(prefix, "settle-charged", store.Peek, t0+3, 0, p), each); err != nil {
		t.Fatal(err)
	}
	if each[0].Remaining != 100-8 || each[1].Remaining != 0 || each[2].Remaining != 50-8 {
		t.Fatalf("after the settle, remaining %d %d %d, want 92 0 42 (small untouched)", each[0].Remaining, each[1].Remaining, each[2].Remaining)
	}
}

// shadowModel decides a policy with shadow limits from the core's
// functions one limit at a time, as the store.Policy doc defines it: the
// enforced limits with core.TakeAll, then each shadow limit with core.Take
// when they admit (charged exactly when it admits) or core.Peek when they
// deny. It is the reference the stores are held to.
type shadowModel struct {
	ls     []core.Limit
	shadow []bool
	ss     []core.State
}

func newShadowModel(ls []core.Limit, shadow []bool) *shadowModel {
	m := &shadowModel{ls: ls, shadow: shadow, ss: make([]core.State, len(ls))}
	for i, l := range ls {
		if l.Algorithm == core.SlidingLog {
			m.ss[i].Log = make([]int64, 0, l.Limit)
		}
	}
	return m
}

// take returns the deciding index, the decision and every limit's.
func (m *shadowModel) take(now, cost int64) (int, core.Decision, []core.Decision, error) {
	ds := make([]core.Decision, len(m.ls))
	var eLimits []core.Limit
	var eStates []core.State
	var eIndex []int
	for i, l := range m.ls {
		if !m.shadow[i] {
			eLimits, eStates, eIndex = append(eLimits, l), append(eStates, m.ss[i]), append(eIndex, i)
		}
	}
	deciding, admitted := -1, true
	if len(eLimits) > 0 {
		eds := make([]core.Decision, len(eLimits))
		j, err := core.TakeAll(eLimits, eStates, now, cost, eds)
		if err != nil {
			return 0, core.Decision{}, nil, err
		}
		for k, i := range eIndex {
			m.ss[i], ds[i] = eStates[k], eds[k]
		}
		deciding, admitted = eIndex[j], eds[j].Allowed
	}
	for i, l := range m.ls {
		if !m.shadow[i] {
			continue
		}
		var err error
		if admitted {
			ds[i], m.ss[i], err = core.Take(l, m.ss[i], now, cost)
		} else {
			ds[i], err = core.Peek(l, m.ss[i], now, cost)
		}
		if err != nil {
			return 0, core.Decision{}, nil, err
		}
	}
	d := core.Decision{}
	if deciding >= 0 {
		d = ds[deciding]
	} else {
		for i := range m.ls {
			if deciding < 0 || ds[i].Remaining < ds[deciding].Remaining {
				deciding = i
			}
		}
		d = ds[deciding]
		d.Allowed, d.RetryAfter, d.Delay = true, 0, 0
	}
	return deciding, d, ds, nil
}

// shadowSameAsModel drives policies with a shadow limit of each algorithm
// (beside an enforced limit, before one, alone) through a sequence of
// times and costs, denials of both kinds included, and compares every
// decision with the model.
func shadowSameAsModel(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	ctx := context.Background()
	enforced := core.Limit{Algorithm: core.TokenBucket, Limit: 6, Window: 1_000_000}
	for _, alg := range algorithms {
		cand := core.Limit{Algorithm: alg, Limit: 4, Window: 1_000_000}
		for _, c := range []struct {
			name   string
			names  []string
			ls     []core.Limit
			shadow []string
		}{
			{"after", []string{"enforced", "candidate"}, []core.Limit{enforced, cand}, []string{"candidate"}},
			{"before", []string{"candidate", "enforced"}, []core.Limit{cand, enforced}, []string{"candidate"}},
			{"alone", []string{"candidate"}, []core.Limit{cand}, []string{"candidate"}},
		} {
			p := withShadow(t, policy(t, c.names, c.ls...), c.shadow...)
			flags := make([]bool, len(c.ls))
			for i := range flags {
				flags[i] = p.Shadow(i)
			}
			m := newShadowModel(c.ls, flags)
			key := fmt.Sprintf("shadow-%v-%s", alg, c.name)
			now := t0
			for i := range 80 {
				now += int64((i*7919)%300_000) - 50_000 // includes steps back
				cost := int64(i % 4)
				wi, want, wantEach, err := m.take(now, cost)
				if err != nil {
					t.Fatal(err)
				}
				each := make([]core.Decision, len(c.ls))
				gi, got, err := s.Decide(ctx, req(prefix, key, store.Take, now, cost, p), each)
				if err != nil {
					t.Fatalf("%v %s step %d: %v", alg, c.name, i, err)
				}
				if gi != wi || got != want {
					t.Fatalf("%v %s step %d (cost %d): store decided %d %+v, model %d %+v", alg, c.name, i, cost, gi, got, wi, want)
				}
				for j := range each {
					if each[j] != wantEach[j] {
						t.Fatalf("%v %s step %d (cost %d): limit %q: store %+v, model %+v", alg, c.name, i, cost, c.names[j], each[j], wantEach[j])
					}
				}
			}
		}
	}
}

// shadowCharged: a shadow limit is charged only when the call is admitted
// and it would admit the cost itself; it never denies; an enforced denial
// charges nothing, and the shadow limit's decision is then a peek.
func shadowCharged(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	ctx := context.Background()
	names := []string{"enforced", "candidate"}
	el := core.Limit{Algorithm: core.FixedWindow, Limit: 4, Window: 3_600_000_000}
	cl := core.Limit{Algorithm: core.FixedWindow, Limit: 3, Window: 3_600_000_000}
	p := withShadow(t, policy(t, names, el, cl), "candidate")
	alone := policy(t, names[1:], cl) // the candidate's state, read as an enforced limit
	const key = "shadow-charged"
	decide := func(op store.Op, cost int64) (core.Decision, []core.Decision) {
		t.Helper()
		each := make([]core.Decision, 2)
		i, d, err := s.Decide(ctx, req(prefix, key, op, t0, cost, p), each)
		if err != nil || i != 0 {
			t.Fatalf("cost %d: deciding %d, %v", cost, i, err)
		}
		return d, each
	}
	left := func() int64 {
		t.Helper()
		_, d, err := s.Decide(ctx, req(prefix, key, store.Peek, t0, 0, alone), nil)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	// Cost 2: both admit; the candidate is charged.
	if d, each := decide(store.Take, 2); !d.Allowed || !each[1].Allowed || each[1].Remaining != 1 || left() != 1 {
		t.Fatalf("first call: %+v, candidate %+v, %d left", d, each[1], left())
	}
	// Cost 2 again: admitted (2 of 4 enforced), the candidate would deny
	// (1 left): a would-deny, not charged, and not a denial.
	if d, each := decide(store.Take, 2); !d.Allowed || each[1].Allowed || each[1].RetryAfter <= 0 || left() != 1 {
		t.Fatalf("second call: %+v, candidate %+v, %d left", d, each[1], left())
	}
	// Cost 1: the enforced limit is exhausted, so the call is denied; the
	// candidate's decision is a peek (it would admit 1), nothing charged.
	if d, each := decide(store.Take, 1); d.Allowed || !each[1].Allowed || each[1].Remaining != 0 || left() != 1 {
		t.Fatalf("third call: %+v, candidate %+v, %d left", d, each[1], left())
	}
	// A cost above the candidate's limit: the enforced limits decide (a
	// denial, exhausted); the candidate says Never.
	if d, each := decide(store.Take, 5); d.Allowed || each[1].Allowed || each[1].RetryAfter != core.Never || left() != 1 {
		t.Fatalf("fourth call: %+v, candidate %+v, %d left", d, each[1], left())
	}
	// The candidate promoted to enforced keeps its count: 1 left.
	each := make([]core.Decision, 2)
	if _, _, err := s.Decide(ctx, req(prefix, key, store.Peek, t0, 0, policy(t, names, el, cl)), each); err != nil ||
		each[0].Remaining != 0 || each[1].Remaining != 1 {
		t.Fatalf("promoted: %+v %v", each, err)
	}
}

// shadowOnly: a policy of only shadow limits admits every call, and each
// limit's decision says what it would have done.
func shadowOnly(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	ctx := context.Background()
	names := []string{"a", "b"}
	la := core.Limit{Algorithm: core.SlidingLog, Limit: 2, Window: 60_000_000}
	lb := core.Limit{Algorithm: core.GCRA, Limit: 3, Window: 60_000_000}
	p := withShadow(t, policy(t, names, la, lb), names...)
	for call := range 5 {
		each := make([]core.Decision, 2)
		i, d, err := s.Decide(ctx, req(prefix, "shadow-only", store.Take, t0, 1, p), each)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.RetryAfter != 0 {
			t.Fatalf("call %d: a policy of shadow limits decided %+v", call, d)
		}
		if each[0].Allowed != (call < 2) || each[1].Allowed != (call < 3) {
			t.Fatalf("call %d: shadow decisions %+v", call, each)
		}
		if want := map[bool]int{false: 0, true: 1}[each[1].Remaining < each[0].Remaining]; i != want {
			t.Fatalf("call %d: deciding %d, want %d, the limit closest to exhaustion", call, i, want)
		}
	}
	// Charged only as each admitted: a has 0 left, b 0 too (3 admitted).
	each := make([]core.Decision, 2)
	if _, _, err := s.Decide(ctx, req(prefix, "shadow-only", store.Peek, t0, 0, policy(t, names, la, lb)), each); err != nil ||
		each[0].Remaining != 0 || each[1].Remaining != 0 {
		t.Fatalf("after: %+v %v", each, err)
	}
	// A peek of a key that has no state yet admits too.
	if _, d, err := s.Decide(ctx, req(prefix, "shadow-only-new", store.Peek, t0, 7, p), each); err != nil || !d.Allowed || each[0].Allowed {
		t.Fatalf("peek of a new key: %+v %+v %v", d, each, err)
	}
}

// shadowPeek: a peek of a policy with shadow limits changes nothing.
func shadowPeek(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	ctx := context.Background()
	names := []string{"enforced", "candidate"}
	p := withShadow(t, policy(t, names,
		core.Limit{Algorithm: core.SlidingWindow, Limit: 5, Window: 1_000_000},
		core.Limit{Algorithm: core.SlidingLog, Limit: 2, Window: 1_000_000}), "candidate")
	for range 3 {
		each := make([]core.Decision, 2)
		_, d, err := s.Decide(ctx, req(prefix, "shadow-peek", store.Peek, t0, 2, p), each)
		if err != nil || !d.Allowed || d.Remaining != 3 || !each[1].Allowed || each[1].Remaining != 0 {
			t.Fatalf("peek: %+v %+v %v", d, each, err)
		}
	}
	each := make([]core.Decision, 2)
	if _, d, err := s.Decide(ctx, req(prefix, "shadow-peek", store.Take, t0, 2, p), each); err != nil || !d.Allowed || !each[1].Allowed {
		t.Fatalf("take after peeks: %+v %+v %v", d, each, err)
	}
}

// shadowRace: goroutines on one key, an enforced limit and a shadow one:
// exactly the enforced limit is admitted, and exactly the shadow limit's
// quota of the admitted calls is charged to it (the others are would-denies).
func shadowRace(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	calls := int64(cfg.Goroutines * cfg.Calls)
	el := core.Limit{Algorithm: core.TokenBucket, Limit: calls / 2, Window: 3_600_000_000}
	cl := core.Limit{Algorithm: core.GCRA, Limit: calls / 5, Window: 3_600_000_000}
	names := []string{"enforced", "candidate"}
	p := withShadow(t, policy(t, names, el, cl), "candidate")
	const key = "shadow-race"
	var admitted, charged, wouldDeny atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, cfg.Goroutines)
	for range cfg.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			each := make([]core.Decision, 2)
			for range cfg.Calls {
				_, d, err := s.Decide(context.Background(), req(prefix, key, store.Take, t0, 1, p), each)
				if err != nil {
					errs <- err
					return
				}
				if !d.Allowed {
					continue
				}
				admitted.Add(1)
				if each[1].Allowed {
					charged.Add(1)
				} else {
					wouldDeny.Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if admitted.Load() != el.Limit || charged.Load() != cl.Limit || wouldDeny.Load() != el.Limit-cl.Limit {
		t.Fatalf("admitted %d (want %d), the shadow limit charged %d (want %d), would-deny %d (want %d)",
			admitted.Load(), el.Limit, charged.Load(), cl.Limit, wouldDeny.Load(), el.Limit-cl.Limit)
	}
	each := make([]core.Decision, 2)
	if _, _, err := s.Decide(context.Background(), req(prefix, key, store.Peek, t0, 0, policy(t, names, el, cl)), each); err != nil ||
		each[0].Remaining != 0 || each[1].Remaining != 0 {
		t.Fatalf("after: %+v %v", each, err)
	}
}

// shadowRefused: a store that cannot decide shadow limits refuses every
// decision of a policy with some, and decides the same limits without.
func shadowRefused(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	ctx := context.Background()
	names := []string{"enforced", "candidate"}
	plain := policy(t, names,
		core.Limit{Algorithm: core.FixedWindow, Limit: 5, Window: 1_000_000},
		core.Limit{Algorithm: core.FixedWindow, Limit: 2, Window: 1_000_000})
	for _, p := range []*store.Policy{withShadow(t, plain, "candidate"), withShadow(t, plain, names...)} {
		for _, op := range []store.Op{store.Take, store.Peek} {
			if _, _, err := s.Decide(ctx, req(prefix, "shadow-refused", op, t0, 1, p), nil); !errors.Is(err, cfg.ShadowRefused) {
				t.Fatalf("op %d: got %v, want %v", op, err, cfg.ShadowRefused)
			}
		}
	}
	if _, d, err := s.Decide(ctx, req(prefix, "shadow-refused", store.Take, t0, 1, plain), nil); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("without shadow limits: %+v %v", d, err)
	}
}
