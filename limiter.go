package rl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
	"unsafe"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/util/clock"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/store"
)

// DefaultMaxKeyLength is the longest key accepted by default, in bytes.
const DefaultMaxKeyLength = 256

// Clock returns the current time in microseconds since the Unix epoch: the
// stores' clock type, so one value serves a Limiter and its store.
type Clock = store.Clock

// SystemClock reads time.Now: microsecond precision, at the cost of a
// time.Now call (BENCHMARKS.md has the figures).
func SystemClock() int64 { return clock.System() }

var coarse = sync.OnceValue(func() *clock.Coarse { return clock.NewCoarse(time.Millisecond) })

// CoarseClock is the default clock: the process-wide coarse clock described
// in the package doc (1 ms resolution, an atomic load a reading).
func CoarseClock() int64 { return coarse().Now() }

// Config configures a Limiter. Zero fields take the documented defaults.
type Config struct {
	// Store keeps the state. Default: a new memstore.Store, closed by
	// Limiter.Close, swept with the limiter's clock.
	Store store.Store
	// Policy is the policy of calls that do not name one (Allow, AllowN,
	// Peek, Settle, Reset, Wait, Reserve). It may be nil if every call
	// passes its own (Do with Request.Policy, ResetPolicy); the calls
	// that name none then fail with ErrNoPolicy.
	Policy *Policy
	// BaseKey prefixes every key, keeping limiters that share a store
	// apart. pgstore keeps a key as BaseKey + ":" + key, so limiters
	// sharing a PostgreSQL store stay apart only while no BaseKey is
	// another one followed by ":" (keep ":" out of them): base key "a" with
	// key "b:c" is base key "a:b" with key "c" there.
	BaseKey string
	// Clock is the time source. Default: CoarseClock.
	Clock Clock
	// MaxKeyLength bounds keys in bytes: the key the store sees, BaseKey,
	// ":" and the key (as pgstore and PostgreSQL store it), so that every
	// store takes every key the Limiter accepts. Default:
	// DefaultMaxKeyLength.
	MaxKeyLength int
	// AnyKey accepts any bytes in keys. By default a key is printable
	// ASCII without spaces (0x21 to 0x7E), which covers IPs, user IDs,
	// API keys and paths, and rejects what is most likely a bug
	// (control characters, invalid encodings) with ErrInvalidKey.
	AnyKey bool
}

// Limiter decides keys against policies. Create it with New.
type Limiter struct {
	store  store.Store
	owned  *memstore.Store
	mem    *memstore.Store // store, when it is a memstore (DecideInto)
	coarse *clock.Coarse   // the clock, when it is the default one
	policy *Policy
	base   string
	clock  Clock
	maxKey int
	anyKey bool
}

// Errors of the Limiter. Denial is not an error.
var (
	// ErrInvalidKey is matched by every *KeyError.
	ErrInvalidKey = errors.New("rl: invalid key")
	// ErrNoPolicy: a call without a policy on a Limiter without one
	// (Config.Policy nil). Its message says what to set.
	ErrNoPolicy = errors.New("rl: no policy: set Config.Policy, or pass Request.Policy to Do (ResetPolicy for Reset)")
	// ErrStore is matched by every failure of the store (a down store
	// also matches store.ErrUnavailable, a busy or full one
	// store.ErrBusy).
	ErrStore = errors.New("rl: store failed")
)

// KeyError describes an invalid key.
type KeyError struct {
	Key string // the key, truncated to 64 bytes
	// Reason says what is wrong with the key, fit for the client that
	// sent it ("empty", "300 bytes, longer than 256").
	Reason string
	// bytes marks a key refused for its bytes: Error adds the advice of
	// Config.AnyKey, which is for the developer, not the client.
	bytes bool
}

func (e *KeyError) Error() string {
	if e.bytes {
		return fmt.Sprintf("rl: invalid key %q: %s (set Config.AnyKey to allow any bytes)", e.Key, e.Reason)
	}
	return fmt.Sprintf("rl: invalid key %q: %s", e.Key, e.Reason)
}
func (e *KeyError) Is(target error) bool { return target == ErrInvalidKey }

// New returns a Limiter. cfg.Policy is the policy of the calls that name
// none (Allow, AllowN, Peek, Settle, Reset, Wait, Reserve). Leave it nil
// only for a Limiter whose every call passes its own policy, through Do
// (Request.Policy) and ResetPolicy, as a limiter serving several plans
// does: then those calls return ErrNoPolicy, whose message says to set
// Config.Policy. New itself refuses nothing: every field has a default.
func New(cfg Config) (*Limiter, error) {
	l := &Limiter{store: cfg.Store, policy: cfg.Policy, base: cfg.BaseKey, clock: cfg.Clock,
		maxKey: cfg.MaxKeyLength, anyKey: cfg.AnyKey}
	if l.clock == nil {
		l.clock = CoarseClock
		l.coarse = coarse()
	}
	if l.maxKey <= 0 {
		l.maxKey = DefaultMaxKeyLength
	}
	if l.store == nil {
		l.owned = memstore.New(&memstore.Config{Clock: l.clock})
		l.store = l.owned
	}
	l.mem, _ = l.store.(*memstore.Store)
	return l, nil
}

// Close releases the store the Limiter created itself (none otherwise).
func (l *Limiter) Close() error {
	if l.owned != nil {
		return l.owned.Close()
	}
	return nil
}

// Policy returns the policy of calls that name none (Config.Policy; nil if
// there is none).
func (l *Limiter) Policy() *Policy { return l.policy }

// Allow takes one unit for key under the default policy.
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	var r Result
	err := l.decide(ctx, store.Take, key, 1, nil, nil, &r)
	return r, err
}

// AllowN takes cost units (0 or more) for key under the default policy.
func (l *Limiter) AllowN(ctx context.Context, key string, cost int64) (Result, error) {
	var r Result
	err := l.decide(ctx, store.Take, key, cost, nil, nil, &r)
	return r, err
}

// Peek reports what AllowN would decide, changing nothing.
func (l *Limiter) Peek(ctx context.Context, key string, cost int64) (Result, error) {
	var r Result
	err := l.decide(ctx, store.Peek, key, cost, nil, nil, &r)
	return r, err
}

// Settle corrects the units key has used under the default policy by
// delta, when the real cost of a call is known only after it (the tokens
// a model generated, the bytes a response sent): take an estimate with
// AllowN when the call arrives, then settle actual − estimate when it
// ends. A positive delta is charged even beyond the limit: the key is in
// debt, and its calls are denied until the debt is paid off as the
// algorithm restores units. A negative one refunds, never below nothing
// used; pass actual − estimate with actual ≥ 0 and it never gives back
// more than the call was charged. Settle never denies: the Result
// describes the key after the correction (Allowed, with its Remaining and
// NextAfter). Concurrent settles and decisions on one key stay exact: each
// is one atomic step of the store; one the store refuses for load
// (store.ErrBusy) is tried again a few times (settleRetries), as a settle
// through Do is. delta must be within ±core.MaxCost;
// a debt larger than a state can record is capped there (core.Settle).
// Every limit of the default policy is settled, its shadow limits each on
// its own: to leave out the shadow limits a call did not charge, settle
// with Do, Request.Settle and Policy.Charged of the take's Request.Each.
func (l *Limiter) Settle(ctx context.Context, key string, delta int64) (Result, error) {
	var r Result
	err := l.settle(ctx, key, delta, nil, nil, &r)
	return r, err
}

// Reset forgets key's state under the default policy's limits.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	return l.ResetPolicy(ctx, key, nil)
}

// ResetPolicy forgets key's state under p's limits (nil: the default
// policy).
func (l *Limiter) ResetPolicy(ctx context.Context, key string, p *Policy) error {
	if err := l.checkKey(key); err != nil {
		return err
	}
	if p == nil {
		if p = l.policy; p == nil {
			return ErrNoPolicy
		}
	}
	if err := l.store.Reset(ctx, l.base, key, p.sp.Names()); err != nil {
		return fmt.Errorf("%w: reset %q: %w", ErrStore, key, err)
	}
	return nil
}

// Request is a call with every option: Do takes it.
type Request struct {
	Key  string
	Cost int64
	// Policy decides this call; nil means the Limiter's.
	Policy *Policy
	// Peek decides without changing anything.
	Peek bool
	// Settle corrects the key's usage by Cost, which may be negative,
	// instead of deciding (see Limiter.Settle). Peek and Settle are
	// exclusive.
	Settle bool
	// Each is a slice the caller provides (make([]rl.LimitResult,
	// policy.Len()), reusable across calls): when at least as long as the
	// policy it receives every limit's result, in the policy's order (a
	// shadow limit's with Shadow set, Allowed false for a would-deny); a
	// shorter or nil slice receives nothing. (This costs one small
	// allocation per call; without it a decision on a warm key allocates
	// nothing.)
	Each []LimitResult
}

// Do decides req.
func (l *Limiter) Do(ctx context.Context, req Request) (Result, error) {
	op := store.Take
	switch {
	case req.Peek && req.Settle:
		return Result{}, errors.New("rl: a request is a peek or a settle, not both")
	case req.Peek:
		op = store.Peek
	case req.Settle:
		var r Result
		err := l.settle(ctx, req.Key, req.Cost, req.Policy, req.Each, &r)
		return r, err
	}
	var r Result
	err := l.decide(ctx, op, req.Key, req.Cost, req.Policy, req.Each, &r)
	return r, err
}

// settleRetries are the waits before a settle the store refused for load
// (store.ErrBusy: a pool or queue saturated, a full store) is tried again.
// A settle is a correction of what was already served: dropped, load alone
// would turn a debt into admissions, so it is retried a few times, for
// about a fifth of a second in all (each wait up to half again, at random,
// so that settles refused together do not all come back together), within
// its context.
var settleRetries = [...]time.Duration{10 * time.Millisecond, 40 * time.Millisecond, 160 * time.Millisecond}

// settle is decide's Settle, tried again after settleRetries while the
// store refuses it for load.
func (l *Limiter) settle(ctx context.Context, key string, delta int64, p *Policy, each []LimitResult, r *Result) error {
	err := l.decide(ctx, store.Settle, key, delta, p, each, r)
	for _, wait := range settleRetries {
		if err == nil || !errors.Is(err, store.ErrBusy) {
			break
		}
		t := time.NewTimer(wait + rand.N(wait/2)) // jittered: settles refused together spread out
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		*r = Result{}
		err = l.decide(ctx, store.Settle, key, delta, p, each, r)
	}
	return err
}

// decide decides into *r (left zero on an error).
func (l *Limiter) decide(ctx context.Context, op store.Op, key string, cost int64, p *Policy, each []LimitResult, r *Result) error {
	if err := l.checkKey(key); err != nil {
		return err
	}
	if p == nil {
		if p = l.policy; p == nil {
			return ErrNoPolicy
		}
	}
	if len(each) >= len(p.src) {
		return l.decideEach(ctx, op, key, cost, p, each, r)
	}
	var now int64 // l.now, inlined
	if c := l.coarse; c != nil {
		now = c.Now()
	} else {
		now = l.clock()
	}
	var (
		i   int
		d   core.Decision
		err error
	)
	if m := l.mem; m != nil {
		// The memstore directly, the request and the decision by
		// pointer: through the interface both are copied in 16-byte
		// moves that wait on the 8-byte stores that wrote them (see
		// memstore.Store.DecideInto). The request is filled field by
		// field: a composite literal is built in a temporary and copied
		// into the variable in those same moves.
		var req store.Request
		req.Policy, req.Prefix, req.Key, req.Op, req.Now, req.Cost = p.sp, l.base, key, op, now, cost
		i, err = m.DecideInto(&req, nil, &d)
	} else {
		// The request is built in the call (a variable would be copied
		// once more).
		i, d, err = l.store.Decide(ctx, store.Request{Policy: p.sp, Prefix: l.base, Key: key, Op: op, Now: now, Cost: cost}, nil)
	}
	if err != nil {
		return storeError(key, err, op, now, cost)
	}
	// The decision is written to *r field by field here, as fromCore
	// does, without fromCore's call (it is too big to inline).
	lim := &p.src[i]
	r.Name, r.Window, r.Index, r.Shadow = lim.Name, lim.Window, i, lim.Shadow
	r.Allowed, r.Limit, r.Remaining = d.Allowed, d.Limit, d.Remaining
	r.ResetAfter, r.Delay, r.RetryAfter = micros(d.ResetAfter), micros(d.Delay), micros(d.RetryAfter)
	r.Never, r.NextAfter = d.RetryAfter == core.Never, micros(d.NextAfter)
	return nil
}

// storeError wraps an error of the store's Decide of a call (op, now,
// cost). The core's bare ErrTime or ErrCost (a store deciding in Go) is
// described as a core.CallError, naming the value and the range allowed.
func storeError(key string, err error, op store.Op, now, cost int64) error {
	var ce core.Error
	if errors.As(err, &ce) {
		if err == core.ErrTime || err == core.ErrCost {
			err = &core.CallError{Code: ce, Now: now, Cost: cost, Settle: op == store.Settle}
		}
		return fmt.Errorf("rl: %q: %w", key, err)
	}
	return fmt.Errorf("%w: %w", ErrStore, err)
}

// decideEach is decide's call of the store when every limit's result is
// wanted.
func (l *Limiter) decideEach(ctx context.Context, op store.Op, key string, cost int64, p *Policy, each []LimitResult, r *Result) error {
	var buf [MaxLimits]core.Decision
	ds := buf[:len(p.src)]
	now := l.now()
	i, d, err := l.store.Decide(ctx, store.Request{Policy: p.sp, Prefix: l.base, Key: key, Op: op, Now: now, Cost: cost}, ds)
	if err != nil {
		return storeError(key, err, op, now, cost)
	}
	for j := range ds {
		fromCore(&p.src[j], &ds[j], &each[j])
	}
	fromCore(&p.src[i], &d, &r.LimitResult)
	r.Index = i
	return nil
}

// now reads the limiter's clock.
func (l *Limiter) now() int64 {
	if l.coarse != nil {
		return l.coarse.Now()
	}
	return l.clock()
}

// baseLen is what the base key adds to a key in the store: BaseKey and ":".
func (l *Limiter) baseLen() int {
	if l.base == "" {
		return 0
	}
	return len(l.base) + 1
}

// keyChars marks the bytes a key may hold by default: 0x21 to 0x7E.
var keyChars = func() (t [256]bool) {
	for c := 0x21; c <= 0x7e; c++ {
		t[c] = true
	}
	return t
}()

// CheckKey reports whether key is one the Limiter decides: not empty, at
// most MaxKeyLength bytes as the store sees it (with BaseKey and ":"), and
// printable ASCII without spaces unless AnyKey is set. It returns a
// *KeyError (matching ErrInvalidKey) or nil; every decision checks the
// same way, so a front end can refuse a key before it decides anything.
func (l *Limiter) CheckKey(key string) error { return l.checkKey(key) }

func (l *Limiter) checkKey(key string) error {
	if key == "" {
		return &KeyError{Reason: "empty"}
	}
	if n := len(key) + l.baseLen(); n > l.maxKey {
		if n == len(key) {
			return &KeyError{Key: clip(key), Reason: fmt.Sprintf("%d bytes, longer than %d", len(key), l.maxKey)}
		}
		return &KeyError{Key: clip(key), Reason: fmt.Sprintf("%d bytes (%d with the base key %q), longer than %d", len(key), n, l.base, l.maxKey)}
	}
	if !l.anyKey && !printable(key) {
		for i := 0; i < len(key); i++ {
			if !keyChars[key[i]] {
				return &KeyError{Key: clip(key), Reason: fmt.Sprintf("byte %#02x at %d is not printable ASCII", key[i], i), bytes: true}
			}
		}
	}
	return nil
}

// printable reports whether every byte of key is in 0x21 to 0x7E, eight
// bytes at a time: a byte below 0x21 borrows into its high bit when 0x21 is
// subtracted, one above 0x7E carries into it when 1 is added, and one of
// 0x80 or more has it already (exact for the presence of such a byte). A
// key of 8 bytes or more ends with its last 8 (overlapping), one of 4 to 7
// is tested as its first and last 4, so that only keys under 4 bytes are
// tested a byte at a time.
func printable(key string) bool {
	b := unsafe.Slice(unsafe.StringData(key), len(key))
	n := len(b)
	switch {
	case n >= 8:
		for i := 0; i < n-8; i += 8 {
			if !printable8(binary.LittleEndian.Uint64(b[i:])) {
				return false
			}
		}
		return printable8(binary.LittleEndian.Uint64(b[n-8:]))
	case n >= 4:
		return printable8(uint64(binary.LittleEndian.Uint32(b)) | uint64(binary.LittleEndian.Uint32(b[n-4:]))<<32)
	}
	for _, c := range b {
		if !keyChars[c] {
			return false
		}
	}
	return true
}

// printable8 reports whether the 8 bytes of x are all in 0x21 to 0x7E.
func printable8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	return (((x-ones*0x21)&^x)|(x+ones)|x)&highs == 0
}

func clip(key string) string {
	if len(key) > 64 {
		return key[:64]
	}
	return key
}
