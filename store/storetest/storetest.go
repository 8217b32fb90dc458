// Package storetest is the conformance suite every store.Store runs: the
// same decisions as package core on every algorithm, all-or-nothing
// multi-limit calls, peek, reset, shadow limits, and exactness under
// concurrency.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// runs numbers the calls of Run, so that each has keys of its own.
var runs atomic.Int64

// Config tells the suite about the store under test.
type Config struct {
	// New returns an empty store (or one whose keys the suite's random
	// prefix keeps apart) and a cleanup function.
	New func(t *testing.T) store.Store
	// Goroutines for the concurrency tests; default 32.
	Goroutines int
	// Calls per goroutine in the concurrency tests; default 10.
	Calls int
	// WithDecider, if set, returns an empty store that decides with d. The
	// suite then checks that the store applies its decider, and no other,
	// on every path: a take, a peek of a new and of a known key, several
	// limits at once. Leave it nil for a store that decides elsewhere (in
	// SQL).
	WithDecider func(t *testing.T, d core.Decider) store.Store
	// ShadowRefused, if set, is the error the store answers a policy with
	// shadow limits with, for a store that cannot decide them. The suite then checks that every
	// decision of such a policy is refused with it, instead of its shadow
	// cases.
	ShadowRefused error
}

// t0 is the suite's request time, 2026-01-01 (µs): fixed, so runs repeat,
// and past by the real clock, so a state the suite writes is idle by it.
const t0 = int64(1_767_225_600_000_000)

var algorithms = core.Algorithms()

// Run runs the suite.
//
// The suite decides at request times around 2026-01-01, long past by the
// real clock, so every state it writes is idle by that clock at once: a
// store must not expire idle states (pgstore's Expire or ExpireEvery,
// rl_expire, on the store or on a database it shares) while Run runs on
// it, or the suite's keys start over under it and its checks fail. Expire
// after Run returns.
func Run(t *testing.T, cfg Config) {
	if cfg.Goroutines == 0 {
		cfg.Goroutines = 32
	}
	if cfg.Calls == 0 {
		cfg.Calls = 10
	}
	// Unique in the process too: callers may run the suite on one store
	// from parallel tests, at the same nanosecond.
	prefix := fmt.Sprintf("storetest-%d-%d", time.Now().UnixNano(), runs.Add(1))
	t.Run("SameAsCore", func(t *testing.T) { sameAsCore(t, cfg, prefix) })
	t.Run("AllOrNothing", func(t *testing.T) { allOrNothing(t, cfg, prefix) })
	t.Run("PeekChangesNothing", func(t *testing.T) { peek(t, cfg, prefix) })
	t.Run("Reset", func(t *testing.T) { reset(t, cfg, prefix) })
	t.Run("InvalidInput", func(t *testing.T) { invalid(t, cfg, prefix) })
	t.Run("Exactness", func(t *testing.T) { exactness(t, cfg, prefix) })
	t.Run("AllOrNothingRace", func(t *testing.T) { allOrNothingRace(t, cfg, prefix) })
	t.Run("Shadow", func(t *testing.T) { shadow(t, cfg, prefix) })
	t.Run("CarryAndSettle", func(t *testing.T) { carryAndSettle(t, cfg, prefix) })
	t.Run("SettleRace", func(t *testing.T) { settleRace(t, cfg, prefix) })
	if cfg.WithDecider != nil {
		t.Run("UsesItsDecider", func(t *testing.T) { usesItsDecider(t, cfg, prefix) })
	}
}

// spyCost is a valid cost that spyDecider refuses, so an answer of
// core.ErrCost to it can only come from the spy.
const spyCost = 7777

// spyDecider is the native core, except that it counts its calls and
// refuses spyCost.
type spyDecider struct{ takes, peeks, settles atomic.Int64 }

func (d *spyDecider) TakeAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	d.takes.Add(1)
	if cost == spyCost {
		return 0, core.ErrCost
	}
	return core.TakeAll(ls, ss, now, cost, ds)
}

func (d *spyDecider) PeekAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	d.peeks.Add(1)
	if cost == spyCost {
		return 0, core.ErrCost
	}
	return core.PeekAll(ls, ss, now, cost, ds)
}

func (d *spyDecider) SettleAll(ls []core.Limit, ss []core.State, now, delta int64, ds []core.Decision) (int, error) {
	d.settles.Add(1)
	if delta == spyCost {
		return 0, core.ErrCost
	}
	return core.SettleAll(ls, ss, now, delta, ds)
}

// usesItsDecider: every path of the store goes through its decider, whose
// answers (even ones the native core would not give) are the store's.
func usesItsDecider(t *testing.T, cfg Config, prefix string) {
	d := &spyDecider{}
	s := cfg.WithDecider(t, d)
	ctx := context.Background()
	one := core.Limit{Algorithm: core.TokenBucket, Limit: 10_000, Window: 1_000_000}
	two := []core.Limit{one, {Algorithm: core.SlidingLog, Limit: 100, Window: 1_000_000}}
	names := []string{"a", "b"}
	p1, p2, pb := policy(t, names[:1], one), policy(t, names, two...), policy(t, names[1:], two[1])
	for _, c := range []struct {
		what string
		req  store.Request
		peek bool
	}{
		{"peek of a new key", req(prefix, "spy-new", store.Peek, t0, 1, p1), true},
		{"take", req(prefix, "spy", store.Take, t0, 1, p1), false},
		{"peek of a known key", req(prefix, "spy", store.Peek, t0, 1, p1), true},
		{"take of several limits", req(prefix, "spy", store.Take, t0, 1, p2), false},
		{"take with other limits", req(prefix, "spy", store.Take, t0, 1, pb), false},
		{"peek of several limits", req(prefix, "spy", store.Peek, t0, 1, p2), true},
		{"take of one limit by another policy", req(prefix, "spy", store.Take, t0, 1, policy(t, names[:1], one)), false},
		{"take with a shadow limit", req(prefix, "spy", store.Take, t0, 1, withShadow(t, p2, "b")), false},
		{"peek with a shadow limit", req(prefix, "spy", store.Peek, t0, 1, withShadow(t, p2, "b")), true},
		{"take of only a shadow limit", req(prefix, "spy", store.Take, t0, 1, withShadow(t, p2, "a", "b")), false},
		{"settle of one limit", req(prefix, "spy", store.Settle, t0, 1, p1), false},
		{"settle of several limits", req(prefix, "spy", store.Settle, t0, -1, p2), false},
	} {
		if cfg.ShadowRefused != nil && c.req.Policy.Shadowed() {
			continue
		}
		counter := &d.takes
		switch {
		case c.peek:
			counter = &d.peeks
		case c.req.Op == store.Settle:
			counter = &d.settles
		}
		before := counter.Load()
		_, got, err := s.Decide(ctx, c.req, nil)
		if err != nil || !got.Allowed {
			t.Fatalf("%s: %+v, %v", c.what, got, err)
		}
		if counter.Load() == before {
			t.Fatalf("%s: decided without the store's decider", c.what)
		}
		spied := c.req
		spied.Cost = spyCost
		if _, _, err := s.Decide(ctx, spied, nil); !errors.Is(err, core.ErrCost) {
			t.Fatalf("%s: the decider refused cost %d, the store answered %v", c.what, spyCost, err)
		}
	}
}

func req(prefix, key string, op store.Op, now, cost int64, p *store.Policy) store.Request {
	return store.Request{Policy: p, Prefix: prefix, Key: key, Op: op, Now: now, Cost: cost}
}

// policy returns the store.Policy of names and ls, failing t if they are
// not one.
func policy(t testing.TB, names []string, ls ...core.Limit) *store.Policy {
	t.Helper()
	p, err := store.NewPolicy(names, ls)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// withShadow returns p with the named limits as shadow limits, failing t
// if it cannot.
func withShadow(t testing.TB, p *store.Policy, names ...string) *store.Policy {
	t.Helper()
	q, err := p.WithShadow(names...)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// sameAsCore drives each algorithm through a sequence and compares every
// decision with the pure core on a local state.
func sameAsCore(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	ctx := context.Background()
	for _, alg := range algorithms {
		l := core.Limit{Algorithm: alg, Limit: 5, Window: 1_000_000}
		p := policy(t, []string{"default"}, l)
		st := core.State{Log: make([]int64, 0, 5)}
		key := "same-" + alg.String()
		now := t0
		for i := range 60 {
			now += int64((i*7919)%400_000) - 50_000 // includes steps back
			cost := int64(i % 3)
			want, next, err := core.Take(l, st, now, cost)
			if err != nil {
				t.Fatal(err)
			}
			st = next
			each := make([]core.Decision, 1)
			rp := p
			if i%10 == 9 { // now and then another policy of the same limit
				rp = policy(t, []string{"default"}, l)
			}
			_, got, err := s.Decide(ctx, req(prefix, key, store.Take, now, cost, rp), each)
			if err != nil {
				t.Fatalf("%v step %d: %v", alg, i, err)
			}
			if got != want || each[0] != want {
				t.Fatalf("%v step %d: store %+v, core %+v", alg, i, got, want)
			}
		}
	}
}

func allOrNothing(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	ctx := context.Background()
	burst := core.Limit{Algorithm: core.TokenBucket, Limit: 5, Window: 1_000_000}
	daily := core.Limit{Algorithm: core.FixedWindow, Limit: 7, Window: 86_400_000_000}
	p := policy(t, []string{"burst", "daily"}, burst, daily)
	take := func(now, cost int64) (int, core.Decision) {
		t.Helper()
		i, d, err := s.Decide(ctx, req(prefix, "multi", store.Take, now, cost, p), nil)
		if err != nil {
			t.Fatal(err)
		}
		return i, d
	}
	if _, d := take(t0, 5); !d.Allowed {
		t.Fatal("first 5 denied")
	}
	// Burst exhausted: denied by burst, daily must not be consumed.
	if i, d := take(t0+1, 1); d.Allowed || i != 0 {
		t.Fatalf("want burst denial, got %d %+v", i, d)
	}
	// After refill: 2 more fit the daily limit, the third is denied by daily.
	if _, d := take(t0+2_000_000, 2); !d.Allowed {
		t.Fatalf("2 after refill denied: %+v", d)
	}
	if i, d := take(t0+3_000_000, 1); d.Allowed || i != 1 {
		t.Fatalf("want daily denial, got %d %+v", i, d)
	}
	// A different set of limits on the same key keeps each limit's state.
	i, d, err := s.Decide(ctx, req(prefix, "multi", store.Peek, t0+3_000_000, 1, policy(t, []string{"daily"}, daily)), nil)
	if err != nil || d.Allowed || d.Remaining != 0 || i != 0 {
		t.Fatalf("daily alone: %d %+v %v", i, d, err)
	}
}

func peek(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	ctx := context.Background()
	l := core.Limit{Algorithm: core.SlidingLog, Limit: 3, Window: 1_000_000}
	p := policy(t, []string{"default"}, l)
	for range 5 {
		_, d, err := s.Decide(ctx, req(prefix, "peek", store.Peek, t0, 2, p), nil)
		if err != nil || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("peek on fresh key: %+v %v", d, err)
		}
	}
	if _, d, _ := s.Decide(ctx, req(prefix, "peek", store.Take, t0, 3, p), nil); !d.Allowed {
		t.Fatal("take after peeks denied")
	}
	_, d, err := s.Decide(ctx, req(prefix, "peek", store.Peek, t0+1, 1, p), nil)
	if err != nil || d.Allowed || d.RetryAfter != 999_999 {
		t.Fatalf("peek on full key: %+v %v", d, err)
	}
}

func reset(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	ctx := context.Background()
	l := core.Limit{Algorithm: core.GCRA, Limit: 2, Window: 60_000_000}
	names := []string{"default"}
	p := policy(t, names, l)
	for range 2 {
		s.Decide(ctx, req(prefix, "reset", store.Take, t0, 1, p), nil)
	}
	if _, d, _ := s.Decide(ctx, req(prefix, "reset", store.Take, t0, 1, p), nil); d.Allowed {
		t.Fatal("third allowed")
	}
	if err := s.Reset(ctx, prefix, "reset", names); err != nil {
		t.Fatal(err)
	}
	if _, d, _ := s.Decide(ctx, req(prefix, "reset", store.Take, t0, 2, p), nil); !d.Allowed {
		t.Fatal("denied after reset")
	}
	if err := s.Reset(ctx, prefix, "reset", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(ctx, prefix, "never-seen", nil); err != nil {
		t.Fatal(err)
	}
	if _, d, _ := s.Decide(ctx, req(prefix, "reset", store.Take, t0, 2, p), nil); !d.Allowed {
		t.Fatal("denied after reset of all names")
	}
}

func invalid(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	ctx := context.Background()
	good := core.Limit{Algorithm: core.FixedWindow, Limit: 2, Window: 1_000_000}
	p := policy(t, []string{"default"}, good)
	s.Decide(ctx, req(prefix, "invalid", store.Take, t0, 1, p), nil)
	// An invalid limit never reaches a store: NewPolicy refuses it with
	// the core's error.
	for _, c := range []struct {
		l    core.Limit
		want core.Error
	}{
		{core.Limit{Algorithm: 9, Limit: 2, Window: 1}, core.ErrAlgorithm},
		{core.Limit{Algorithm: core.FixedWindow, Limit: 0, Window: 1}, core.ErrLimit},
	} {
		if _, err := store.NewPolicy([]string{"default"}, []core.Limit{c.l}); !errors.Is(err, c.want) {
			t.Fatalf("%+v: NewPolicy answered %v, want %v", c.l, err, c.want)
		}
	}
	for _, c := range []struct {
		p         *store.Policy
		now, cost int64
		want      core.Error
	}{
		{p, t0, -1, core.ErrCost},
		{p, -5, 1, core.ErrTime},
		{nil, t0, 1, core.ErrLimits},
	} {
		_, _, err := s.Decide(ctx, req(prefix, "invalid", store.Take, c.now, c.cost, c.p), nil)
		if ce, ok := asCore(err); !ok || ce != c.want {
			t.Fatalf("%+v: got %v, want %v", c, err, c.want)
		}
	}
	// Nothing was consumed by the failed calls.
	if _, d, _ := s.Decide(ctx, req(prefix, "invalid", store.Peek, t0, 0, p), nil); d.Remaining != 1 {
		t.Fatalf("remaining %d after invalid calls, want 1", d.Remaining)
	}
}

// exactness: many goroutines on one key admit exactly the limit.
func exactness(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	limit := int64(cfg.Goroutines*cfg.Calls) / 3
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := core.Limit{Algorithm: alg, Limit: limit, Window: 3_600_000_000}
			p := policy(t, []string{"default"}, l)
			key := "exact-" + alg.String()
			var admitted, denied atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make(chan error, cfg.Goroutines)
			for range cfg.Goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range cfg.Calls {
						_, d, err := s.Decide(context.Background(), req(prefix, key, store.Take, t0, 1, p), nil)
						if err != nil {
							errs <- err
							return
						}
						if d.Allowed {
							admitted.Add(1)
						} else {
							denied.Add(1)
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
			if admitted.Load() != limit {
				t.Fatalf("admitted %d, want exactly %d (denied %d)", admitted.Load(), limit, denied.Load())
			}
		})
	}
}

func asCore(err error) (core.Error, bool) {
	var ce core.Error
	ok := errors.As(err, &ce)
	return ce, ok
}

// allOrNothingRace races a two-limit request against requests for each of
// its limits alone, on one key: a two-limit call takes from both or from
// neither, so afterwards each limit has exactly its quota left less what the
// admitted calls that include it took.
func allOrNothingRace(t *testing.T, cfg Config, prefix string) {
	s := cfg.New(t)
	hourly := core.Limit{Algorithm: core.FixedWindow, Limit: 60, Window: 3_600_000_000}
	burst := core.Limit{Algorithm: core.TokenBucket, Limit: 40, Window: 86_400_000_000}
	reqs := []*store.Policy{
		policy(t, []string{"hourly", "burst"}, hourly, burst),
		policy(t, []string{"hourly"}, hourly),
		policy(t, []string{"burst"}, burst),
	}
	const key = "race-all-or-nothing"
	var admitted [3]atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, cfg.Goroutines)
	for g := range cfg.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range cfg.Calls {
				which, cost := (g+i)%3, int64(1+(g+i)%2)
				_, d, err := s.Decide(context.Background(), req(prefix, key, store.Take, t0, cost, reqs[which]), nil)
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted[which].Add(cost)
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
	each := make([]core.Decision, 2)
	if _, _, err := s.Decide(context.Background(), req(prefix, key, store.Peek, t0, 0, reqs[0]), each); err != nil {
		t.Fatal(err)
	}
	a, h, b := admitted[0].Load(), admitted[1].Load(), admitted[2].Load()
	if each[0].Remaining != 60-(a+h) || each[1].Remaining != 40-(a+b) {
		t.Fatalf("after %d units by both limits, %d by hourly alone, %d by burst alone: %d hourly and %d burst left, want %d and %d",
			a, h, b, each[0].Remaining, each[1].Remaining, 60-(a+h), 40-(a+b))
	}
}
