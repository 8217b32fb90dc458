// Package memstore is the in-memory store.Store: the embedded default of the
// limiter, for one process.
//
// # Scaling with cores
//
// Keys are spread over shards by a seeded hash. A shard's index is a hash
// table whose buckets are atomic pointers: a lookup takes no lock and
// writes nothing shared, so calls on different keys never contend (only
// creating, resizing and dropping keys take the shard's mutex, and a lookup
// that misses asks again under it, so a miss is always authoritative). Each
// key's entry has its own mutex, taken for the decision: calls on one key
// are serialized, which makes every decision exact under any concurrency,
// and the store's decider (Config.Decider, the native core by default)
// decides under it on the key's states in place. A decision on a warm key
// allocates nothing.
//
// A key created with one limit (the common case) keeps its state, its name
// and a short key in its entry, laid out so that a decision reads three
// cache lines of it (the lookup and the lock; the state and its expiry;
// the text of key and name); with the native decider the core is called
// directly and writes the decision on the caller's stack. On many keys,
// where entries are not in the CPU's caches, those lines are most of a
// decision's cost.
//
// Why not compare-and-swap of a packed state (reconsidered for issue 11):
//
//   - The states do not fit a word. A token or leaky bucket keeps a time
//     (µs, up to 2^58) and a level (1/Window units, up to 2^61); GCRA keeps
//     three words (the arrival time, its fraction in 1/Rate µs, the time of
//     the admission that wrote it, which the clamping of a state written
//     under other parameters reads); a fixed window a start and a count (up
//     to 2^40). Packing them relative to a base time per entry fits only
//     for a while (a 24-bit offset beside a 34-bit level is 16 s), and a
//     base that moves needs a generation that an ABA can defeat: exactness
//     could not be proved, only made likely. Go has no 128-bit
//     compare-and-swap.
//   - A seqlock does not save a locked instruction: a writer takes the
//     version by compare-and-swap and releases it by an atomic store, which
//     is an XCHG on amd64, as many as the mutex (compare-and-swap to take,
//     atomic add to release).
//   - The gain is small: with the mutex removed altogether (unsafe, as an
//     experiment) a warm single-key Decide took about 10% less CPU time
//     (65-67 ns against 72-75 ns), the ceiling of any lock-free scheme,
//     which would still pay one compare-and-swap.
//
// # Memory
//
// Memory is bounded twice. An entry records when its states will be back to
// fresh (the decisions' ResetAfter) and a sweeper drops it after that, so
// the store holds the active keys only. And a byte budget (Config.MaxBytes,
// default DefaultMaxBytes = 256 MiB) bounds what the active keys may hold:
// every key is charged, when it is created, the bytes its state can ever
// reach under the limits it is created with (its entry and the index slot,
// its key and limit names, one state and one decision per limit, and for a
// sliding log the whole log, Limit × 8 bytes, allocated at once). A key that
// does not fit is refused with ErrBudget (which matches store.ErrFull and so
// store.ErrBusy: load, never an outage) and the store does not grow; a key that exists keeps
// being decided under those limits without asking for another byte, so
// filling the budget with junk keys never locks out a key that was there
// first. Only a key that later gains limits (new names, a longer sliding log)
// asks the budget again for the difference, and gets ErrBudget when it is
// full. Dropping a key (the sweeper, Reset) returns its bytes; when the
// budget is full, a new key first triggers a sweep of idle keys (at most
// one a second). Config.MaxKeys optionally caps the number of keys too
// (store.ErrFull beyond it).
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/clock"
	"github.com/rlcore/rl/store"
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Shards is the number of shards, rounded up to a power of two.
	// Default: 16 × GOMAXPROCS, at least 64.
	Shards int
	// MaxKeys caps the number of keys (each shard holds at most its share);
	// 0 means no cap.
	MaxKeys int
	// MaxBytes is the byte budget of the keys' state (see the package
	// doc for what a key is charged). Default (0): DefaultMaxBytes.
	// Negative: no budget.
	MaxBytes int64
	// SweepInterval is how often idle keys are dropped. Default: 30s.
	// Negative disables the background sweeper (call Sweep yourself).
	SweepInterval time.Duration
	// Clock returns the time in µs since the Unix epoch the sweeper compares
	// expiries with; use the limiter's clock. Default: the system clock.
	Clock store.Clock
	// Decider is the decision function applied inside each key's lock.
	// Default: core.Native{} (a *wasm.Pool decides with the WebAssembly
	// build of the same core).
	Decider core.Decider
}

// DefaultMaxBytes is the default byte budget: 256 MiB of state, which with
// the garbage collector's default headroom (GOGC=100: a heap up to about
// twice what is live) stays near 512 MiB, so a process in a 1 GiB container
// survives a store filled to the budget with room for everything else.
const DefaultMaxBytes int64 = 256 << 20

// ErrBudget is returned when a new key, or new limits on a key, do not fit
// the byte budget. It matches store.ErrFull (and so store.ErrBusy: a full
// store is load, never an outage a fail-open policy admits).
var ErrBudget = fmt.Errorf("memstore: byte budget reached: %w", store.ErrFull)

var errKeyCap = fmt.Errorf("memstore: key cap (MaxKeys) reached: %w", store.ErrFull)

// Store is an in-memory store.Store. Create it with New; Close stops its
// sweeper.
type Store struct {
	shards  []shard
	mask    uint64
	seed    maphash.Seed
	perCap  int   // keys per shard, 0 = unlimited
	budget  int64 // bytes, < 0 = unlimited
	used    atomic.Int64
	clock   store.Clock
	stop    chan struct{}
	stopped sync.WaitGroup
	closed  atomic.Bool
	swept   atomic.Int64 // µs of the last sweep made to free budget
	horizon atomic.Int64 // µs: the latest time a dropped key's states became fresh
	decider core.Decider
	native  bool // decider is core.Native: call the core directly
}

var _ store.Store = (*Store)(nil)

// shard is one part of the index. Readers load tab and walk a bucket's
// chain with atomic loads; writers hold mu.
type shard struct {
	mu  sync.Mutex
	tab atomic.Pointer[table]
	n   int      // entries, under mu
	_   [40]byte // one cache line per shard
}

// table is a shard's hash table: chains of entries linked by entry.next.
// A resize relinks the entries into a new table; a reader still on the old
// one may then miss an entry (never find a wrong one, never loop), which is
// why a miss is checked again under the shard's mutex.
type table struct {
	mask    uint64
	buckets []atomic.Pointer[entry]
}

// bucket returns the chain head of hash h. The shard was chosen by h's low
// bits; the bucket by its high ones.
func (t *table) bucket(h uint64) *atomic.Pointer[entry] { return &t.buckets[(h>>32)&t.mask] }

// initialBuckets is the size of a new shard's table; it doubles when the
// shard holds more entries than buckets.
const initialBuckets = 8

// entry holds one key's states, one per limit name. A key created with
// one limit keeps its name, state and decision scratch in the entry itself
// (one is set and the slices point into it), and a short prefix and key
// too. The fields are laid out for a decision on such a key, which reads
// three cache lines of the entry's five (320 bytes): the lookup and the
// lock, then the expiry and the state, then the text its key and name
// point into (the core writes the decision on the caller's stack).
type entry struct {
	// Line 0: the lookup and the lock.
	h      uint64
	next   atomic.Pointer[entry] // same bucket
	key    string
	prefix string
	mu     sync.Mutex
	dead   bool // removed from its shard, under mu: look the key up again
	one    bool // names, states and out are name1, state1 and out1; under mu

	// Line 1: a single limit's state and when all states are fresh.
	expires int64 // µs: all states are fresh from then on
	state1  [1]core.State

	// Line 2: what the strings point into.
	text  [inlineText]byte // prefix, key and a single limit's name, when they fit
	name1 [1]string

	out1    [1]core.Decision
	charged int64 // bytes taken from the budget
	names   []string
	states  []core.State
	out     []core.Decision // scratch for decisions, used under mu
}

// inlineText is the room in an entry for its prefix, key and name.
const inlineText = 48

// inline reports whether a key fits its entry's inline fields.
func inline(prefix, key string, names []string) bool {
	return len(names) == 1 && len(prefix)+len(key)+len(names[0]) <= inlineText
}

// maxStack bounds the limits of one call on a key whose limits changed.
const maxStack = 16

// New returns a Store. cfg may be nil.
func New(cfg *Config) *Store {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	n := c.Shards
	if n <= 0 {
		n = max(64, 16*runtime.GOMAXPROCS(0))
	}
	size := 1
	for size < n {
		size <<= 1
	}
	s := &Store{
		shards:  make([]shard, size),
		mask:    uint64(size - 1),
		seed:    maphash.MakeSeed(),
		clock:   c.Clock,
		stop:    make(chan struct{}),
		decider: c.Decider,
	}
	if s.decider == nil {
		s.decider = core.Native{}
	}
	_, s.native = s.decider.(core.Native)
	if s.clock == nil {
		s.clock = clock.System
	}
	if c.MaxKeys > 0 {
		s.perCap = (c.MaxKeys + size - 1) / size
	}
	s.budget = c.MaxBytes
	if s.budget == 0 {
		s.budget = DefaultMaxBytes
	}
	for i := range s.shards {
		s.shards[i].tab.Store(newTable(initialBuckets))
	}
	interval := c.SweepInterval
	if interval == 0 {
		interval = 30 * time.Second
	}
	if interval > 0 {
		s.stopped.Add(1)
		go s.sweeper(interval)
	}
	return s
}

func newTable(n int) *table {
	return &table{mask: uint64(n - 1), buckets: make([]atomic.Pointer[entry], n)}
}

// Close stops the sweeper. The store keeps working; Close is idempotent.
func (s *Store) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		close(s.stop)
		s.stopped.Wait()
	}
	return nil
}

func (s *Store) sweeper(every time.Duration) {
	defer s.stopped.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep(s.clock())
		}
	}
}

// Sweep drops every key whose states are all fresh at now (µs) and returns
// how many it dropped. The background sweeper calls it with Config.Clock,
// which must be the callers' clock (the limiter's); tests with a fake clock
// call it directly.
//
// Forgetting never refunds: a caller whose clock is behind the time a
// dropped state became fresh (its clock stepped back) decides a new key as
// of that time, as the core reads a state at its own latest time (see
// Decide). It gets what a caller at that time would, never more.
func (s *Store) Sweep(now int64) int {
	n := 0
	for i := range s.shards {
		n += s.sweepShard(&s.shards[i], now)
	}
	return n
}

func (s *Store) sweepShard(sh *shard, now int64) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n, freed, latest := sh.dropIdle(now)
	s.used.Add(-freed)
	s.raiseHorizon(latest)
	return n
}

// raiseHorizon records that states fresh only from t on were dropped.
func (s *Store) raiseHorizon(t int64) {
	for {
		h := s.horizon.Load()
		if t <= h || s.horizon.CompareAndSwap(h, t) {
			return
		}
	}
}

// dropIdle removes the entries whose states are fresh at now and returns how
// many, the bytes they were charged and the latest time a dropped state
// became fresh; sh.mu is held. A removed entry keeps its next link, so a
// reader standing on it walks on.
func (sh *shard) dropIdle(now int64) (int, int64, int64) {
	n, freed, latest := 0, int64(0), int64(math.MinInt64)
	t := sh.tab.Load()
	for i := range t.buckets {
		var pred *entry
		for e := t.buckets[i].Load(); e != nil; {
			next := e.next.Load()
			e.mu.Lock()
			idle := e.expires <= now
			if idle {
				e.dead = true
			}
			e.mu.Unlock()
			if idle {
				if pred == nil {
					t.buckets[i].Store(next)
				} else {
					pred.next.Store(next)
				}
				n++
				freed += e.charged
				latest = max(latest, e.expires)
			} else {
				pred = e
			}
			e = next
		}
	}
	sh.n -= n
	return n, freed, latest
}

// find returns the entry of (prefix, key) with hash h, or nil. Without
// sh.mu a nil may be wrong (a resize was under way); with it, it is not.
func (sh *shard) find(h uint64, prefix, key string) *entry {
	for e := sh.tab.Load().bucket(h).Load(); e != nil; e = e.next.Load() {
		if e.h == h && e.key == key && e.prefix == prefix {
			return e
		}
	}
	return nil
}

// link adds e (not in the shard) and grows the table when it holds more
// entries than buckets; sh.mu is held.
func (sh *shard) link(e *entry) {
	t := sh.tab.Load()
	b := t.bucket(e.h)
	e.next.Store(b.Load())
	b.Store(e)
	sh.n++
	if sh.n <= len(t.buckets) {
		return
	}
	nt := newTable(2 * len(t.buckets))
	for i := range t.buckets {
		for e := t.buckets[i].Load(); e != nil; {
			next := e.next.Load()
			nb := nt.bucket(e.h)
			e.next.Store(nb.Load())
			nb.Store(e)
			e = next
		}
	}
	sh.tab.Store(nt)
}

// unlink removes e and returns the bytes it was charged; sh.mu and e.mu are
// held.
func (sh *shard) unlink(e *entry) int64 {
	b := sh.tab.Load().bucket(e.h)
	if b.Load() == e {
		b.Store(e.next.Load())
	} else {
		for p := b.Load(); p != nil; p = p.next.Load() {
			if p.next.Load() == e {
				p.next.Store(e.next.Load())
				break
			}
		}
	}
	e.dead = true
	sh.n--
	return e.charged
}

// Bytes returns the bytes of the byte budget in use: the sum of what the
// keys held were charged.
func (s *Store) Bytes() int64 { return s.used.Load() }

// Len returns the number of keys held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Decide implements store.Store.
func (s *Store) Decide(_ context.Context, req store.Request, each []core.Decision) (int, core.Decision, error) {
	if len(req.Names) != len(req.Limits) || len(req.Limits) == 0 {
		return 0, core.Decision{}, core.ErrLimits
	}
	h := maphash.String(s.seed, req.Key)
	sh := &s.shards[h&s.mask]
	for {
		e := sh.find(h, req.Prefix, req.Key)
		if e == nil {
			// A key without an entry may have been swept: its states were
			// fresh from some time on, at most the horizon. A caller whose
			// clock is behind that (it stepped back, or lags the sweeper's)
			// decides a new entry at the horizon, as the swept state would
			// have been read at its own latest time: a sweep never refunds.
			if hz := s.horizon.Load(); req.Now < hz {
				req.Now = hz
			}
			var err error
			if e, err = s.insert(sh, h, &req); err != nil {
				return 0, core.Decision{}, err
			}
			if e == nil { // a peek of a key that has no state
				return s.decideFresh(&req, each)
			}
		}
		e.mu.Lock()
		if e.dead { // dropped between lookup and lock
			e.mu.Unlock()
			continue
		}
		var (
			i   int
			err error
			out [1]core.Decision
		)
		one := e.one && len(req.Limits) == 1 && req.Limits[0].Algorithm != core.SlidingLog && e.name1[0] == req.Names[0]
		if one {
			err = s.decideOne(e, &req, out[:])
		} else {
			i, err = s.decideEntry(e, &req)
		}
		var d core.Decision
		if err == nil {
			o := &out[0]
			if !one {
				o = &e.out[i]
			}
			// Field by field, as in rl.fromCore: a struct copy of what
			// the core just wrote stalls on store-to-load forwarding.
			d.Allowed, d.Limit, d.Remaining = o.Allowed, o.Limit, o.Remaining
			d.ResetAfter, d.RetryAfter, d.Delay = o.ResetAfter, o.RetryAfter, o.Delay
			if !one && len(each) >= len(req.Limits) {
				copy(each, e.out[:len(req.Limits)])
			}
		}
		e.mu.Unlock()
		if one && err == nil && len(each) >= 1 {
			each[0] = d
		}
		return i, d, err
	}
}

// decideFresh peeks a key that has no entry.
func (s *Store) decideFresh(req *store.Request, each []core.Decision) (int, core.Decision, error) {
	n := len(req.Limits)
	ss := make([]core.State, n)
	out := make([]core.Decision, n)
	i, err := s.decider.PeekAll(req.Limits, ss, req.Now, req.Cost, out)
	if err != nil {
		return i, core.Decision{}, err
	}
	if len(each) >= n {
		copy(each, out)
	}
	return i, out[i], nil
}

// insert returns the entry of req's key, looked up again under the shard's
// mutex, creating it with req's limits if the key cap and the byte budget
// allow. For a peek of a key that has none it returns nil.
func (s *Store) insert(sh *shard, h uint64, req *store.Request) (*entry, error) {
	size := int64(-1)
	for retried := false; ; retried = true {
		sh.mu.Lock()
		if e := sh.find(h, req.Prefix, req.Key); e != nil || req.Op == store.Peek {
			sh.mu.Unlock()
			return e, nil
		}
		if s.perCap > 0 && sh.n >= s.perCap {
			_, freed, latest := sh.dropIdle(s.clock()) // make room from idle keys first
			s.used.Add(-freed)
			s.raiseHorizon(latest)
			if sh.n >= s.perCap {
				sh.mu.Unlock()
				return nil, errKeyCap
			}
		}
		if size < 0 {
			size = charge(req.Prefix, req.Key, req.Names, req.Limits)
		}
		if !s.reserve(size) {
			sh.mu.Unlock()
			if !retried && s.reclaim() {
				continue
			}
			return nil, ErrBudget
		}
		e := newEntry(req, size)
		e.h = h
		sh.link(e)
		sh.mu.Unlock()
		return e, nil
	}
}

// reserve takes n bytes from the budget, or nothing and reports false.
func (s *Store) reserve(n int64) bool {
	if s.budget < 0 {
		s.used.Add(n)
		return true
	}
	if s.used.Add(n) > s.budget {
		s.used.Add(-n)
		return false
	}
	return true
}

// reclaimEvery is the least time between two sweeps made because the
// budget was full: a flood of refused keys costs one atomic load each, not
// a sweep each.
const reclaimEvery = int64(time.Second / time.Microsecond)

// reclaim sweeps the idle keys when the budget is full, at most once per
// reclaimEvery, and reports whether it did.
func (s *Store) reclaim() bool {
	now := s.clock()
	last := s.swept.Load()
	if now-last < reclaimEvery || !s.swept.CompareAndSwap(last, now) {
		return false
	}
	return s.Sweep(now) > 0
}

// Sizes of what a key holds, as charged to the budget. The allocator rounds
// every object up to a size class: round16 approximates that.
var (
	entrySize    = round16(int64(unsafe.Sizeof(entry{})))
	stateSize    = int64(unsafe.Sizeof(core.State{}))
	decisionSize = int64(unsafe.Sizeof(core.Decision{}))
)

// indexSlot is the share of the shard's map[uint64]*entry per key: 8 bytes
// of key, 8 of value and a control byte per slot, at a load between 7/16
// and 7/8 after growth, so up to about 40 bytes; 48 with rounding.
const indexSlot = 48

func round16(n int64) int64 { return (n + 15) &^ 15 }

// charge returns the bytes a key created with these limits is charged: all
// it can hold under them (see the package doc).
func charge(prefix, key string, names []string, limits []core.Limit) int64 {
	n := entrySize + indexSlot
	if inline(prefix, key, names) {
		if limits[0].Algorithm == core.SlidingLog {
			n += limitBytes("", &limits[0])
		}
		return n
	}
	n += round16(int64(len(prefix))) + round16(int64(len(key)))
	k := int64(len(names))
	n += round16(16*k) + round16(stateSize*k) + round16(decisionSize*k)
	for i := range names {
		n += limitBytes(names[i], &limits[i])
	}
	return n
}

// limitBytes is what one limit adds besides its slots in the entry's
// slices: its name and, for a sliding log, the log.
func limitBytes(name string, l *core.Limit) int64 {
	n := round16(int64(len(name)))
	if l.Algorithm == core.SlidingLog && l.Limit > 0 && l.Limit <= core.MaxLogLimit {
		n += round16(8 * l.Limit)
	}
	return n
}

// newEntry returns an entry for req's key with fresh states for req's
// limits, sliding logs allocated at their full capacity. It copies the
// strings it keeps, so that a key does not pin the request's buffers.
func newEntry(req *store.Request, size int64) *entry {
	n := len(req.Names)
	e := &entry{charged: size}
	if inline(req.Prefix, req.Key, req.Names) {
		// Strings into e.text: e never moves, and they keep it alive.
		t := e.text[:0]
		t = append(t, req.Prefix...)
		t = append(t, req.Key...)
		t = append(t, req.Names[0]...)
		lp, lk := len(req.Prefix), len(req.Key)
		e.prefix = unsafe.String(unsafe.SliceData(t), lp)
		e.key = unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(t)), lp)), lk)
		e.name1[0] = unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(t)), lp+lk)), len(req.Names[0]))
		e.names, e.states, e.out, e.one = e.name1[:], e.state1[:], e.out1[:], true
	} else {
		e.prefix, e.key = strings.Clone(req.Prefix), strings.Clone(req.Key)
		e.names, e.states, e.out = make([]string, n), make([]core.State, n), make([]core.Decision, n)
		for i, name := range req.Names {
			e.names[i] = strings.Clone(name)
		}
	}
	for i := range req.Limits {
		if l := &req.Limits[i]; l.Algorithm == core.SlidingLog && l.Limit > 0 && l.Limit <= core.MaxLogLimit {
			e.states[i].Log = make([]int64, 0, l.Limit)
		}
	}
	return e
}

// growth returns the bytes req's limits need beyond what e was charged:
// limits it does not have yet, sliding logs longer than its own. e.mu is
// held.
func (e *entry) growth(req *store.Request, same bool) int64 {
	var n int64
	for i := range req.Limits {
		l := &req.Limits[i]
		j := i
		if !same {
			if j = e.index(req.Names[i]); j < 0 {
				// Its slots in names, states and out, twice over for the
				// slices' growth by append, and its name and log.
				n += 2*(16+stateSize+decisionSize) + limitBytes(req.Names[i], l)
				continue
			}
		}
		if l.Algorithm == core.SlidingLog && l.Limit <= core.MaxLogLimit {
			if c := int64(cap(e.states[j].Log)); c < l.Limit {
				n += round16(8*l.Limit) - round16(8*c)
			}
		}
	}
	return n
}

// decideOne runs req against the single state of e (e.one), the limit the
// key was created with, which is not a sliding log (no log to size), into
// out[0]; e.mu is held. The native core decides into out, on the caller's
// stack; another decider (an interface, which out would escape through)
// into e.out1.
func (s *Store) decideOne(e *entry, req *store.Request, out []core.Decision) error {
	var err error
	switch {
	case s.native && req.Op == store.Take:
		_, err = core.TakeAll(req.Limits, e.state1[:], req.Now, req.Cost, out) // the decider's call, direct
	case req.Op == store.Peek:
		_, err = s.decider.PeekAll(req.Limits, e.state1[:], req.Now, req.Cost, e.out1[:])
		out[0] = e.out1[0]
		return err
	default:
		_, err = s.decider.TakeAll(req.Limits, e.state1[:], req.Now, req.Cost, e.out1[:])
		out[0] = e.out1[0]
	}
	if err == nil && out[0].Allowed {
		if exp := req.Now + out[0].ResetAfter; exp > e.expires {
			e.expires = exp
		}
	}
	return err
}

// decideEntry runs req against e's states into e.out; e.mu is held.
func (s *Store) decideEntry(e *entry, req *store.Request) (int, error) {
	n := len(req.Limits)
	var (
		ss      []core.State
		gather  bool
		indexes [maxStack]int
	)
	same := e.sameNames(req.Names)
	if !same && n > maxStack {
		return 0, core.ErrLimits
	}
	if extra := e.growth(req, same); extra > 0 {
		if !s.reserve(extra) {
			return 0, ErrBudget
		}
		e.charged += extra
	}
	if same {
		ss = e.states
	} else {
		// Another set of limits than last time on this key: map each
		// name to its state, adding the new ones.
		gather = true
		e.one = false // names and states grow out of the entry
		ss = make([]core.State, n)
		for i, name := range req.Names {
			j := e.index(name)
			if j < 0 {
				j = len(e.names)
				e.names = append(e.names, strings.Clone(name))
				e.states = append(e.states, core.State{})
			}
			indexes[i] = j
			ss[i] = e.states[j]
		}
	}
	if len(e.out) < n {
		e.out = make([]core.Decision, max(n, len(e.names)))
		e.one = false
	}
	out := e.out[:n]
	for i := range req.Limits {
		// Logs at the capacity charged for them (see growth).
		if l := &req.Limits[i]; l.Algorithm == core.SlidingLog && l.Limit <= core.MaxLogLimit && int64(cap(ss[i].Log)) < l.Limit {
			grown := make([]int64, len(ss[i].Log), l.Limit)
			copy(grown, ss[i].Log)
			ss[i].Log = grown
		}
	}
	var (
		idx int
		err error
	)
	if req.Op == store.Peek {
		return s.decider.PeekAll(req.Limits, ss, req.Now, req.Cost, out)
	}
	idx, err = s.decider.TakeAll(req.Limits, ss, req.Now, req.Cost, out)
	if err != nil || !out[idx].Allowed {
		if gather { // keep grown logs
			for i := range n {
				e.states[indexes[i]].Log = ss[i].Log
			}
		}
		return idx, err
	}
	for i := range n {
		if exp := req.Now + out[i].ResetAfter; exp > e.expires {
			e.expires = exp
		}
		if gather {
			e.states[indexes[i]] = ss[i]
		}
	}
	return idx, nil
}

func (e *entry) sameNames(names []string) bool {
	if len(e.names) != len(names) {
		if len(e.names) == 0 {
			e.names = append(e.names, names...)
			e.states = make([]core.State, len(names))
			return true
		}
		return false
	}
	for i := range names {
		if e.names[i] != names[i] {
			return false
		}
	}
	return true
}

func (e *entry) index(name string) int {
	for i, n := range e.names {
		if n == name {
			return i
		}
	}
	return -1
}

// Reset implements store.Store.
// Reset implements store.Store.
func (s *Store) Reset(_ context.Context, prefix, key string, names []string) error {
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(h, prefix, key)
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if names == nil {
		s.used.Add(-sh.unlink(e))
		return nil
	}
	for _, name := range names {
		if j := e.index(name); j >= 0 {
			e.states[j] = core.State{Log: e.states[j].Log[:0]}
		}
	}
	return nil
}
