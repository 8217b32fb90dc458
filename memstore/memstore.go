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
// A key created with one limit that is not a sliding log (the common case)
// keeps its state, its name and a key of up to 32 bytes (with the prefix) in
// an entry of two cache lines: one that lookups read and only a new key or
// a resize writes, one that the decision reads and writes under the lock.
// A request carries its compiled store.Policy; the entry records the ID of
// the policy it was last decided under, so a call under the same policy
// compares no limit names, and the native core decides with the policy's
// compiled limits (core.TakeInto) on the state copied to the stack. (A
// policy with shadow limits is never compact: store.Policy.Decide decides
// its enforced and shadow limits together, under the key's lock.) The key
// is hashed once per call with keys drawn per store and compared once, by
// length and bytes (a key of 4 to 16 bytes as the two words the hash read).
// On many keys, where entries are not in the CPU's caches, those two lines
// are most of a decision's cost. Nothing else is written by a decision on a
// key that exists: no counter, no statistic, no clock, no pool. The Store's
// fields and each shard keep what lookups read on cache lines apart from
// what creating and dropping keys writes (the budget in use, the sweeps'
// times, a shard's mutex and count), so that new keys on one core do not
// make the other cores' lookups miss. On many keys decided from several
// cores, a key's line 1 moves to the core deciding it from the core that
// decided it last: what that costs depends on where the cores sit (a
// shared cache or not), not on the store (BenchmarkDecideParallel's
// walk=shared beside walk=disjoint).
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
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/util/clock"
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
//
// Its first cache line holds what every lookup reads (the shards, the
// mask, the hash keys) and nothing else; the fields written while it runs
// (the budget in use, the sweeps' times, Close's) share no line with it,
// so that creating and dropping keys on one core does not take the line
// the other cores' lookups read (TestStoreLayout).
type Store struct {
	// Line 0: read by every lookup, written only by New.
	shards []shard
	mask   uint64
	seed   maphash.Seed // keys longer than 16 bytes
	k0, k1 uint64       // shorter ones (see hash)
	perCap int          // keys per shard, 0 = unlimited

	// Line 1: read by the slower paths, written only by New.
	budget  int64 // bytes, < 0 = unlimited
	clock   store.Clock
	decider core.Decider
	stop    chan struct{}
	native  bool // decider is core.Native: call the core directly
	_       [23]byte

	// Line 2: written as keys are created and dropped, by sweeps and by
	// Close; never by a decision on a key that exists.
	used    atomic.Int64
	swept   atomic.Int64 // µs of the last sweep made to free budget
	horizon atomic.Int64 // µs: the latest time a dropped key's states became fresh
	closed  atomic.Bool
	stopped sync.WaitGroup
	_       [16]byte
}

var _ store.Store = (*Store)(nil)

// shard is one part of the index. Readers load tab and walk a bucket's
// chain with atomic loads; writers hold mu. tab has a cache line of its
// own, apart from the mutex and the count that creating and dropping keys
// write, so that lookups in a shard do not miss each time a key is
// created in it (TestStoreLayout).
type shard struct {
	tab atomic.Pointer[table]
	_   [56]byte
	mu  sync.Mutex
	n   int // entries, under mu
	_   [48]byte
}

// table is a shard's hash table: chains of entries linked by entry.next.
// A resize relinks the entries into a new table; a reader still on the old
// one may then miss an entry (never find a wrong one, never loop), which is
// why a miss is checked again under the shard's mutex.
//
// A table is a cache line of its own (padded to 64 bytes, a size class the
// allocator keeps line-aligned): every lookup in the shard reads it, so it
// shares no line with another object of the program, which could be written
// all the time (TestStoreLayout).
type table struct {
	mask    uint64
	buckets []atomic.Pointer[entry]
	_       [32]byte
}

// bucket returns the chain head of hash h. The shard was chosen by h's low
// bits; the bucket by its high ones.
func (t *table) bucket(h uint64) *atomic.Pointer[entry] { return &t.buckets[(h>>32)&t.mask] }

// initialBuckets is the size of a new shard's table; it doubles when the
// shard holds more entries than buckets.
const initialBuckets = 8

// entry holds one key's states, one per limit name, in one of two forms.
//
// A compact entry (one) holds a single limit that is not a sliding log, in
// a store whose decider is the native core: its state is the words alg, t,
// x and y and its name sits in the text beside the key, so the entry is two
// cache lines (128 bytes, a size class the allocator keeps line-aligned)
// and a decision reads nothing else. Line 0 is what a lookup reads (the
// chain, the hash, the key's text), written only when the entry or a
// neighbour in its chain is linked or unlinked, or the entry's form
// changes, so that lookups on one core do not wait for a line another core
// is deciding in; line 1 is what a decision reads and writes under the
// lock.
//
// Any other entry keeps its names, states and decision scratch in ext, and
// so does a compact one whose key or name does not fit the text.
//
// pid is the ID of the store.Policy the entry was last decided with under
// the entry's own names in their order (0: none): a request carrying that
// policy needs no comparison of names, and its sliding logs already have
// the capacity it needs.
type entry struct {
	// Line 0: the lookup.
	next atomic.Pointer[entry] // same bucket
	h    uint64
	klen uint32           // len(prefix) + len(key)
	plen uint32           // len(prefix)
	ext  *ext             // nil for a compact entry whose text fits
	text [inlineText]byte // prefix, key and a compact entry's name, when they fit

	// Line 1: the decision.
	mu      sync.Mutex
	pol     *store.Policy
	expires int64 // µs: all states are fresh from then on
	alg     core.Algorithm
	dead    bool   // removed from its shard, under mu: look the key up again
	one     bool   // compact: the state is alg, t, x, y; under mu
	nlen    uint16 // a compact entry's name length
	t, x, y int64
	charged int64 // bytes taken from the budget
}

// ext is what does not fit an entry's two lines.
type ext struct {
	key    string // prefix and key, when longer than inlineText
	name   string // a compact entry's name, when it does not fit the text
	names  []string
	states []core.State
	out    []core.Decision // scratch for decisions, used under mu
}

// inlineText is the room in an entry for its prefix, key and name.
const inlineText = 32

// maxStack bounds the limits of one call on a key whose limits changed.
const maxStack = 16

// keyText returns the first byte of e's prefix and key, joined.
func (e *entry) keyText() *byte {
	if e.klen <= inlineText {
		return &e.text[0]
	}
	return unsafe.StringData(e.ext.key)
}

// key returns e's key without its prefix.
func (e *entry) key() string {
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(e.keyText()), e.plen)), int(e.klen-e.plen))
}

// name returns a compact entry's name; e.mu is held.
func (e *entry) name() string {
	if n := int(e.klen) + int(e.nlen); n <= inlineText {
		return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(&e.text[0]), e.klen)), int(e.nlen))
	}
	return e.ext.name
}

// is reports whether e, whose hash is the key's, is the entry of (prefix,
// key).
func (e *entry) is(prefix, key string) bool {
	if int(e.klen) != len(prefix)+len(key) || int(e.plen) != len(prefix) {
		return false
	}
	t := unsafe.Pointer(e.keyText())
	return same(unsafe.Add(t, len(prefix)), key) && (len(prefix) == 0 || same(t, prefix))
}

// same reports whether the len(s) bytes from p are s: for 4 to 16 bytes
// (user IDs, IPv4 addresses) two loads of each side, overlapping, rather
// than a call of runtime.memequal.
func same(p unsafe.Pointer, s string) bool {
	n := len(s)
	q := unsafe.Pointer(unsafe.StringData(s))
	switch {
	case uint(n-8) <= 8:
		return load64(p) == load64(q) && load64(unsafe.Add(p, n-8)) == load64(unsafe.Add(q, n-8))
	case uint(n-4) <= 3:
		return load32(p) == load32(q) && load32(unsafe.Add(p, n-4)) == load32(unsafe.Add(q, n-4))
	}
	return unsafe.String((*byte)(p), n) == s
}

// load64 reads the 8 bytes at p, little-endian: one load where the CPU
// allows unaligned ones (amd64, arm64), bytes elsewhere.
func load64(p unsafe.Pointer) uint64 { return binary.LittleEndian.Uint64((*[8]byte)(p)[:]) }

// load32 reads the 4 bytes at p, little-endian.
func load32(p unsafe.Pointer) uint64 { return uint64(binary.LittleEndian.Uint32((*[4]byte)(p)[:])) }

// Hashing. A key of 4 to 16 bytes (user IDs, IPv4 addresses: most keys)
// is read as two words, overlapping, which the lookup hashes and then
// compares with the entries' text; others are hashed by hashOther and
// compared by same.
//
// The words are hashed as the Go runtime hashes them where the CPU has no
// AES instructions: wyhash's mixing of two 64-bit words with secret keys,
// drawn per store, so that no one can choose keys that collide.

// words returns the two words of a key of 4 to 16 bytes at p, n long.
func words(p unsafe.Pointer, n int) (uint64, uint64) {
	if n >= 8 {
		return load64(p), load64(unsafe.Add(p, n-8))
	}
	return load32(p), load32(unsafe.Add(p, n-4))
}

// hashWords hashes a key of n bytes (4 to 16) whose words are a and b.
func (s *Store) hashWords(n int, a, b uint64) uint64 {
	return mix(uint64(n)^0xe7037ed1a0b428db, mix(a^s.k0, b^s.k1))
}

// short reports whether a key of n bytes is hashed as two words.
func short(n int) bool { return uint(n-4) <= 12 }

// hash returns key's hash under the store's seed.
func (s *Store) hash(key string) uint64 {
	if n := len(key); short(n) {
		a, b := words(unsafe.Pointer(unsafe.StringData(key)), n)
		return s.hashWords(n, a, b)
	}
	return s.hashOther(key)
}

// hashOther hashes a key of under 4 or over 16 bytes.
func (s *Store) hashOther(key string) uint64 {
	n := len(key)
	if n > 16 {
		return maphash.String(s.seed, key)
	}
	var a uint64 // bytes 0, n/2 and n-1 cover n ≤ 3
	if p := unsafe.Pointer(unsafe.StringData(key)); n > 0 {
		a = uint64(*(*byte)(p))<<16 | uint64(*(*byte)(unsafe.Add(p, n>>1)))<<8 | uint64(*(*byte)(unsafe.Add(p, n-1)))
	}
	return s.hashWords(n, a, 0)
}

// lookup returns the hash of (prefix, key), its shard and its entry, or
// nil: find for the decision's path, a short key's words read once for the
// hash and the comparisons, with no call unless there is a prefix.
func (s *Store) lookup(prefix, key string) (uint64, *shard, *entry) {
	n := len(key)
	if !short(n) {
		h := s.hashOther(key)
		sh := &s.shards[h&s.mask]
		return h, sh, sh.find(h, prefix, key)
	}
	a, b := words(unsafe.Pointer(unsafe.StringData(key)), n)
	h := s.hashWords(n, a, b)
	sh := &s.shards[h&s.mask]
	klen, plen := uint32(len(prefix)+n), uint32(len(prefix))
	for e := sh.tab.Load().bucket(h).Load(); e != nil; e = e.next.Load() {
		if e.h != h || e.klen != klen || e.plen != plen {
			continue
		}
		t := unsafe.Pointer(e.keyText())
		if x, y := words(unsafe.Add(t, plen), n); x == a && y == b && (plen == 0 || same(t, prefix)) {
			return h, sh, e
		}
	}
	return h, sh, nil
}

// mix is wyhash's mixing step: the two halves of a 128-bit product, xored.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

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
		k0:      rand.Uint64(),
		k1:      rand.Uint64(),
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
		if e.h == h && e.is(prefix, key) {
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

// Decide implements store.Store: DecideInto, with the request and the
// decision by value.
func (s *Store) Decide(_ context.Context, req store.Request, each []core.Decision) (int, core.Decision, error) {
	var d core.Decision
	i, err := s.DecideInto(&req, each, &d)
	return i, d, err
}

// DecideInto is Decide for a caller that holds the *Store (rl.Limiter over
// a memstore): the request by pointer, the decision written to *d (left
// zero on an error), nothing copied. Through the store.Store interface a
// Request (64 bytes) does not fit the registers: the caller builds it with
// 8-byte stores and copies it to the call's stack in 16-byte moves, which
// wait on those stores (store-to-load forwarding fails), and the returned
// Decision goes through memory the same way; on one warm key those two
// copies were about a sixth of the CPU profile of an rl.Limiter.Allow.
// DecideInto does not modify *req; it needs no context (the store never
// blocks).
//
// The common call, a known compact key under the policy that made it, is
// decided here: the lookup, the lock, the native core on the state copied
// to the stack and back. Anything else goes through decide.
func (s *Store) DecideInto(req *store.Request, each []core.Decision, d *core.Decision) (int, error) {
	p := req.Policy
	if p == nil {
		return 0, core.ErrLimits
	}
	h, sh, e := s.lookup(req.Prefix, req.Key)
	if e != nil {
		e.mu.Lock()
		if e.one && e.pol == p && !e.dead {
			var err error
			st := core.State{Algorithm: e.alg, T: e.t, X: e.x, Y: e.y}
			c := &p.Compiled()[0]
			if st.Algorithm != 0 { // written by c: its parameters
				st.L, st.W, st.R = c.Params()
			}
			switch req.Op {
			case store.Take:
				if err = c.TakeInto(&st, req.Now, req.Cost, d); err == nil && d.Allowed {
					e.alg, e.t, e.x, e.y = st.Algorithm, st.T, st.X, st.Y
					if exp := req.Now + d.ResetAfter; exp > e.expires {
						e.expires = exp
					}
				}
			case store.Peek:
				err = c.PeekInto(&st, req.Now, req.Cost, d)
			default:
				if err = c.SettleInto(&st, req.Now, req.Cost, d); err == nil {
					e.alg, e.t, e.x, e.y = st.Algorithm, st.T, st.X, st.Y
					if exp := req.Now + d.ResetAfter; exp > e.expires {
						e.expires = exp
					}
				}
			}
			e.mu.Unlock()
			if err != nil {
				*d = core.Decision{}
				return 0, err
			}
			if len(each) != 0 {
				each[0] = *d
			}
			return 0, nil
		}
		e.mu.Unlock()
	}
	r := *req // decide may move Now to the horizon
	i, dd, err := s.decide(sh, h, &r, each)
	*d = dd
	return i, err
}

// decide is Decide's path for a new key, a key decided under another
// policy than last time, and a key whose states are not compact.
func (s *Store) decide(sh *shard, h uint64, req *store.Request, each []core.Decision) (int, core.Decision, error) {
	p := req.Policy
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
			if e, err = s.insert(sh, h, req); err != nil {
				return 0, core.Decision{}, err
			}
			if e == nil { // a peek of a key that has no state
				return s.decideFresh(req, each)
			}
		}
		e.mu.Lock()
		if e.dead { // dropped between lookup and lock
			e.mu.Unlock()
			continue
		}
		if e.one && (e.pol == p || e.adopt(p)) {
			d, err := e.decideOne(req)
			e.mu.Unlock()
			if err == nil && len(each) != 0 {
				each[0] = d
			}
			return 0, d, err
		}
		i, err := s.decideEntry(e, req)
		var d core.Decision
		if err == nil {
			// Field by field, as in rl.fromCore: a struct copy of what
			// the core just wrote stalls on store-to-load forwarding.
			o := &e.ext.out[i]
			d.Allowed, d.Limit, d.Remaining = o.Allowed, o.Limit, o.Remaining
			d.ResetAfter, d.RetryAfter, d.Delay, d.NextAfter = o.ResetAfter, o.RetryAfter, o.Delay, o.NextAfter
			if p.Shadowed() {
				d = p.Deciding(e.ext.out, i)
			}
			if n := p.Len(); len(each) >= n {
				copy(each, e.ext.out[:n])
			}
		}
		e.mu.Unlock()
		return i, d, err
	}
}

// decideFresh peeks a key that has no entry.
func (s *Store) decideFresh(req *store.Request, each []core.Decision) (int, core.Decision, error) {
	p := req.Policy
	n := p.Len()
	var (
		i   int
		err error
		out []core.Decision
	)
	switch {
	case p.Shadowed():
		out = make([]core.Decision, n)
		i, err = p.Decide(s.shadowDecider(), store.Peek, make([]core.State, n), req.Now, req.Cost, out)
	case s.native:
		var ss [core.MaxLimits]core.State
		var ds [core.MaxLimits]core.Decision
		out = ds[:n]
		i, err = core.PeekAllCompiled(p.Compiled(), ss[:n], req.Now, req.Cost, out)
	default: // through an interface: the slices escape
		out = make([]core.Decision, n)
		i, err = s.decider.PeekAll(p.Limits(), make([]core.State, n), req.Now, req.Cost, out)
	}
	if err != nil {
		return i, core.Decision{}, err
	}
	if len(each) >= n {
		copy(each, out)
	}
	return i, p.Deciding(out, i), nil
}

// shadowDecider is the decider store.Policy.Decide takes: nil for the
// native core (it then decides with the compiled limits).
func (s *Store) shadowDecider() core.Decider {
	if s.native {
		return nil
	}
	return s.decider
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
			size = charge(req.Prefix, req.Key, req.Policy, s.native)
		}
		if !s.reserve(size) {
			sh.mu.Unlock()
			if !retried && s.reclaim() {
				continue
			}
			return nil, ErrBudget
		}
		e := newEntry(req, size, s.native)
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
	extSize      = round16(int64(unsafe.Sizeof(ext{})))
	stateSize    = int64(unsafe.Sizeof(core.State{}))
	decisionSize = int64(unsafe.Sizeof(core.Decision{}))
)

// indexSlot is the share of the shard's map[uint64]*entry per key: 8 bytes
// of key, 8 of value and a control byte per slot, at a load between 7/16
// and 7/8 after growth, so up to about 40 bytes; 48 with rounding.
const indexSlot = 48

func round16(n int64) int64 { return (n + 15) &^ 15 }

// compact reports whether a key created by p is a compact entry in a store
// whose decider is native or not.
func compact(p *store.Policy, native bool) bool {
	return native && p.Len() == 1 && !p.Shadowed() && p.Limits()[0].Algorithm != core.SlidingLog && len(p.Names()[0]) <= math.MaxUint16
}

// charge returns the bytes a key created by p is charged: all it can hold
// under p's limits (see the package doc).
func charge(prefix, key string, p *store.Policy, native bool) int64 {
	n := entrySize + indexSlot
	k := int64(len(prefix) + len(key))
	if k > inlineText {
		n += extSize + round16(k)
	}
	if compact(p, native) {
		if l := int64(len(p.Names()[0])); k+l > inlineText {
			n += round16(l)
			if k <= inlineText {
				n += extSize
			}
		}
		return n
	}
	if k <= inlineText {
		n += extSize
	}
	return n + sliceBytes(int64(p.Len())) + policyBytes(p)
}

// sliceBytes is what an ext's names, states and out hold for k limits.
func sliceBytes(k int64) int64 {
	return round16(16*k) + round16(stateSize*k) + round16(decisionSize*k)
}

// policyBytes is what p's limits add to an entry besides their slots in the
// ext's slices: their names and sliding logs.
func policyBytes(p *store.Policy) int64 {
	var n int64
	ls := p.Limits()
	for i, name := range p.Names() {
		n += limitBytes(name, &ls[i])
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
// limits, sliding logs allocated at their full capacity; native says
// whether the store's decider is the native core. It copies the strings it
// keeps, so that a key does not pin the request's buffers.
func newEntry(req *store.Request, size int64, native bool) *entry {
	p := req.Policy
	e := &entry{charged: size, pol: p}
	lp, lk := len(req.Prefix), len(req.Key)
	e.klen, e.plen = uint32(lp+lk), uint32(lp)
	if lp+lk <= inlineText {
		copy(e.text[copy(e.text[:], req.Prefix):], req.Key)
	} else {
		e.ext = &ext{key: req.Prefix + req.Key}
	}
	if compact(p, native) {
		e.one = true
		name := p.Names()[0]
		e.nlen = uint16(len(name))
		if lp+lk+len(name) <= inlineText {
			copy(e.text[lp+lk:], name)
		} else {
			if e.ext == nil {
				e.ext = &ext{}
			}
			e.ext.name = strings.Clone(name)
		}
		return e
	}
	if e.ext == nil {
		e.ext = &ext{}
	}
	x, n := e.ext, p.Len()
	x.names, x.states, x.out = make([]string, n), make([]core.State, n), make([]core.Decision, n)
	for i, name := range p.Names() {
		x.names[i] = strings.Clone(name)
	}
	for i, l := range p.Limits() {
		if l.Algorithm == core.SlidingLog {
			x.states[i].Log = make([]int64, 0, l.Limit)
		}
	}
	return e
}

// sameParams reports whether a state written by a reads under b exactly
// as written: same algorithm and parameters.
func sameParams(a, b *core.Compiled) bool {
	la, lb := a.Limit(), b.Limit()
	if la.Algorithm != lb.Algorithm {
		return false
	}
	l1, w1, r1 := a.Params()
	l2, w2, r2 := b.Params()
	return l1 == l2 && w1 == w2 && r1 == r2
}

// adopt reports whether compact e can be decided compact under p (a
// policy other than e's, of one limit with e's name, not a sliding log nor
// a shadow limit),
// and makes p e's policy if so; e.mu is held.
func (e *entry) adopt(p *store.Policy) bool {
	if p.Len() != 1 || p.Shadowed() || p.Limits()[0].Algorithm == core.SlidingLog || e.name() != p.Names()[0] {
		return false
	}
	if e.alg != 0 && !sameParams(&e.pol.Compiled()[0], &p.Compiled()[0]) {
		// Its state records the old limit's parameters, which the
		// compact form keeps only as e.pol: spill it, so that the core
		// carries it over to the new limit.
		return false
	}
	e.pol = p
	return true
}

// decideOne decides req on compact e with the native core, the state
// copied to the stack and back, as Decide does; e.mu is held and req's
// policy is e's.
func (e *entry) decideOne(req *store.Request) (core.Decision, error) {
	var d core.Decision
	st := core.State{Algorithm: e.alg, T: e.t, X: e.x, Y: e.y}
	c := &req.Policy.Compiled()[0]
	if st.Algorithm != 0 {
		st.L, st.W, st.R = c.Params()
	}
	switch req.Op {
	case store.Peek:
		if err := c.PeekInto(&st, req.Now, req.Cost, &d); err != nil {
			return core.Decision{}, err
		}
		return d, nil
	case store.Settle:
		if err := c.SettleInto(&st, req.Now, req.Cost, &d); err != nil {
			return core.Decision{}, err
		}
	default:
		if err := c.TakeInto(&st, req.Now, req.Cost, &d); err != nil {
			return core.Decision{}, err
		}
	}
	if d.Allowed {
		e.alg, e.t, e.x, e.y = st.Algorithm, st.T, st.X, st.Y
		if exp := req.Now + d.ResetAfter; exp > e.expires {
			e.expires = exp
		}
	}
	return d, nil
}

// spillBytes is what moving compact e's state into its ext costs.
func (e *entry) spillBytes() int64 {
	n := sliceBytes(1)
	if e.ext == nil {
		n += extSize
	}
	return n
}

// spill moves compact e's state and name into its ext, for a request
// under other limits; e.mu is held.
func (e *entry) spill() {
	if e.ext == nil {
		e.ext = &ext{}
	}
	x := e.ext
	x.names = []string{e.name()}
	st := core.State{Algorithm: e.alg, T: e.t, X: e.x, Y: e.y}
	if st.Algorithm != 0 { // written under e.pol's limit: its parameters
		st.L, st.W, st.R = e.pol.Compiled()[0].Params()
	}
	x.states = []core.State{st}
	x.out = make([]core.Decision, 1)
	e.one, e.alg, e.t, e.x, e.y = false, 0, 0, 0, 0
}

// growth returns the bytes req's limits need beyond what e was charged:
// limits it does not have yet, sliding logs longer than its own. e.mu is
// held and e is not compact.
func (e *entry) growth(req *store.Request, same bool) int64 {
	var n int64
	names, ls := req.Policy.Names(), req.Policy.Limits()
	for i := range ls {
		l := &ls[i]
		j := i
		if !same {
			if j = e.index(names[i]); j < 0 {
				// Its slots in names, states and out, twice over for the
				// slices' growth by append, and its name and log.
				n += 2*(16+stateSize+decisionSize) + limitBytes(names[i], l)
				continue
			}
		}
		if l.Algorithm == core.SlidingLog && l.Limit <= core.MaxLogLimit {
			if c := int64(cap(e.ext.states[j].Log)); c < l.Limit {
				n += round16(8*l.Limit) - round16(8*c)
			}
		}
	}
	return n
}

// decideEntry runs req against e's states into e.ext.out; e.mu is held.
func (s *Store) decideEntry(e *entry, req *store.Request) (int, error) {
	p := req.Policy
	n := p.Len()
	var (
		ss      []core.State
		gather  bool
		indexes [maxStack]int
	)
	if e.one { // a compact entry under other limits
		extra := e.spillBytes()
		if !s.reserve(extra) {
			return 0, ErrBudget
		}
		e.charged += extra
		e.spill()
	}
	x := e.ext
	same := e.pol == p
	if !same {
		same = e.sameNames(p.Names())
		if extra := e.growth(req, same); extra > 0 {
			if !s.reserve(extra) {
				return 0, ErrBudget
			}
			e.charged += extra
		}
	}
	if same {
		ss = x.states
	} else {
		// Another set of limits than last time on this key: map each
		// name to its state, adding the new ones.
		gather = true
		ss = make([]core.State, n)
		for i, name := range p.Names() {
			j := e.index(name)
			if j < 0 {
				j = len(x.names)
				x.names = append(x.names, strings.Clone(name))
				x.states = append(x.states, core.State{})
			}
			indexes[i] = j
			ss[i] = x.states[j]
		}
	}
	if len(x.out) < n {
		x.out = make([]core.Decision, max(n, len(x.names)))
	}
	out := x.out[:n]
	ls := p.Limits()
	for i := range ls {
		// Logs at the capacity charged for them (see growth).
		if l := &ls[i]; l.Algorithm == core.SlidingLog && l.Limit <= core.MaxLogLimit && int64(cap(ss[i].Log)) < l.Limit {
			grown := make([]int64, len(ss[i].Log), l.Limit)
			copy(grown, ss[i].Log)
			ss[i].Log = grown
		}
	}
	// From here on e's states have p's names in p's order (same) and the
	// logs p needs: p's next request needs neither check.
	if same {
		e.pol = p
	} else {
		e.pol = nil
	}
	var (
		idx     int
		err     error
		allowed bool
	)
	switch {
	case p.Shadowed():
		// The enforced limits and the shadow ones in one step, under
		// e.mu; states change only when the call is admitted.
		idx, err = p.Decide(s.shadowDecider(), req.Op, ss, req.Now, req.Cost, out)
		if req.Op == store.Peek {
			return idx, err
		}
		allowed = err == nil && p.Deciding(out, idx).Allowed
	case req.Op == store.Peek:
		if s.native {
			return core.PeekAllCompiled(p.Compiled(), ss, req.Now, req.Cost, out)
		}
		return s.decider.PeekAll(ls, ss, req.Now, req.Cost, out)
	case req.Op == store.Settle:
		idx, err = p.Decide(s.shadowDecider(), store.Settle, ss, req.Now, req.Cost, out)
		allowed = err == nil
	case s.native:
		idx, err = core.TakeAllCompiled(p.Compiled(), ss, req.Now, req.Cost, out)
		allowed = err == nil && out[idx].Allowed
	default:
		idx, err = s.decider.TakeAll(ls, ss, req.Now, req.Cost, out)
		allowed = err == nil && out[idx].Allowed
	}
	if !allowed {
		if gather { // keep grown logs
			for i := range n {
				x.states[indexes[i]].Log = ss[i].Log
			}
		}
		return idx, err
	}
	for i := range n {
		if exp := req.Now + out[i].ResetAfter; exp > e.expires {
			e.expires = exp
		}
		if gather {
			x.states[indexes[i]] = ss[i]
		}
	}
	return idx, nil
}

// sameNames reports whether e's names are names, in order; e.mu is held
// and e is not compact.
func (e *entry) sameNames(names []string) bool {
	if len(e.ext.names) != len(names) {
		return false
	}
	for i := range names {
		if e.ext.names[i] != names[i] {
			return false
		}
	}
	return true
}

// index returns the index of name in e's names, or -1; e.mu is held and e
// is not compact.
func (e *entry) index(name string) int {
	for i, n := range e.ext.names {
		if n == name {
			return i
		}
	}
	return -1
}

// Reset implements store.Store.
func (s *Store) Reset(_ context.Context, prefix, key string, names []string) error {
	h := s.hash(key)
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
		if e.one {
			if name == e.name() {
				e.alg, e.t, e.x, e.y = 0, 0, 0, 0
			}
		} else if j := e.index(name); j >= 0 {
			e.ext.states[j] = core.State{Log: e.ext.states[j].Log[:0]}
		}
	}
	return nil
}
