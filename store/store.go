// Package store defines the one contract between the limiter and the places
// that keep rate-limit state: an atomic read-modify-write of one key's
// states, with a decision function (core.Decider) applied inside it.
//
// The decision function is a setting of the store, chosen when it is
// created (memstore.Config.Decider, pgstore.Config.Mode and Decider), not
// of each request: whichever runtime decides (the native core, its
// WebAssembly build hosted by wazero, or the PL/pgSQL port), the results
// are identical, which the conformance vectors in tests/vectors pin.
//
// A request carries a Policy, the names and limits checked and compiled
// once (NewPolicy), and the key; a store that decides with the native core
// uses the compiled limits (core.TakeInto, core.TakeAllCompiled), any other
// decider the limits themselves. A policy may hold shadow limits
// (Policy.WithShadow): candidates decided in the same atomic step that
// never deny, which Policy.Decide decides for every store.
//
// Backends: memstore (in process, the embedded default) and pgstore
// (PostgreSQL through pgx). Every backend runs the shared suite in
// store/storetest.
package store

import (
	"context"
	"errors"

	"github.com/rlcore/rl/core"
)

// Op is what a Request does.
type Op uint8

const (
	// Take decides and, when admitted, stores the new states.
	Take Op = iota
	// Peek decides and changes nothing.
	Peek
	// Settle corrects the units every limit has used by the request's
	// Cost, which may be negative (core.SettleAll): the cost of a call
	// known only after it, settled against its estimate. It never denies;
	// the states are written back, a debt above a limit included. Shadow
	// limits are settled too, each on its own after the enforced ones
	// (Policy.Decide).
	Settle
)

// Request is one decision on one key under a Policy. It is passed by value
// so that a call allocates nothing: eight words, a pointer to the policy
// built once rather than its names and limits rebuilt per call. A store may
// keep req.Policy (it is immutable), but not the strings' bytes beyond the
// call unless it copies them.
type Request struct {
	// Policy holds the limits decided, all or nothing, and their names,
	// which identify each limit's state within the key. A nil Policy is
	// answered with core.ErrLimits.
	Policy *Policy
	// Prefix and Key together identify the key (the limiter's base key and
	// the per-call key); a store joins them as it likes, consistently.
	Prefix, Key string
	Op          Op
	// Now is the time of the decision in µs since the Unix epoch. A store
	// with a clock of its own (a database server's) may be configured to
	// use that instead.
	Now int64
	// Cost is the units a Take or Peek asks for, or the correction of a
	// Settle (negative: a refund).
	Cost int64
}

// Clock returns the current time in µs since the Unix epoch, the unit of
// Request.Now. It is the one clock type of the module: rl.Config.Clock
// (rl.Clock is this type), memstore.Config.Clock (its sweeper) and
// failover.Config.Clock (its cooldown) take one, and a test passes a fake.
type Clock func() int64

// Store keeps rate-limit state. Implementations are safe for concurrent use.
//
// Decide atomically reads the states of req's limits on req's key, applies
// the store's decision function (core.TakeAll or PeekAll semantics: all or
// nothing) and writes the new states back when admitted. A policy with
// shadow limits is decided by Policy.Decide in that same step: the
// enforced limits all or nothing, each shadow limit charged only when the
// call is admitted and it would admit the cost itself, never denying. It
// returns the deciding limit's index and decision (Policy.Deciding), and
// fills each with every limit's decision, a shadow limit's own included,
// when len(each) ≥ req.Policy.Len() (pass nil when only the deciding one
// matters). A denial is a result, not an error. A store that cannot decide
// shadow limits refuses a policy with some with an error of its own,
// never by deciding them as enforced or ignoring them. Errors are
// either a core.Error (the request was invalid) or a failure of the store
// itself, which a store should make recognisable with errors.Is(err,
// ErrUnavailable) when it is transient (the backend is down or timed out).
//
// Reset forgets the states of the named limits of a key (all of them when
// names is nil).
type Store interface {
	Decide(ctx context.Context, req Request, each []core.Decision) (int, core.Decision, error)
	Reset(ctx context.Context, prefix, key string, names []string) error
}

// ErrUnavailable marks a store failure that is not the request's fault: the
// backend is down, unreachable or too slow. Stores wrap their errors so that
// errors.Is(err, ErrUnavailable) holds for them.
var ErrUnavailable = errors.New("store: unavailable")

// ErrBusy marks a store that is working but saturated: a decision waited
// for a resource (a pooled database connection) longer than the store's
// queue bound. It is load, not an outage, so it deliberately does NOT match
// ErrUnavailable: fail-open policies and failover stores must not answer it
// with admissions. Callers should answer "overloaded, retry later".
var ErrBusy = errors.New("store: busy")

// ErrFull is returned by a store with a cap on keys or bytes when a new key
// does not fit, after the store has dropped the keys whose state is at rest
// (a store may return an error wrapping it that says which cap). A full
// store is load, not an outage: a flood of unique keys fills it, and a
// fail-open policy that admitted every new key then would admit the flood.
// So ErrFull matches ErrBusy (callers answer "overloaded, retry later":
// 503 with Retry-After, OVER_LIMIT over gRPC) and never ErrUnavailable.
var ErrFull = &fullError{}

type fullError struct{}

func (*fullError) Error() string        { return "store: full" }
func (*fullError) Is(target error) bool { return target == ErrBusy }
