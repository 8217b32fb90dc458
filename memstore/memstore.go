// Package memstore is the in-memory store.Store: the embedded default of the
// limiter, for one process.
//
// Keys are spread over shards by a seeded hash; each shard maps keys to
// entries under a read-write lock, and each entry has its own mutex, so calls
// on different keys rarely contend and calls on one key are serialized, which
// makes every decision exact under any concurrency. A decision on a warm key
// allocates nothing.
//
// Memory is bounded by the active keys: an entry records when its states will
// be back to fresh (the decisions' ResetAfter) and a sweeper drops it after
// that. Config.MaxKeys optionally caps the number of keys; a new key beyond
// the cap is refused with store.ErrFull.
package memstore

import (
	"context"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlcore/rl/core"
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
	// SweepInterval is how often idle keys are dropped. Default: 30s.
	// Negative disables the background sweeper (call Sweep yourself).
	SweepInterval time.Duration
	// Clock returns the time in µs since the Unix epoch the sweeper compares
	// expiries with; use the limiter's clock. Default: the system clock.
	Clock func() int64
}

// Store is an in-memory store.Store. Create it with New; Close stops its
// sweeper.
type Store struct {
	shards  []shard
	mask    uint64
	seed    maphash.Seed
	perCap  int // keys per shard, 0 = unlimited
	clock   func() int64
	stop    chan struct{}
	stopped sync.WaitGroup
	closed  atomic.Bool
}

var _ store.Store = (*Store)(nil)

// shard maps a key's hash to its entries (a chain: collisions are rare),
// so a lookup hashes the key once.
type shard struct {
	mu sync.RWMutex
	m  map[uint64]*entry
	n  int      // entries
	_  [24]byte // one cache line per shard
}

// entry holds one key's states, one per limit name.
type entry struct {
	prefix, key string
	next        *entry // same hash
	mu          sync.Mutex
	dead        bool // removed from its shard; look the key up again
	names       []string
	states      []core.State
	out         []core.Decision // scratch for decisions, used under mu
	expires     int64           // µs: all states are fresh from then on
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
		shards: make([]shard, size),
		mask:   uint64(size - 1),
		seed:   maphash.MakeSeed(),
		clock:  c.Clock,
		stop:   make(chan struct{}),
	}
	if s.clock == nil {
		s.clock = func() int64 { return time.Now().UnixMicro() }
	}
	if c.MaxKeys > 0 {
		s.perCap = (c.MaxKeys + size - 1) / size
	}
	for i := range s.shards {
		s.shards[i].m = make(map[uint64]*entry)
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
// how many it dropped. The background sweeper calls it; tests with a fake
// clock call it directly.
func (s *Store) Sweep(now int64) int {
	n := 0
	for i := range s.shards {
		n += s.shards[i].sweep(now)
	}
	return n
}

func (sh *shard) sweep(now int64) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.dropIdle(now)
}

// dropIdle removes the entries whose states are fresh at now; sh.mu is held.
func (sh *shard) dropIdle(now int64) int {
	n := 0
	for h, head := range sh.m {
		var keep *entry
		for e := head; e != nil; {
			next := e.next
			e.mu.Lock()
			if e.expires <= now {
				e.dead = true
				n++
			} else {
				e.next, keep = keep, e
			}
			e.mu.Unlock()
			e = next
		}
		if keep == nil {
			delete(sh.m, h)
		} else {
			sh.m[h] = keep
		}
	}
	sh.n -= n
	return n
}

// find returns the entry of (prefix, key) with hash h; sh.mu is held.
func (sh *shard) find(h uint64, prefix, key string) *entry {
	for e := sh.m[h]; e != nil; e = e.next {
		if e.key == key && e.prefix == prefix {
			return e
		}
	}
	return nil
}

// unlink removes e; sh.mu is held for writing.
func (sh *shard) unlink(h uint64, e *entry) {
	if head := sh.m[h]; head == e {
		if e.next == nil {
			delete(sh.m, h)
		} else {
			sh.m[h] = e.next
		}
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == e {
				p.next = e.next
				break
			}
		}
	}
	e.dead = true
	sh.n--
}

// Len returns the number of keys held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		n += sh.n
		sh.mu.RUnlock()
	}
	return n
}

func (s *Store) shard(key string) (*shard, uint64) {
	h := maphash.String(s.seed, key)
	return &s.shards[h&s.mask], h
}

// Decide implements store.Store.
func (s *Store) Decide(ctx context.Context, req store.Request, each []core.Decision) (int, core.Decision, error) {
	return s.DecideRef(&req, each)
}

// DecideRef is Decide for callers holding a *Store: it takes the request by
// reference (it does not keep it), which spares copying it through the
// store.Store interface on the hot path. The limiter uses it.
func (s *Store) DecideRef(req *store.Request, each []core.Decision) (int, core.Decision, error) {
	if len(req.Names) != len(req.Limits) || len(req.Limits) == 0 {
		return 0, core.Decision{}, core.ErrLimits
	}
	sh, h := s.shard(req.Key)
	for {
		sh.mu.RLock()
		e := sh.find(h, req.Prefix, req.Key)
		sh.mu.RUnlock()
		if e == nil {
			if req.Op == store.Peek {
				return decideFresh(req, each)
			}
			var err error
			if e, err = s.insert(sh, h, req.Prefix, req.Key); err != nil {
				return 0, core.Decision{}, err
			}
		}
		e.mu.Lock()
		if e.dead { // swept between lookup and lock
			e.mu.Unlock()
			continue
		}
		i, err := e.decide(req)
		var d core.Decision
		if err == nil {
			d = e.out[i]
			if len(each) >= len(req.Limits) {
				copy(each, e.out)
			}
		}
		e.mu.Unlock()
		return i, d, err
	}
}

// decideFresh peeks a key that has no entry.
func decideFresh(req *store.Request, each []core.Decision) (int, core.Decision, error) {
	n := len(req.Limits)
	ss := make([]core.State, n)
	out := make([]core.Decision, n)
	i, err := req.Decider.PeekAll(req.Limits, ss, req.Now, req.Cost, out)
	if err != nil {
		return i, core.Decision{}, err
	}
	if len(each) >= n {
		copy(each, out)
	}
	return i, out[i], nil
}

func (s *Store) insert(sh *shard, h uint64, prefix, key string) (*entry, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.find(h, prefix, key); e != nil {
		return e, nil
	}
	if s.perCap > 0 && sh.n >= s.perCap {
		sh.dropIdle(s.clock()) // make room from idle keys first
		if sh.n >= s.perCap {
			return nil, store.ErrFull
		}
	}
	e := &entry{prefix: prefix, key: key, next: sh.m[h]}
	sh.m[h] = e
	sh.n++
	return e, nil
}

// decide runs req against the entry's states into e.out; e.mu is held.
func (e *entry) decide(req *store.Request) (int, error) {
	n := len(req.Limits)
	var (
		ss      []core.State
		gather  bool
		indexes [maxStack]int
	)
	if e.sameNames(req.Names) {
		ss = e.states
	} else {
		// Another set of limits than last time on this key: map each
		// name to its state, adding the new ones.
		if n > maxStack {
			return 0, core.ErrLimits
		}
		gather = true
		ss = make([]core.State, n)
		for i, name := range req.Names {
			j := e.index(name)
			if j < 0 {
				j = len(e.names)
				e.names = append(e.names, name)
				e.states = append(e.states, core.State{})
			}
			indexes[i] = j
			ss[i] = e.states[j]
		}
	}
	if len(e.out) < n {
		e.out = make([]core.Decision, max(n, len(e.names)))
	}
	out := e.out[:n]
	if req.Op == store.Take {
		for i := range req.Limits {
			if l := &req.Limits[i]; l.Algorithm == core.SlidingLog && int64(cap(ss[i].Log)) < l.Limit {
				grown := make([]int64, len(ss[i].Log), l.Limit)
				copy(grown, ss[i].Log)
				ss[i].Log = grown
			}
		}
	}
	var (
		idx int
		err error
	)
	if req.Op == store.Peek {
		return req.Decider.PeekAll(req.Limits, ss, req.Now, req.Cost, out)
	}
	idx, err = req.Decider.TakeAll(req.Limits, ss, req.Now, req.Cost, out)
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
func (s *Store) Reset(ctx context.Context, prefix, key string, names []string) error {
	sh, h := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(h, prefix, key)
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if names == nil {
		sh.unlink(h, e)
		return nil
	}
	for _, name := range names {
		if j := e.index(name); j >= 0 {
			e.states[j] = core.State{Log: e.states[j].Log[:0]}
		}
	}
	return nil
}
