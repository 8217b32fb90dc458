package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/outage"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
	"github.com/rlcore/rl/internal/testkit/fakestore"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/store"
)

func newEngine(t *testing.T, s store.Store, opts Options) *Engine {
	t.Helper()
	opts.Store = s
	opts.Clock = func() int64 { return 1_000_000 }
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func target(t *testing.T, e *Engine, failOpen bool) *Rule {
	t.Helper()
	p, err := e.Compile("rule \"r\"", []ruleconfig.NamedLimit{{Name: "l", Limit: core.Limit{Algorithm: core.FixedWindow, Limit: 2, Window: 1_000_000}}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := e.Limiter("r", p)
	if err != nil {
		t.Fatal(err)
	}
	return &Rule{Name: "r", Limiter: lim, Policy: p, FailOpen: failOpen}
}

// Decide's outcome for every class of result: the one vocabulary.
func TestDecideOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fail     error // the store's error; nil: it decides
		failOpen bool
		steps    int // decisions before the one checked
		key      string
		cost     int64
		want     Outcome
		class    outage.Class
	}{
		{name: "allowed", key: "k", cost: 1, want: Allowed},
		{name: "denied after the limit", steps: 2, key: "k", cost: 1, want: Denied},
		{name: "invalid key", key: "a b", cost: 1, want: InvalidKey, class: outage.Invalid},
		{name: "invalid cost", key: "k", cost: core.MaxCost + 1, want: InvalidCost, class: outage.Invalid},
		{name: "outage fails open", fail: store.ErrUnavailable, failOpen: true, key: "k", cost: 1, want: FailOpen, class: outage.Outage},
		{name: "outage fails closed", fail: store.ErrUnavailable, key: "k", cost: 1, want: FailClosed, class: outage.Outage},
		{name: "busy store is load, never open", fail: store.ErrBusy, failOpen: true, key: "k", cost: 1, want: Overloaded, class: outage.Load},
		{name: "one timeout is no outage", fail: fmt.Errorf("%w: %w", store.ErrUnavailable, context.DeadlineExceeded), failOpen: true, key: "k", cost: 1, want: FailClosed, class: outage.Failed},
		{name: "corrupt state is internal", fail: core.ErrState, failOpen: true, key: "k", cost: 1, want: Error, class: outage.Internal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fakestore.New(t, fakestore.Config{})
			s.Fail(tc.fail)
			e := newEngine(t, s, Options{})
			tg := target(t, e, tc.failOpen)
			for range tc.steps {
				e.Run(context.Background(), tg, &Input{Key: tc.key, Cost: tc.cost})
			}
			d := e.Run(context.Background(), tg, &Input{Key: tc.key, Cost: tc.cost})
			if d.Outcome != tc.want || d.Class != tc.class {
				t.Fatalf("outcome %v class %v (err %v), want %v %v", d.Outcome, d.Class, d.Err, tc.want, tc.class)
			}
			switch {
			case tc.class == 0 && d.Err != nil:
				t.Fatalf("decided with an error: %v", d.Err)
			case tc.class > outage.Invalid && outage.ClassOf(d.Err) != tc.class:
				t.Fatalf("error %v is not classified %v", d.Err, tc.class)
			}
		})
	}
}

// Three timeouts of decisions begun after the last success, none
// completing since, are an outage: counted once per decision, in the
// Engine's one detector.
func TestDecideTimeoutsMakeAnOutage(t *testing.T) {
	s := fakestore.New(t, fakestore.Config{})
	s.Fail(fmt.Errorf("%w: %w", store.ErrUnavailable, context.DeadlineExceeded))
	e := newEngine(t, s, Options{})
	tg := target(t, e, true)
	var got []Outcome
	for range outage.Timeouts {
		got = append(got, e.Run(context.Background(), tg, &Input{Key: "k", Cost: 1}).Outcome)
	}
	want := []Outcome{FailClosed, FailClosed, FailOpen}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}

// The per-key gate refuses a check beyond the bound as load, never a
// proxy's settle, and a decision API settle only beyond the bound's number
// of settles.
func TestDecideGate(t *testing.T) {
	s := fakestore.New(t, fakestore.Config{})
	h := s.Hold(fakestore.All)
	var reasons []string
	var mu sync.Mutex
	e := newEngine(t, s, Options{MaxInFlightPerKey: 1, OnOverload: func(r string) { mu.Lock(); reasons = append(reasons, r); mu.Unlock() }})
	tg := target(t, e, true)
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.Run(ctx, tg, &Input{Key: "hot", Cost: 1}) }()
	<-h.Arrived()
	if d := e.Run(ctx, tg, &Input{Key: "hot", Cost: 1}); d.Outcome != Overloaded || !errors.Is(d.Err, ErrOverloaded) {
		t.Fatalf("a second check on the hot key: %v %v, want overloaded", d.Outcome, d.Err)
	}
	// A settle goes through all the same, over the bound.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if d := e.Run(ctx, tg, &Input{Key: "hot", Cost: 1, Settle: true, Gate: GateSettle}); d.Outcome != Allowed {
			t.Errorf("settle: %v %v", d.Outcome, d.Err)
		}
	}()
	<-h.Arrived()
	// A bounded settle too: no other settle of the decision API is in flight.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if d := e.Run(ctx, tg, &Input{Key: "hot", Cost: 1, Settle: true, Gate: GateSettleBounded}); d.Outcome != Allowed {
			t.Errorf("bounded settle: %v %v", d.Outcome, d.Err)
		}
	}()
	<-h.Arrived()
	if d := e.Run(ctx, tg, &Input{Key: "hot", Cost: 1, Settle: true, Gate: GateSettleBounded}); d.Outcome != Overloaded {
		t.Fatalf("a second bounded settle: %v, want overloaded", d.Outcome)
	}
	// Another key is not held back.
	wg.Add(1)
	go func() { defer wg.Done(); e.Run(ctx, tg, &Input{Key: "cold", Cost: 1}) }()
	<-h.Arrived()
	h.Release()
	wg.Wait()
	if fmt.Sprint(reasons) != "[key_in_flight key_in_flight]" {
		t.Fatalf("overload reasons %v", reasons)
	}
}

// The per-key bound refuses the excess on one key, not other keys.
func TestKeyGate(t *testing.T) {
	g := newKeyGate(2)
	a1, ok := g.enter("r", "hot")
	if !ok {
		t.Fatal("first")
	}
	a2, ok := g.enter("r", "hot")
	if !ok {
		t.Fatal("second")
	}
	if _, ok = g.enter("r", "hot"); ok {
		t.Fatal("a third on the hot key")
	}
	free := 0
	for i := range 100 {
		if c, ok := g.enter("r", fmt.Sprint("other", i)); ok {
			free++
			c.Add(-1)
		}
	}
	if free < 99 {
		t.Fatalf("other keys held back: %d of 100 free (one may share the hot key's counter)", free)
	}
	a1.Add(-1)
	a2.Add(-1)
	if _, ok = g.enter("r", "hot"); !ok {
		t.Fatal("after release")
	}
}

// A shadow limit is refused at compile time by a store that cannot decide
// it, naming what holds it and wrapping why.
func TestCompileShadow(t *testing.T) {
	why := errors.New("no shadow here")
	e := newEngine(t, memstore.New(nil), Options{ShadowUnsupported: why})
	_, err := e.Compile(`rule "r"`, []ruleconfig.NamedLimit{{Name: "l", Limit: core.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: 1_000_000}, Shadow: true},
		{Name: "m", Limit: core.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: 1_000_000}}})
	if !errors.Is(err, why) {
		t.Fatalf("err %v, want wrapping %v", err, why)
	}
	if _, err := e.Compile(`rule "r"`, []ruleconfig.NamedLimit{{Name: "l", Limit: core.Limit{Algorithm: core.FixedWindow, Limit: 0, Window: 1_000_000}}}); err == nil {
		t.Fatal("limit 0 compiled")
	}
}

// Every outcome has a name and a status; the failures are the four.
func TestOutcomes(t *testing.T) {
	seen := map[string]bool{}
	failures := 0
	for _, o := range Outcomes() {
		if n := o.String(); n == "unknown" || seen[n] {
			t.Fatalf("outcome %d: name %q", o, n)
		}
		seen[o.String()] = true
		if o.Status() < 200 {
			t.Fatalf("%v: status %d", o, o.Status())
		}
		if o.Failure() {
			failures++
		}
	}
	if len(seen) != 10 || failures != 4 || Outcome(0).String() != "unknown" {
		t.Fatalf("%d outcomes, %d failures", len(seen), failures)
	}
	for _, tc := range []struct {
		c        outage.Class
		failOpen bool
		want     Outcome
	}{
		{outage.Load, true, Overloaded}, {outage.Outage, true, FailOpen}, {outage.Outage, false, FailClosed},
		{outage.Failed, true, FailClosed}, {outage.Internal, true, Error}, {outage.Invalid, false, InvalidKey},
	} {
		if got := OutcomeOf(tc.c, tc.failOpen); got != tc.want {
			t.Errorf("OutcomeOf(%v, %v) = %v, want %v", tc.c, tc.failOpen, got, tc.want)
		}
	}
}

// Run's steps before the decision: the key and the cost read by the
// rule's Reading (or as given), a request without a key or with a bad
// cost refused before the store, the override step choosing the key's
// policy, a front end's failure hook.
func TestRunSteps(t *testing.T) {
	e := newEngine(t, memstore.New(nil), Options{})
	lim := func(n int64) []ruleconfig.NamedLimit {
		return []ruleconfig.NamedLimit{{Name: "default", Limit: core.Limit{Algorithm: core.FixedWindow, Limit: n, Window: 1_000_000}}}
	}
	base, err := e.Compile("rule", lim(5))
	if err != nil {
		t.Fatal(err)
	}
	vip, err := e.Compile("override", lim(50))
	if err != nil {
		t.Fatal(err)
	}
	l, err := e.Limiter("r", base)
	if err != nil {
		t.Fatal(err)
	}
	r := &Rule{Name: "r", Limiter: l, Policy: base,
		Reading:   Reading{KeyBy: ruleconfig.KeyBy{Kind: ruleconfig.KeyHeader, Name: "x-user"}, Cost: 1, MinCost: 1, CostHeader: "x-cost"},
		Overrides: pipeline.NewOverrides([]ruleconfig.OverrideSpec{{Kind: ruleconfig.OverrideKey, Value: "vip"}}), OverridePolicies: []*rl.Policy{vip}}
	header := func(kv ...string) *pipeline.Request {
		return &pipeline.Request{Method: "GET", Path: "/", Header: pipeline.HeaderFunc(func(n string) []string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == n {
					return []string{kv[i+1]}
				}
			}
			return nil
		})}
	}
	down := fakestore.New(t, fakestore.Config{})
	down.Fail(store.ErrUnavailable)
	failing := &Rule{Name: "f", Limiter: rlLimiter(t, down, base)}
	for _, tc := range []struct {
		name     string
		rule     *Rule
		in       Input
		want     Outcome
		key      string
		cost     int64
		limit    int64 // of the deciding limit
		override int
	}{
		{name: "read key and cost", rule: r, in: Input{Request: header("x-user", "ann", "x-cost", "3")}, want: Allowed, key: "ann", cost: 3, limit: 5, override: -1},
		{name: "override by key", rule: r, in: Input{Request: header("x-user", "vip")}, want: Allowed, key: "vip", cost: 1, limit: 50, override: 0},
		{name: "no key", rule: r, in: Input{Request: header()}, want: MissingKey, override: -1},
		{name: "bad cost header", rule: r, in: Input{Request: header("x-user", "ann", "x-cost", "0")}, want: InvalidCost, key: "ann", override: -1},
		{name: "given key, given policy", rule: r, in: Input{Key: "vip", Cost: 2, Policy: base}, want: Allowed, key: "vip", cost: 2, limit: 5, override: -1},
		{name: "given key error", rule: r, in: Input{KeyErr: errors.New("none")}, want: MissingKey, override: -1},
		{name: "unkeyed", rule: &Rule{Name: "u", Limiter: l, AllowMissingKey: true}, in: Input{KeyErr: errors.New("none")}, want: Unkeyed, override: -1},
		{name: "fail hook", rule: failing, in: Input{Key: "k", Cost: 1, Fail: func(err error) (Outcome, error) { return FailOpen, err }}, want: FailOpen, key: "k", cost: 1, override: -1},
		{name: "fail hook answering no failure", rule: failing, in: Input{Key: "k", Cost: 1, Fail: func(err error) (Outcome, error) { return Allowed, err }}, want: FailClosed, key: "k", cost: 1, override: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Results = true
			res := e.Run(context.Background(), tc.rule, &tc.in)
			if res.Outcome != tc.want || res.Key != tc.key || res.Cost != tc.cost || res.Override != tc.override {
				t.Fatalf("outcome %v key %q cost %d override %d (err %v), want %v %q %d %d", res.Outcome, res.Key, res.Cost, res.Override, res.Err,
					tc.want, tc.key, tc.cost, tc.override)
			}
			if tc.limit != 0 && (res.Result.Limit != tc.limit || len(res.Each) != 1 || res.Verdict().Limits[0].Limit != tc.limit) {
				t.Fatalf("decided limit %d (each %v), want %d", res.Result.Limit, res.Each, tc.limit)
			}
			if (res.Outcome == Allowed) != (res.Err == nil) {
				t.Fatalf("outcome %v with error %v", res.Outcome, res.Err)
			}
		})
	}
}

// A policy compiled from checked limits is the one rl.NewPolicy makes of
// the same limits.
func TestPolicyOfCheckedLimits(t *testing.T) {
	ls := []ruleconfig.NamedLimit{{Name: "burst", Limit: core.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: 1_000_000, Rate: 5}},
		{Name: "trial", Limit: core.Limit{Algorithm: core.FixedWindow, Limit: 100, Window: 60_000_000}, Shadow: true}}
	p, err := Policy(ls)
	if err != nil {
		t.Fatal(err)
	}
	want := rl.MustPolicy(rl.Limit{Name: "burst", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Rate: 5},
		rl.Limit{Name: "trial", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute, Shadow: true})
	if fmt.Sprint(p.Limits()) != fmt.Sprint(want.Limits()) || !p.Shadowed() {
		t.Fatalf("limits %v, want %v", p.Limits(), want.Limits())
	}
	if _, err := Policy(nil); !errors.Is(err, rl.ErrPolicy) {
		t.Fatalf("no limits: %v", err)
	}
}

func rlLimiter(t *testing.T, s store.Store, p *rl.Policy) *rl.Limiter {
	t.Helper()
	l, err := rl.New(rl.Config{Store: s, Policy: p, BaseKey: "f", Clock: func() int64 { return 1_000_000 }})
	if err != nil {
		t.Fatal(err)
	}
	return l
}
