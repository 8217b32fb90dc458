package main

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/rlcore/rl/core"
	rlstore "github.com/rlcore/rl/store"
)

// Shared data holds the keys' states. proxy-wasm shared data is one
// key-value map per vm_id, shared by the VMs of every Envoy worker thread;
// a value is replaced only with set_shared_data given the cas that
// get_shared_data returned (or unconditionally with cas 0), one key at a
// time, and nothing is ever deleted. So a rule gets a fixed number of
// slots, shared-data keys
//
//	rl/v3/<rule name>/<slot number>
//
// each holding up to KeysPerSlot states (and small forward records, below).
//
// Placement. A key has a home slot and alternates alternate slots, all
// derived from its digest (the first 16 bytes of SHA-256(key)), so that
// the slots a stored record may use are known from the record alone. A
// key's state lives at home when there is room, else in the least loaded
// of its alternates with room; when all of them are full, a key living at
// home in one of them moves to one of its own alternates (two levels deep,
// at most searchBudget slots read), making room as cuckoo hashing does.
// With 4 states per slot (or more), random keys fill 90% of Slots ×
// KeysPerSlot without a refusal (TestStoreCapacity; the first came at 95.5%
// at the earliest over ten seeds, where one slot per key refused at 10%).
//
// One place decides where a key is: its home. The key's home holds its
// record, either its state ("at home") or a forward naming the alternate
// and the generation (a random number) of the state it points to. Every
// change of where a key lives is one compare-and-swap on its home slot,
// so two VMs can never place one key twice:
//
//   - a new key at home: its state is added to the home slot, which must
//     not have changed since it was read without the key;
//   - a new key elsewhere: its state (generation g) is first written to
//     the alternate, unreachable, then the forward (g) added to the home
//     slot by compare-and-swap; if the home changed and now holds the key
//     (another VM placed it first), the unreachable state is taken out
//     and the decision starts over on the key's state;
//   - a move: the key's state is copied to the alternate under a new
//     generation, then its state at home replaced by the forward in one
//     compare-and-swap, which fails if the state changed since the copy
//     (the copy is then taken out);
//   - a forward is removed only once its state is gone (dropped at rest,
//     below), which its generation makes final: a state of generation g
//     is written once, before its forward exists, and never again.
//
// A decision on a key that lives in an alternate reads the home, follows
// the forward, and writes the alternate by compare-and-swap: while the
// state is there (the swap succeeded), its forward cannot have been
// removed, so the state decided on is the key's only one.
//
// A state whose limits are all fully restored (now past the largest
// ResetAfter of its last admission) is as good as none: it is dropped at
// its slot's next write and its place reused, so idle keys never pile up.
// A forward left without its state is removed by the next decision on the
// key, or when its home has no room for another home record.
//
// A slot's value, all integers little-endian int64 words:
//
//	magic (slotMagic), records
//	per record: digest (2 words), generation (0 for a state at home), kind
//	  kind >= 0: a state record of kind states: expiry (µs), the states
//	  kind < 0: a forward to the alternate -1-kind
//	per state: algorithm, T, X, Y, L, W, R, log length, log entries
//
// The state words are core.State's, the fields the WASM ABI's slots and
// the SQL rows hold: the project's one state encoding.

// sharedData is the host's shared data: proxywasm.GetSharedData and
// SetSharedData in the filter, a map in tests.
type sharedData interface {
	// get returns the value and cas of key, or errNotFound.
	get(key string) ([]byte, uint32, error)
	// set replaces key's value if cas matches (0: unconditionally), else
	// returns errCASMismatch.
	set(key string, value []byte, cas uint32) error
}

var (
	errNotFound    = errors.New("shared data: not found")
	errCASMismatch = errors.New("shared data: cas mismatch")
	// errFull: neither the key's slots nor a move can make room for it.
	// Load, not an outage (rlstore.ErrFull): never answered by fail_open.
	errFull = fmt.Errorf("rl-filter: no room for the key in shared data (raise slots or keys_per_slot): %w", rlstore.ErrFull)
	// errContention: the slots changed under every one of maxAttempts
	// tries. Load (rlstore.ErrBusy).
	errContention = fmt.Errorf("rl-filter: shared data changed under every attempt: %w", rlstore.ErrBusy)
	// errRetry: the attempt read slots that changed before it could
	// write; the decision starts over.
	errRetry = errors.New("rl-filter: retry")
	// errUnreadable: a slot value this filter cannot parse (another
	// encoding, a foreign write): a corrupt stored state (core.ErrState),
	// refused as Internal by the one failure rule, as every store's, never
	// read as empty (which would give every key in it a fresh quota).
	errUnreadable = fmt.Errorf("rl-filter: a shared-data slot holds a value this filter cannot read: %w", core.ErrState)
)

const (
	slotMagic   = 0x0003_6c72 // "rl", encoding 3 (2 had no L, W, R)
	slotPrefix  = "rl/v3/"
	maxAttempts = 1000
	// alternates is the number of a key's slots besides its home.
	alternates = 3
	// searchBudget bounds the slots a search for room reads.
	searchBudget = 64
	headerWords  = 4 // digest (2), generation, kind
	stateWords   = 8 // algorithm, T, X, Y, L, W, R, log length
	// maxRecords bounds the records a value may claim (a parse check).
	maxRecords = 4096
)

// maxHomeRecords is how many keys may have their record (a state at home
// or a forward) in one home slot: the keys whose home it is. Homes are
// random, so this is generous: with 4 states per slot, at most 24, where
// 16,384 full slots have at most 14 or so.
func maxHomeRecords(keysPerSlot int) int { return 2*keysPerSlot + 16 }

// store decides keys of one configuration on shared data. It is used by
// one VM (one thread) at a time; its scratch space is reused per decision.
type store struct {
	cfg *config
	sd  sharedData
	// slotKeys[rule][slot]: the shared-data keys, built once.
	slotKeys map[*rule][]string
	// Scratch: states and their log storage, decisions, the new value.
	states []core.State
	logs   []int64
	out    []byte
	// views are the slots read by the current attempt (views[:nviews]).
	views  []*view
	nviews int
	drop   []int
	// gen returns a new generation (not 0); tests replace it.
	gen func() int64
	// charged: during a settle, the take's per-limit decisions.
	charged []core.Decision
}

func newStore(cfg *config, sd sharedData) *store {
	s := &store{cfg: cfg, sd: sd, slotKeys: map[*rule][]string{}, gen: newGen}
	logs := 0
	for _, r := range cfg.Rules {
		keys := make([]string, cfg.Slots)
		prefix := slotPrefix + r.Name + "/"
		for i := range keys {
			keys[i] = prefix + strconv.Itoa(i)
		}
		s.slotKeys[r] = keys
		logs = max(logs, logCapacity(r))
		for _, o := range r.overrides { // an override decides on its rule's slots
			s.slotKeys[o.r] = keys
			logs = max(logs, logCapacity(o.r))
		}
	}
	s.states = make([]core.State, maxLimits)
	s.logs = make([]int64, logs)
	return s
}

// logCapacity is the log storage a decision under r's limits needs.
func logCapacity(r *rule) int {
	n := 0
	for _, l := range r.Limits {
		if l.Algorithm == core.SlidingLog {
			n += int(l.Limit)
		}
	}
	return n
}

func newGen() int64 {
	for {
		if g := rand.Int64(); g != 0 {
			return g
		}
	}
}

// createSlots creates every slot of every local rule that does not exist
// yet, as empty. The filter calls it when its configuration starts, before
// deciding anything, so that no decision ever creates a slot: creating is
// the one write set_shared_data cannot make conditional (a missing key is
// set whatever the cas), and two VMs creating the same slot at once while
// a third decides on it could lose that decision's count.
func (s *store) createSlots() error {
	empty := encodeEmpty()
	for _, r := range s.cfg.Rules {
		if r.Global != nil {
			continue
		}
		for _, k := range s.slotKeys[r] {
			if _, _, err := s.sd.get(k); errors.Is(err, errNotFound) {
				if err := s.sd.set(k, empty, 0); err != nil {
					return err
				}
			} else if err != nil {
				return err
			}
		}
	}
	return nil
}

func encodeEmpty() []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b, slotMagic)
	return b
}

// digest returns a key's digest: the first 16 bytes of its SHA-256.
func digest(key string) [2]int64 {
	sum := sha256.Sum256([]byte(key))
	return [2]int64{int64(binary.LittleEndian.Uint64(sum[0:8])), int64(binary.LittleEndian.Uint64(sum[8:16]))}
}

// place is where a key may live: its home slot and its alternates.
type place struct {
	d    [2]int64
	home int
	alts [alternates]int
	n    int // alternates in alts: 0 with one slot
}

// placeOf derives a digest's slots: a home and alternates other than it
// (they may repeat one another), from the digest's second word mixed by
// SplitMix64's finalizer.
func placeOf(d [2]int64, slots int) place {
	p := place{d: d}
	x := uint64(d[1])
	p.home = int(mix(x) % uint64(slots))
	if slots == 1 {
		return p
	}
	p.n = alternates
	for i := range p.alts {
		x += 0x9e3779b97f4a7c15
		p.alts[i] = (p.home + 1 + int(mix(x)%uint64(slots-1))) % slots
	}
	return p
}

func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// view is a slot as one attempt read it.
type view struct {
	n   int // slot number
	key string
	cas uint32
	sl  slot
}

// view returns slot n of r as read by this attempt: read once, then
// cached until the attempt ends.
func (s *store) view(r *rule, n int) (*view, error) {
	for _, v := range s.views[:s.nviews] {
		if v.n == n {
			return v, nil
		}
	}
	if s.nviews == len(s.views) {
		s.views = append(s.views, &view{})
	}
	v := s.views[s.nviews]
	v.n, v.key = n, s.slotKeys[r][n]
	if err := s.read(v); err != nil {
		return nil, err
	}
	s.nviews++
	return v, nil
}

// cached reports whether slot n was read by this attempt.
func (s *store) cached(n int) bool {
	for _, v := range s.views[:s.nviews] {
		if v.n == n {
			return true
		}
	}
	return false
}

// read (re)reads v's slot. A slot missing (not created at start: another
// configuration's VM may have been first) is created empty first.
func (s *store) read(v *view) error {
	for range maxAttempts {
		val, cas, err := s.sd.get(v.key)
		if errors.Is(err, errNotFound) {
			if err := s.sd.set(v.key, encodeEmpty(), 0); err != nil && !errors.Is(err, errCASMismatch) {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		sl, ok := parseSlot(val, v.sl.recs[:0])
		if !ok {
			return fmt.Errorf("%w (%s)", errUnreadable, v.key)
		}
		v.cas, v.sl = cas, sl
		return nil
	}
	return errContention
}

// commit writes b to v's slot if it has not changed since v was read:
// nil, errCASMismatch or the host's error.
func (s *store) commit(v *view, b []byte) error {
	s.out = b
	return s.sd.set(v.key, b, v.cas)
}

// retry maps a write's error for the attempt: a mismatch (or success
// where the attempt must read again) is errRetry.
func retry(err error) error {
	if err == nil || errors.Is(err, errCASMismatch) {
		return errRetry
	}
	return err
}

// take decides cost for key under r at now with r.policy.Decide (core.TakeAll
// of the enforced limits, then the shadow ones), on the key's state in
// shared data, writing the new state with compare-and-swap. It returns the
// deciding index and fills ds (len(r.Limits)). Errors are
// failures (shared data, no room, contention, a core error), never
// denials.
func (s *store) take(r *rule, key string, now, cost int64, ds []core.Decision) (int, error) {
	return s.run(r, key, rlstore.Take, now, cost, ds)
}

// settle corrects the usage of key under r by delta at now (r.policy.Decide
// with rlstore.Settle: core.SettleAll of every limit, shadow ones
// included), as take does a decision: the key's state in shared data,
// written with compare-and-swap. It never denies: a positive delta may
// leave the key in debt, a negative one refunds, never below nothing
// used. A key without a state is refunded nothing, and no state is
// written for it.
//
// charged are the take's per-limit decisions: a shadow limit it did not
// charge is left as it is (store.Policy.SettleCharged).
func (s *store) settle(r *rule, key string, now, delta int64, charged, ds []core.Decision) (int, error) {
	s.charged = charged
	defer func() { s.charged = nil }()
	return s.run(r, key, rlstore.Settle, now, delta, ds)
}

// run makes take's or settle's attempts on key's place.
func (s *store) run(r *rule, key string, op rlstore.Op, now, cost int64, ds []core.Decision) (int, error) {
	p := placeOf(digest(key), s.cfg.Slots)
	for range maxAttempts {
		s.nviews = 0
		idx, err := s.attempt(r, &p, op, now, cost, ds)
		if !errors.Is(err, errRetry) {
			return idx, err
		}
	}
	return 0, errContention
}

// attempt is one try of run: errRetry when a slot it read changed before
// it could write.
func (s *store) attempt(r *rule, p *place, op rlstore.Op, now, cost int64, ds []core.Decision) (int, error) {
	home, err := s.view(r, p.home)
	if err != nil {
		return 0, err
	}
	i := home.sl.homeRecord(p.d)
	if i >= 0 && home.sl.recs[i].forward() {
		f := home.sl.recs[i]
		j, alt := -1, home
		if f.alt < p.n { // else no such alternate (a foreign writer's)
			if alt, err = s.view(r, p.alts[f.alt]); err != nil {
				return 0, err
			}
			j = alt.sl.state(p.d, f.gen)
		}
		if j < 0 {
			// The forward's state was dropped at rest: remove the
			// forward, then decide on a fresh state.
			s.drop = append(s.drop[:0], i)
			return 0, retry(s.commit(home, home.sl.appendKept(s.out[:0], now, s.drop, 0)))
		}
		idx, expiry, err := s.decide(r, &alt.sl, j, op, now, cost, ds)
		if err != nil || expiry == 0 {
			return idx, err
		}
		s.drop = append(s.drop[:0], j)
		b := appendState(alt.sl.appendKept(s.out[:0], now, s.drop, 1), p.d, f.gen, expiry, s.states[:len(r.Limits)])
		if err := s.commit(alt, b); err != nil {
			return 0, retry(err)
		}
		return idx, nil
	}
	idx, expiry, err := s.decide(r, &home.sl, i, op, now, cost, ds)
	if err != nil || expiry == 0 {
		return idx, err
	}
	if i >= 0 {
		s.drop = append(s.drop[:0], i)
		b := appendState(home.sl.appendKept(s.out[:0], now, s.drop, 1), p.d, 0, expiry, s.states[:len(r.Limits)])
		if err := s.commit(home, b); err != nil {
			return 0, retry(err)
		}
		return idx, nil
	}
	if err := s.insert(r, p, home, expiry, now); err != nil {
		return 0, err
	}
	return idx, nil
}

// decide decides op (a take, or a settle of cost) at now on the states of
// record i of sl (fresh states if i < 0, or if they were written under
// other limits) into s.states. expiry is 0 when nothing was taken (a
// denial, cost 0, a settle of 0 or a refund on no state): the state read
// is the state, no write. A state core refuses (core.ErrState: a foreign
// writer or a bug) is an error, Internal by the one failure rule (refused,
// never admitted), as in every store: never a fresh start.
func (s *store) decide(r *rule, sl *slot, i int, op rlstore.Op, now, cost int64, ds []core.Decision) (idx int, expiry int64, err error) {
	states := s.states[:len(r.Limits)]
	if i < 0 || !sl.loadStates(i, r, states, s.logs) {
		resetStates(r, states, s.logs)
	}
	// The enforced limits all or nothing and the shadow ones (if any) in
	// this one step, written by one compare-and-swap.
	if op == rlstore.Settle {
		idx, err = r.policy.SettleCharged(nil, s.charged, states, now, cost, ds)
	} else {
		idx, err = r.policy.Decide(nil, op, states, now, cost, ds)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("rl-filter: rule %q: the key's stored state: %w", r.Name, err)
	}
	switch {
	case op == rlstore.Settle && (cost == 0 || cost < 0 && i < 0):
		return idx, 0, nil
	case op != rlstore.Settle && (!r.policy.Deciding(ds, idx).Allowed || cost == 0):
		return idx, 0, nil
	}
	expiry = now
	for i := range ds {
		expiry = max(expiry, now+ds[i].ResetAfter)
	}
	return idx, max(expiry, 1), nil
}

// insert places the state of a key that has no record in its home (home,
// as read): at home if it has room, else in the least loaded alternate
// with room (then the forward at home), else it makes room by moving
// another key and starts over. The state is s.states, expiring at expiry.
func (s *store) insert(r *rule, p *place, home *view, expiry, now int64) error {
	c := s.cfg.KeysPerSlot
	states := s.states[:len(r.Limits)]
	n, homes := home.sl.count(now)
	if homes >= maxHomeRecords(c) {
		if swept, err := s.sweep(r, home, now); err != nil || swept {
			return retry(err)
		}
		return errFull
	}
	if n < c {
		return retryOnMismatch(s.commit(home, appendState(home.sl.appendKept(s.out[:0], now, nil, 1), p.d, 0, expiry, states)))
	}
	var best *view
	k, least := 0, c
	for a := range p.n {
		v, err := s.view(r, p.alts[a])
		if err != nil {
			return err
		}
		if n, _ := v.sl.count(now); n < least {
			best, k, least = v, a, n
		}
	}
	if best == nil {
		moved, err := s.makeRoom(r, p, now)
		if err != nil || moved {
			return retry(err)
		}
		return errFull
	}
	gen := s.gen()
	if err := s.commit(best, appendState(best.sl.appendKept(s.out[:0], now, nil, 1), p.d, gen, expiry, states)); err != nil {
		return retry(err)
	}
	return s.publish(r, p.d, home, best.n, k, gen, now)
}

// retryOnMismatch is nil for success, errRetry for a mismatch.
func retryOnMismatch(err error) error {
	if errors.Is(err, errCASMismatch) {
		return errRetry
	}
	return err
}

// publish adds the forward (d, gen) to alternate k (slot alt), whose state
// is in place, to the key's home (home, as read). If the home changed, it
// is read again: while it still has no record of the key and has room, the
// forward is added to it; otherwise the unreachable state is taken out and
// the decision starts over.
func (s *store) publish(r *rule, d [2]int64, home *view, alt, k int, gen, now int64) error {
	for range maxAttempts {
		err := s.commit(home, appendForward(home.sl.appendKept(s.out[:0], now, nil, 1), d, gen, k))
		if err == nil {
			return nil
		}
		if !errors.Is(err, errCASMismatch) {
			s.withdraw(r, alt, d, gen)
			return err
		}
		if err := s.read(home); err != nil {
			s.withdraw(r, alt, d, gen)
			return err
		}
		if _, homes := home.sl.count(now); home.sl.homeRecord(d) >= 0 || homes >= maxHomeRecords(s.cfg.KeysPerSlot) {
			break
		}
	}
	s.withdraw(r, alt, d, gen)
	return errRetry
}

// withdraw takes the state (d, gen) out of slot n, where no forward points
// to it. Should it fail (contention), the state stays unreachable until
// it comes to rest and is dropped.
func (s *store) withdraw(r *rule, n int, d [2]int64, gen int64) {
	v := &view{n: n, key: s.slotKeys[r][n]}
	for range maxAttempts {
		if s.read(v) != nil {
			return
		}
		j := v.sl.state(d, gen)
		if j < 0 {
			return
		}
		s.drop = append(s.drop[:0], j)
		// Nothing else is dropped: now 0 keeps every other state.
		if err := s.commit(v, v.sl.appendKept(s.out[:0], 0, s.drop, 0)); !errors.Is(err, errCASMismatch) {
			return
		}
	}
}

// makeRoom makes room in one of p's slots, all full, by moving a key
// living at home in one of them to one of its alternates with room, or,
// failing that, a key living at home in such an alternate on to one of
// its own (which frees the way for the first at the next attempt). It
// reads at most searchBudget slots and reports whether it moved a key;
// either way the attempt's views are stale.
func (s *store) makeRoom(r *rule, p *place, now int64) (bool, error) {
	c := s.cfg.KeysPerSlot
	cands := make([]*view, 0, 1+alternates)
	for _, n := range append([]int{p.home}, p.alts[:p.n]...) {
		v, err := s.view(r, n)
		if err != nil {
			return false, err
		}
		cands = append(cands, v)
	}
	// look returns slot n's view and whether it has room, or nil when
	// the budget is spent.
	look := func(n int) (*view, bool, error) {
		if !s.cached(n) && s.nviews >= searchBudget {
			return nil, false, nil
		}
		v, err := s.view(r, n)
		if err != nil {
			return nil, false, err
		}
		k, _ := v.sl.count(now)
		return v, k < c, nil
	}
	for depth := 1; depth <= 2; depth++ {
		for _, x := range cands {
			for i := range x.sl.recs {
				vp, ok := x.sl.movable(i, x.n, now, s.cfg.Slots)
				if !ok {
					continue
				}
				for a, n := range vp.alts[:vp.n] {
					y, room, err := look(n)
					if err != nil || y == nil {
						return false, err
					}
					if room {
						return true, s.move(r, x, i, a, y, now)
					}
					if depth == 1 {
						continue
					}
					for j := range y.sl.recs {
						wp, ok := y.sl.movable(j, y.n, now, s.cfg.Slots)
						if !ok {
							continue
						}
						for b, m := range wp.alts[:wp.n] {
							z, room, err := look(m)
							if err != nil || z == nil {
								return false, err
							}
							if room {
								return true, s.move(r, y, j, b, z, now)
							}
						}
					}
				}
			}
		}
	}
	return false, nil
}

// move moves record i of x, the live state of a key at home in x, to its
// alternate a (slot y, which has room): the state is copied to y under a
// new generation, then replaced at home by the forward in one
// compare-and-swap, which fails if x changed since it was read (the key
// may have been decided): the copy is then taken out. A mismatch is not
// an error: the caller starts over either way.
func (s *store) move(r *rule, x *view, i, a int, y *view, now int64) error {
	gen := s.gen()
	rec := x.sl.recs[i]
	b := x.sl.appendAs(y.sl.appendKept(s.out[:0], now, nil, 1), i, gen)
	if err := s.commit(y, b); err != nil {
		return retryOnMismatch(err)
	}
	s.drop = append(s.drop[:0], i)
	if err := s.commit(x, appendForward(x.sl.appendKept(s.out[:0], now, s.drop, 1), rec.d, gen, a)); err != nil {
		s.withdraw(r, y.n, rec.d, gen)
		return retryOnMismatch(err)
	}
	return nil
}

// sweep removes the forwards of home (which has no room for another home
// record) whose states are gone, after taking out those at rest. It reads
// at most searchBudget slots and reports whether it removed any.
func (s *store) sweep(r *rule, home *view, now int64) (bool, error) {
	var dead []int
	for i, f := range home.sl.recs {
		if !f.forward() {
			continue
		}
		fp := placeOf(f.d, s.cfg.Slots)
		if fp.home != home.n || f.alt >= fp.n {
			dead = append(dead, i) // no key's forward: a foreign writer's
			continue
		}
		if !s.cached(fp.alts[f.alt]) && s.nviews >= searchBudget {
			break
		}
		v, err := s.view(r, fp.alts[f.alt])
		if err != nil {
			return false, err
		}
		j := v.sl.state(f.d, f.gen)
		if j >= 0 && v.sl.recs[j].expiry > now {
			continue
		}
		if j >= 0 {
			// At rest: drop it (with the slot's others at rest) first;
			// once it is gone it cannot come back.
			if err := s.commit(v, v.sl.appendKept(s.out[:0], now, nil, 0)); err != nil {
				if errors.Is(err, errCASMismatch) {
					continue
				}
				return false, err
			}
			if err := s.read(v); err != nil {
				return false, err
			}
		}
		dead = append(dead, i)
	}
	if len(dead) == 0 {
		return false, nil
	}
	if err := s.commit(home, home.sl.appendKept(s.out[:0], now, dead, 0)); err != nil && !errors.Is(err, errCASMismatch) {
		return false, err
	}
	return true, nil
}

// resetStates makes states fresh, with log storage for sliding logs.
func resetStates(r *rule, states []core.State, logs []int64) {
	off := 0
	for i, l := range r.Limits {
		states[i] = core.State{}
		if l.Algorithm == core.SlidingLog {
			states[i].Log = logs[off : off : off+int(l.Limit)]
			off += int(l.Limit)
		}
	}
}

// slot is a parsed slot value: its records.
type slot struct {
	w    []byte // the value
	recs []record
}

// record is one record of a slot value.
type record struct {
	off, end int // byte offsets in the value
	d        [2]int64
	gen      int64
	alt      int   // a forward's alternate; -1 for a state record
	expiry   int64 // a state record's
	states   int   // a state record's
}

func (r *record) forward() bool { return r.alt >= 0 }

func (sl *slot) word(off int) int64 { return int64(binary.LittleEndian.Uint64(sl.w[off:])) }

// parseSlot parses a slot value, appending its records to recs; ok is
// false for a value it cannot parse (another encoding, a foreign write),
// which the store refuses (errUnreadable).
func parseSlot(v []byte, recs []record) (_ slot, ok bool) {
	sl := slot{w: v, recs: recs}
	if len(v) < 16 || len(v)%8 != 0 || binary.LittleEndian.Uint64(v) != slotMagic {
		return slot{recs: recs}, false
	}
	n := sl.word(8)
	if n < 0 || n > maxRecords {
		return slot{recs: recs}, false
	}
	off := 16
	for range n {
		if off+headerWords*8 > len(v) {
			return slot{recs: recs}, false
		}
		e := record{off: off, d: [2]int64{sl.word(off), sl.word(off + 8)}, gen: sl.word(off + 16), alt: -1}
		kind := sl.word(off + 24)
		p := off + headerWords*8
		switch {
		case kind < 0:
			if kind < -alternates || e.gen == 0 {
				return slot{recs: recs}, false
			}
			e.alt = int(-1 - kind)
		case kind > maxLimits || p+8 > len(v):
			return slot{recs: recs}, false
		default:
			e.states = int(kind)
			e.expiry = sl.word(p)
			p += 8
			for range e.states {
				if p+stateWords*8 > len(v) {
					return slot{recs: recs}, false
				}
				ln := sl.word(p + 56)
				if ln < 0 || ln > core.MaxLogLimit || p+stateWords*8+int(ln)*8 > len(v) {
					return slot{recs: recs}, false
				}
				p += stateWords*8 + int(ln)*8
			}
		}
		e.end = p
		sl.recs = append(sl.recs, e)
		off = p
	}
	if off != len(v) {
		return slot{recs: recs}, false
	}
	return sl, true
}

// homeRecord returns the index of the record of the key with digest d in
// its home (its state at home, or its forward), or -1.
func (sl *slot) homeRecord(d [2]int64) int {
	for i, e := range sl.recs {
		if e.d == d && (e.gen == 0 || e.forward()) {
			return i
		}
	}
	return -1
}

// state returns the index of the state record (d, gen), or -1.
func (sl *slot) state(d [2]int64, gen int64) int {
	for i, e := range sl.recs {
		if e.d == d && e.gen == gen && !e.forward() {
			return i
		}
	}
	return -1
}

// count returns the states in the slot that are not at rest at now, and
// its home records: those of them at home, and the forwards.
func (sl *slot) count(now int64) (states, homes int) {
	for _, e := range sl.recs {
		switch {
		case e.forward():
			homes++
		case e.expiry > now:
			states++
			if e.gen == 0 {
				homes++
			}
		}
	}
	return states, homes
}

// movable reports whether record i of slot n is a live state at home
// there, which a move may send to an alternate, and its key's place.
func (sl *slot) movable(i, n int, now int64, slots int) (place, bool) {
	e := sl.recs[i]
	if e.forward() || e.gen != 0 || e.expiry <= now {
		return place{}, false
	}
	p := placeOf(e.d, slots)
	return p, p.home == n && p.n > 0
}

// loadStates decodes record i's states into states (log entries into
// logs, or, for a log written under other parameters than r's, storage of
// its own). It reports false, leaving states to be reset, when the
// record's states do not fit r (the rule's limits changed in number).
func (sl *slot) loadStates(i int, r *rule, states []core.State, logs []int64) bool {
	e := sl.recs[i]
	if e.states != len(r.Limits) {
		return false
	}
	p := e.off + (headerWords+1)*8
	off := 0
	for j, l := range r.Limits {
		st := core.State{
			Algorithm: core.Algorithm(sl.word(p)),
			T:         sl.word(p + 8),
			X:         sl.word(p + 16),
			Y:         sl.word(p + 24),
			L:         sl.word(p + 32),
			W:         sl.word(p + 40),
			R:         sl.word(p + 48),
		}
		if a := sl.word(p); a != int64(int32(a)) {
			st.Algorithm = -1 // read as corrupt by core
		}
		ln := int(sl.word(p + 56))
		p += stateWords * 8
		c := 0 // the log storage the limit needs
		if l.Algorithm == core.SlidingLog {
			c = int(l.Limit)
		}
		switch {
		case ln <= c && c > 0:
			st.Log = logs[off : off+ln : off+c]
		case ln > 0:
			// A log written under other parameters: more entries than
			// the limit holds (a lowered limit), or read by another
			// algorithm, which carries its usage over. Rare (after a
			// change): storage of its own, all of its entries (core
			// reads them all; the oldest may count again if the limit is
			// raised back).
			st.Log = make([]int64, ln, max(ln, c))
		}
		for k := range ln {
			st.Log[k] = sl.word(p + 8*k)
		}
		off += c
		p += ln * 8
		states[j] = st
	}
	return true
}

// appendKept starts a new value of the slot in b: the header, then the
// records kept by a write at now, all but those at the indices in drop and
// the states at rest (expiry <= now). The caller then appends add records
// (appendState, appendForward, appendAs), which the count includes.
func (sl *slot) appendKept(b []byte, now int64, drop []int, add int) []byte {
	kept := 0
	for i, e := range sl.recs {
		if keep(e, i, now, drop) {
			kept++
		}
	}
	b = binary.LittleEndian.AppendUint64(b, slotMagic)
	b = binary.LittleEndian.AppendUint64(b, uint64(kept+add))
	for i, e := range sl.recs {
		if keep(e, i, now, drop) {
			b = append(b, sl.w[e.off:e.end]...)
		}
	}
	return b
}

func keep(e record, i int, now int64, drop []int) bool {
	return (e.forward() || e.expiry > now) && !slices.Contains(drop, i)
}

func put(b []byte, v int64) []byte { return binary.LittleEndian.AppendUint64(b, uint64(v)) }

// appendState appends a state record.
func appendState(b []byte, d [2]int64, gen, expiry int64, states []core.State) []byte {
	b = put(put(put(put(put(b, d[0]), d[1]), gen), int64(len(states))), expiry)
	for _, st := range states {
		b = put(put(put(put(b, int64(st.Algorithm)), st.T), st.X), st.Y)
		b = put(put(put(put(b, st.L), st.W), st.R), int64(len(st.Log)))
		for _, t := range st.Log {
			b = put(b, t)
		}
	}
	return b
}

// appendForward appends a forward to alternate a.
func appendForward(b []byte, d [2]int64, gen int64, a int) []byte {
	return put(put(put(put(b, d[0]), d[1]), gen), int64(-1-a))
}

// appendAs appends record i under generation gen.
func (sl *slot) appendAs(b []byte, i int, gen int64) []byte {
	e := sl.recs[i]
	b = append(b, sl.w[e.off:e.off+16]...)
	b = put(b, gen)
	return append(b, sl.w[e.off+24:e.end]...)
}
