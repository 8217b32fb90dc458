package quotaclient

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/quota"
	"github.com/rlcore/rl/store"
)

// Bounds of a bucket id, the server's (internal/frontend/rlqs): entries of
// one BucketId, and bytes of one key or value.
const (
	MaxBucketEntries = 32
	MaxEntryLen      = 256
)

// BucketSpec is one bucket a rule takes its limit from.
type BucketSpec struct {
	// ID is the bucket_id map sent in every report: 1 to MaxBucketEntries
	// entries, each key and value 1 to MaxEntryLen bytes.
	ID map[string]string
	// Ceiling is the rule's own limit, the whole global limit: an
	// assignment above its rate or burst is clamped to it, and ALLOW_ALL
	// is read as it (quota.FromCore's rate and burst). No assignment lets
	// one replica admit more than the global limit itself.
	Ceiling core.Limit
	// Fallback is the limit the replica applies on its own while it holds
	// no live assignment (never received, expired, abandoned); nil: deny
	// every request.
	Fallback *core.Limit
	// RetryAfter is the RetryAfter, in µs, of a request denied with no
	// bucket to wait for (DENY_ALL, or no assignment and no fallback): the
	// report interval, when a new assignment may arrive.
	RetryAfter int64
}

// Key is the bucket id in canonical form: its entries sorted by key, each
// length-prefixed, so that no two ids share a form.
func (s *BucketSpec) Key() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(s.ID)) {
		fmt.Fprintf(&b, "%d:%s%d:%s", len(k), k, len(s.ID[k]), s.ID[k])
	}
	return b.String()
}

// Check validates the spec, naming the field at fault.
func (s *BucketSpec) Check() error {
	if n := len(s.ID); n == 0 || n > MaxBucketEntries {
		return fmt.Errorf("bucket has %d entries, want 1 to %d", n, MaxBucketEntries)
	}
	for _, k := range slices.Sorted(maps.Keys(s.ID)) {
		if v := s.ID[k]; k == "" || v == "" || len(k) > MaxEntryLen || len(v) > MaxEntryLen {
			return fmt.Errorf("bucket entry %.40q: %.40q: keys and values must be 1 to %d bytes", k, v, MaxEntryLen)
		}
	}
	if _, err := ceiling(s.Ceiling); err != nil {
		return err
	}
	if s.Fallback != nil {
		if _, err := core.Compile(*s.Fallback); err != nil {
			return fmt.Errorf("fallback: %w", err)
		}
	}
	if s.RetryAfter < 1 {
		return fmt.Errorf("retry after %dµs, want at least 1µs", s.RetryAfter)
	}
	return nil
}

// ceiling is l as a token bucket of the rate and burst the RLQS server
// divides (quota.FromCore).
func ceiling(l core.Limit) (core.Limit, error) {
	q, err := quota.FromCore(l)
	if err != nil {
		return core.Limit{}, fmt.Errorf("limit: %w", err)
	}
	return core.Limit{Algorithm: core.TokenBucket, Limit: q.Burst, Rate: q.Fill, Window: q.FillInterval}, nil
}

// Kind is what an assignment says.
type Kind uint8

const (
	// TokenBucket assigns a token bucket (MaxTokens, TokensPerFill per
	// FillInterval).
	TokenBucket Kind = iota + 1
	// DenyAll denies every request until the assignment expires.
	DenyAll
	// AllowAll is read as the bucket's ceiling, the rule's own limit.
	AllowAll
	// Abandon drops the assignment: the fallback applies, and the bucket
	// is reported again only once it is used.
	Abandon
)

// String names the kind as the protocol does.
func (k Kind) String() string {
	switch k {
	case TokenBucket:
		return "token_bucket"
	case DenyAll:
		return "deny_all"
	case AllowAll:
		return "allow_all"
	case Abandon:
		return "abandon"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Action is one bucket action of the server, checked (parseAction).
type Action struct {
	Kind Kind
	// MaxTokens, TokensPerFill and FillInterval (µs) are a TokenBucket's.
	MaxTokens, TokensPerFill, FillInterval int64
	// TTL is how long, in µs from its receipt, the assignment holds.
	TTL int64
}

// assignment is an Action in force.
type assignment struct {
	act     Action
	deny    bool
	c       core.Compiled // !deny
	expires int64         // µs, the client's clock
	clamped bool
}

// Bucket is one bucket of a Client: the assignment in force, the local
// token bucket it is applied to, and the usage not yet reported. Decide is
// all a request does: no request waits on the server. It is safe for
// concurrent use.
type Bucket struct {
	spec     BucketSpec
	key      string
	ceil     core.Compiled
	fallback *core.Compiled // nil: deny

	cur atomic.Pointer[assignment]

	mu    sync.Mutex
	state core.State

	// Units allowed (settles included) and denied since the last report.
	allowed, denied atomic.Int64
	// dormant: abandoned by the server and not used since; left out of
	// reports.
	dormant atomic.Bool
	// lastReport is the client's clock at the last report (µs).
	lastReport atomic.Int64

	stats bucketStats
}

// bucketStats are a bucket's counters since it was made.
type bucketStats struct {
	allowedReqs, deniedReqs, fallbackReqs atomic.Int64
	assignments, clamped, fresh           atomic.Int64
}

// carry continues old's counters in s, the counters of the bucket
// replacing old's (Client.Bucket): the assignment re-applied to it is not
// counted again.
func (s *bucketStats) carry(old *bucketStats) {
	for _, c := range []struct{ to, from *atomic.Int64 }{
		{&s.allowedReqs, &old.allowedReqs}, {&s.deniedReqs, &old.deniedReqs}, {&s.fallbackReqs, &old.fallbackReqs},
		{&s.assignments, &old.assignments}, {&s.clamped, &old.clamped}, {&s.fresh, &old.fresh},
	} {
		c.to.Store(c.from.Load())
	}
}

// Stats are a bucket's counters since it was made, continued across the
// replacements Client.Bucket makes.
type Stats struct {
	// Allowed and Denied count Take decisions (requests).
	Allowed, Denied int64
	// Fallback counts the decisions made without a live assignment.
	Fallback int64
	// Assignments counts the assignments applied (abandons included);
	// Clamped those above the ceiling, applied as the ceiling.
	Assignments, Clamped int64
	// Fresh sums the tokens assignments made available at once, beyond
	// what the local bucket carried: all of an assignment's max_tokens
	// when none was live before it, the raise of max_tokens otherwise.
	// It is the replica's part of ε in the bound (docs/rlqs.md).
	Fresh int64
	// Live reports whether an assignment is in force at the time asked;
	// Deny that it denies every request (DENY_ALL).
	Live, Deny bool
	// Assigned is the limit the live assignment decides with, as in force
	// (clamped to the ceiling; ALLOW_ALL's is the ceiling): a token
	// bucket of Limit tokens refilled with Rate per Window µs. The zero
	// Limit when no assignment is live or it denies.
	Assigned core.Limit
}

// newBucket makes a bucket of spec, which Check has accepted.
func newBucket(spec BucketSpec) (*Bucket, error) {
	if err := spec.Check(); err != nil {
		return nil, err
	}
	cl, _ := ceiling(spec.Ceiling)
	b := &Bucket{spec: spec, key: spec.Key()}
	b.spec.ID = maps.Clone(spec.ID)
	var err error
	if b.ceil, err = core.Compile(cl); err != nil {
		return nil, fmt.Errorf("limit: %w", err)
	}
	if spec.Fallback != nil {
		c, _ := core.Compile(*spec.Fallback)
		b.fallback = &c
	}
	return b, nil
}

// same reports whether s is the bucket's spec.
func (b *Bucket) same(s *BucketSpec) bool {
	o := &b.spec
	if o.Key() != s.Key() || o.Ceiling != s.Ceiling || o.RetryAfter != s.RetryAfter || (o.Fallback == nil) != (s.Fallback == nil) {
		return false
	}
	return o.Fallback == nil || *o.Fallback == *s.Fallback
}

// Spec returns the spec the bucket was made with.
func (b *Bucket) Spec() BucketSpec { return b.spec }

// Stats returns the bucket's counters; Live, Deny and Assigned are read at
// now (µs). It takes no lock: a scrape costs the decisions nothing.
func (b *Bucket) Stats(now int64) Stats {
	a := b.cur.Load()
	st := Stats{Allowed: b.stats.allowedReqs.Load(), Denied: b.stats.deniedReqs.Load(), Fallback: b.stats.fallbackReqs.Load(),
		Assignments: b.stats.assignments.Load(), Clamped: b.stats.clamped.Load(), Fresh: b.stats.fresh.Load(), Live: a != nil && now < a.expires}
	if st.Live {
		if st.Deny = a.deny; !a.deny {
			st.Assigned = a.c.Limit()
		}
	}
	return st
}

// limit returns the compiled limit deciding at now: the live assignment's,
// else the fallback; nil means deny. live reports whether an assignment
// decides.
func (b *Bucket) limit(now int64) (c *core.Compiled, live bool) {
	if a := b.cur.Load(); a != nil && now < a.expires {
		if a.deny {
			return nil, true
		}
		return &a.c, true
	}
	return b.fallback, false
}

// Decide decides one request of cost at now (µs) on the bucket: Take,
// Peek, or Settle (cost the correction). It never waits on the server: the
// assignment in force, or the fallback, is read from memory. A decision
// made under a changed assignment carries the units used over (core's
// carrying rules), so a new assignment never starts full unless the bucket
// had nothing used.
func (b *Bucket) Decide(op store.Op, now, cost int64) (core.Decision, error) {
	c, live := b.limit(now)
	if !live && op == store.Take {
		b.stats.fallbackReqs.Add(1)
	}
	if op == store.Take && b.dormant.Load() {
		b.dormant.Store(false)
	}
	if c == nil {
		return b.deny(op, now, cost)
	}
	var d core.Decision
	var err error
	b.mu.Lock()
	switch op {
	case store.Take:
		err = c.TakeInto(&b.state, now, cost, &d)
	case store.Peek:
		err = c.PeekInto(&b.state, now, cost, &d)
	case store.Settle:
		err = c.SettleInto(&b.state, now, cost, &d)
	default:
		err = fmt.Errorf("quotaclient: unknown op %d", op)
	}
	b.mu.Unlock()
	if err != nil {
		return core.Decision{}, err
	}
	b.count(op, cost, d.Allowed)
	return d, nil
}

// deny answers a request with no limit to decide it: DENY_ALL, or no
// assignment and no fallback. A settle is recorded on the state with the
// ceiling, so that a debt is kept for the next assignment.
func (b *Bucket) deny(op store.Op, now, cost int64) (core.Decision, error) {
	switch op {
	case store.Settle:
		var d core.Decision
		b.mu.Lock()
		err := b.ceil.SettleInto(&b.state, now, cost, &d)
		b.mu.Unlock()
		if err != nil {
			return core.Decision{}, err
		}
		b.count(op, cost, true)
		return d, nil
	case store.Peek:
		return core.Decision{Allowed: cost == 0, Limit: b.ceil.Limit().Limit, RetryAfter: b.retry(cost)}, nil
	}
	if cost < 1 || cost > core.MaxCost {
		return core.Decision{}, core.ErrCost
	}
	b.count(op, cost, false)
	return core.Decision{Limit: b.ceil.Limit().Limit, RetryAfter: b.retry(cost)}, nil
}

// retry is a denied request's RetryAfter without a bucket: the report
// interval (0 for a peek of nothing, which is admitted).
func (b *Bucket) retry(cost int64) int64 {
	if cost == 0 {
		return 0
	}
	return b.spec.RetryAfter
}

// count records a decision's units for the next report.
func (b *Bucket) count(op store.Op, cost int64, allowed bool) {
	switch {
	case op == store.Settle:
		b.allowed.Add(cost)
	case op == store.Peek:
	case allowed:
		b.allowed.Add(cost)
		b.stats.allowedReqs.Add(1)
	default:
		b.denied.Add(cost)
		b.stats.deniedReqs.Add(1)
	}
}

// usage takes the units allowed and denied since the last report (a
// refund beyond what was allowed is kept for the next one: a report
// carries no negative count).
func (b *Bucket) usage() (allowed, denied uint64) {
	a := b.allowed.Swap(0)
	if a < 0 {
		b.allowed.Add(a)
		a = 0
	}
	return uint64(a), uint64(b.denied.Swap(0))
}

// unreport puts back usage whose report could not be sent.
func (b *Bucket) unreport(allowed, denied uint64) {
	b.allowed.Add(int64(allowed))
	b.denied.Add(int64(denied))
}

// errAction marks an action the bucket refuses.
var errAction = errors.New("quotaclient: action refused")

// Apply applies an action received at now (µs, the client's clock): the
// assignment it makes holds until now + TTL. A token bucket above the
// ceiling's burst or rate is clamped to it; ALLOW_ALL is the ceiling.
func (b *Bucket) Apply(a Action, now int64) error {
	_, err := b.apply(a, now)
	return err
}

// apply is Apply; changed reports an assignment other than the one live
// before (not an extension).
func (b *Bucket) apply(a Action, now int64) (changed bool, err error) {
	b.stats.assignments.Add(1)
	next := &assignment{act: a, expires: now + a.TTL}
	switch a.Kind {
	case Abandon:
		b.cur.Store(nil)
		b.dormant.Store(true)
		return true, nil
	case DenyAll:
		next.deny = true
	case AllowAll:
		next.c = b.ceil
	case TokenBucket:
		if next.c, next.clamped, err = b.tokenBucket(a); err != nil {
			return false, err
		}
	default:
		return false, fmt.Errorf("%w: unknown kind %d", errAction, a.Kind)
	}
	prev := b.cur.Swap(next)
	live := prev != nil && now < prev.expires
	switch {
	case next.deny:
		return !live || !prev.deny, nil
	case live && !prev.deny:
		raise := next.c.Limit().Limit - prev.c.Limit().Limit
		b.stats.fresh.Add(max(0, raise))
		return next.c.Limit() != prev.c.Limit(), nil
	}
	b.stats.fresh.Add(next.c.Limit().Limit)
	return true, nil
}

// tokenBucket is a TokenBucket action's limit, clamped to the ceiling.
func (b *Bucket) tokenBucket(a Action) (core.Compiled, bool, error) {
	lim := core.Limit{Algorithm: core.TokenBucket, Limit: a.MaxTokens, Rate: a.TokensPerFill, Window: a.FillInterval}
	cl := b.ceil.Limit()
	clamped := false
	if lim.Limit > cl.Limit {
		lim.Limit, clamped = cl.Limit, true
	}
	// lim.Rate/lim.Window > cl.Rate/cl.Window, exactly.
	h1, l1 := bits.Mul64(uint64(lim.Rate), uint64(cl.Window))
	h2, l2 := bits.Mul64(uint64(cl.Rate), uint64(lim.Window))
	if h1 > h2 || (h1 == h2 && l1 > l2) {
		lim.Rate, lim.Window, clamped = cl.Rate, cl.Window, true
	}
	c, err := core.Compile(lim)
	if err != nil {
		return core.Compiled{}, false, fmt.Errorf("%w: token bucket %d tokens, %d per %dµs: %v", errAction, a.MaxTokens, a.TokensPerFill, a.FillInterval, err)
	}
	if clamped {
		b.stats.clamped.Add(1)
	}
	return c, clamped, nil
}
