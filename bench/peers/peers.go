// Package peers adapts other Go rate limiters and this project's to one
// interface, so the benchmarks and the over-admission program run the same
// workload on each. It is a separate module so that the main module never
// depends on them.
package peers

import (
	"context"
	"fmt"
	"sync"
	"time"

	gorl "github.com/AliRizaAynaci/gorl/v2"
	gorlCore "github.com/AliRizaAynaci/gorl/v2/core"
	ajiwo "github.com/ajiwo/ratelimit"
	ajiwoMem "github.com/ajiwo/ratelimit/backends/memory"
	ajiwoTB "github.com/ajiwo/ratelimit/strategies/tokenbucket"
	"github.com/mennanov/limiters"
	goLimiter "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledMem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululeMem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
)

// Limiter is one peer configured with a limit per window, keyed.
type Limiter interface {
	// Allow takes one unit for key and reports whether it was admitted.
	Allow(ctx context.Context, key string) (bool, error)
	Close() error
}

// Peer describes one limiter under test.
type Peer struct {
	// Name is the row label, also the benchmark's peer= value.
	Name string
	// Module is the Go module (and version, from go.mod) measured.
	Module string
	// Algorithm is what the peer does with "limit per window".
	Algorithm string
	// New returns a limiter admitting limit units per window per key.
	New func(limit int64, window time.Duration) (Limiter, error)
}

// Project is the name of this project's row; ratios are taken against it.
const Project = "rl"

// All lists the peers that build here, this project first.
var All = []Peer{
	{Name: Project, Module: "github.com/rlcore/rl (memstore, CoarseClock)", Algorithm: "token bucket (core.TokenBucket)", New: newRL(core.TokenBucket, nil)},
	{Name: "rl-sysclock", Module: "github.com/rlcore/rl (memstore, SystemClock)", Algorithm: "token bucket, time.Now per call", New: newRL(core.TokenBucket, rl.SystemClock)},
	{Name: "x-time-rate", Module: "golang.org/x/time/rate", Algorithm: "token bucket; one *rate.Limiter per key in a sync.Map (our wrapper)", New: newXRate},
	{Name: "go-limiter", Module: "github.com/sethvargo/go-limiter/memorystore", Algorithm: "bucket refilled per whole interval (tick)", New: newGoLimiter},
	{Name: "throttled", Module: "github.com/throttled/throttled/v2 + store/memstore", Algorithm: "GCRA over get + CAS (10 tries)", New: newThrottled},
	{Name: "ulule", Module: "github.com/ulule/limiter/v3 + drivers/store/memory", Algorithm: "fixed window counter from the key's first hit", New: newUlule},
	{Name: "mennanov", Module: "github.com/mennanov/limiters (TokenBucketInMemory, LockNoop, Registry)", Algorithm: "token bucket, one per key in its Registry (as its IP-limiter example)", New: newMennanov},
	{Name: "ajiwo", Module: "github.com/ajiwo/ratelimit + backends/memory", Algorithm: "token bucket (strategies/tokenbucket) over get + CAS", New: newAjiwo},
	{Name: "gorl", Module: "github.com/AliRizaAynaci/gorl/v2 (in-memory store)", Algorithm: "token bucket (core.TokenBucket)", New: newGorl},
}

// Unavailable lists the peers asked for that could not be fetched here, and
// why. They are printed in every table rather than silently dropped.
var Unavailable []struct{ Name, Module, Reason string }

// Find returns the peer named name.
func Find(name string) (Peer, bool) {
	for _, p := range All {
		if p.Name == name {
			return p, true
		}
	}
	return Peer{}, false
}

// RLAlgorithm returns this project's limiter with another algorithm, for the
// over-admission program.
func RLAlgorithm(a core.Algorithm) Peer {
	return Peer{Name: "rl/" + a.String(), Module: "github.com/rlcore/rl", Algorithm: a.String(), New: newRL(a, nil)}
}

// --- this project ---

type rlLimiter struct{ l *rl.Limiter }

func newRL(a core.Algorithm, clock rl.Clock) func(int64, time.Duration) (Limiter, error) {
	return func(limit int64, window time.Duration) (Limiter, error) {
		p, err := rl.NewPolicy(rl.Limit{Algorithm: a, Limit: limit, Window: window})
		if err != nil {
			return nil, err
		}
		l, err := rl.New(rl.Config{Policy: p, Clock: clock})
		if err != nil {
			return nil, err
		}
		return rlLimiter{l}, nil
	}
}

func (r rlLimiter) Allow(ctx context.Context, key string) (bool, error) {
	res, err := r.l.Allow(ctx, key)
	return res.Allowed, err
}

func (r rlLimiter) Close() error { return r.l.Close() }

// --- golang.org/x/time/rate ---

// xRate keys x/time/rate limiters the usual way: one *rate.Limiter per key
// in a sync.Map. x/time/rate has no keyed store or expiry of its own.
type xRate struct {
	m     sync.Map
	limit rate.Limit
	burst int
}

func newXRate(limit int64, window time.Duration) (Limiter, error) {
	return &xRate{limit: rate.Limit(float64(limit) / window.Seconds()), burst: int(limit)}, nil
}

func (x *xRate) Allow(_ context.Context, key string) (bool, error) {
	v, ok := x.m.Load(key)
	if !ok {
		v, _ = x.m.LoadOrStore(key, rate.NewLimiter(x.limit, x.burst))
	}
	return v.(*rate.Limiter).Allow(), nil
}

func (x *xRate) Close() error { return nil }

// --- github.com/sethvargo/go-limiter ---

type goLim struct{ s goLimiter.Store }

func newGoLimiter(limit int64, window time.Duration) (Limiter, error) {
	s, err := memorystore.New(&memorystore.Config{Tokens: uint64(limit), Interval: window})
	if err != nil {
		return nil, err
	}
	return goLim{s}, nil
}

func (g goLim) Allow(ctx context.Context, key string) (bool, error) {
	_, _, _, ok, err := g.s.Take(ctx, key)
	return ok, err
}

func (g goLim) Close() error { return g.s.Close(context.Background()) }

// --- github.com/throttled/throttled/v2 ---

type thr struct{ l *throttled.GCRARateLimiterCtx }

func newThrottled(limit int64, window time.Duration) (Limiter, error) {
	st, err := throttledMem.NewCtx(0) // 0: a plain map, no LRU cap
	if err != nil {
		return nil, err
	}
	// A burst of limit, refilled at limit per window: MaxBurst counts the
	// requests beyond the first.
	l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
		MaxRate: throttled.PerDuration(int(limit), window), MaxBurst: int(limit) - 1,
	})
	if err != nil {
		return nil, err
	}
	return thr{l}, nil
}

func (t thr) Allow(ctx context.Context, key string) (bool, error) {
	limited, _, err := t.l.RateLimitCtx(ctx, key, 1)
	if err != nil {
		return false, err
	}
	return !limited, nil
}

func (t thr) Close() error { return nil }

// --- github.com/ulule/limiter/v3 ---

type ul struct{ l *ulule.Limiter }

func newUlule(limit int64, window time.Duration) (Limiter, error) {
	return ul{ulule.New(ululeMem.NewStore(), ulule.Rate{Period: window, Limit: limit})}, nil
}

func (u ul) Allow(ctx context.Context, key string) (bool, error) {
	c, err := u.l.Get(ctx, key)
	if err != nil {
		return false, err
	}
	return !c.Reached, nil
}

// Close: the memory store's cleaner goroutine has no public stop; it is
// stopped by a finalizer when the store is collected.
func (u ul) Close() error { return nil }

// --- github.com/mennanov/limiters ---

// mennanovLim keys token buckets the way the module's gRPC IP-limiter
// example does: a Registry maps each key to a *TokenBucket (in-memory state,
// no-op lock), renewed for one window per call.
type mennanovLim struct {
	reg      *limiters.Registry
	clock    limiters.Clock
	capacity int64
	refill   time.Duration
	ttl      time.Duration
}

func newMennanov(limit int64, window time.Duration) (Limiter, error) {
	refill := window / time.Duration(limit) // one token per refill
	if refill <= 0 {
		return nil, fmt.Errorf("mennanov: %d per %s is finer than 1ns a token", limit, window)
	}
	return &mennanovLim{reg: limiters.NewRegistry(), clock: limiters.NewSystemClock(), capacity: limit, refill: refill, ttl: window}, nil
}

func (m *mennanovLim) Allow(ctx context.Context, key string) (bool, error) {
	b := m.reg.GetOrCreate(key, func() any {
		return limiters.NewTokenBucket(m.capacity, m.refill, limiters.NewLockNoop(), limiters.NewTokenBucketInMemory(), m.clock, limiters.NewStdLogger())
	}, m.ttl, m.clock.Now()).(*limiters.TokenBucket)
	_, err := b.Limit(ctx)
	if err == limiters.ErrLimitExhausted {
		return false, nil
	}
	return err == nil, err
}

func (m *mennanovLim) Close() error { return nil }

// --- github.com/ajiwo/ratelimit ---

type ajiwoLim struct{ l *ajiwo.RateLimiter }

func newAjiwo(limit int64, window time.Duration) (Limiter, error) {
	l, err := ajiwo.New(
		ajiwo.WithBackend(ajiwoMem.New()),
		ajiwo.WithBaseKey("bench"),
		ajiwo.WithPrimaryStrategy(&ajiwoTB.Config{Burst: int(limit), Rate: float64(limit) / window.Seconds()}),
	)
	if err != nil {
		return nil, err
	}
	return ajiwoLim{l}, nil
}

func (a ajiwoLim) Allow(ctx context.Context, key string) (bool, error) {
	return a.l.Allow(ctx, ajiwo.AccessOptions{Key: key})
}

func (a ajiwoLim) Close() error { return a.l.Close() }

// --- github.com/AliRizaAynaci/gorl/v2 ---

type gorlLim struct{ l gorlCore.Limiter }

func newGorl(limit int64, window time.Duration) (Limiter, error) {
	l, err := gorl.New(gorlCore.Config{Strategy: gorlCore.TokenBucket, Limit: int(limit), Window: window})
	if err != nil {
		return nil, err
	}
	return gorlLim{l}, nil
}

func (g gorlLim) Allow(ctx context.Context, key string) (bool, error) {
	r, err := g.l.Allow(ctx, key)
	return r.Allowed, err
}

func (g gorlLim) Close() error { return g.l.Close() }

// Describe returns a one-line description of p for tables.
func (p Peer) Describe() string { return fmt.Sprintf("%s: %s, %s", p.Name, p.Module, p.Algorithm) }
