package main

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/rlcore/rl/core"
)

// Shared data holds the keys' states. proxy-wasm shared data is one
// key-value map per vm_id, shared by the VMs of every Envoy worker thread;
// a value is replaced only with set_shared_data given the cas that
// get_shared_data returned (or unconditionally with cas 0), and nothing is
// ever deleted. So a rule gets a fixed number of slots, shared-data keys
//
//	rl/v1/<rule name>/<slot number>
//
// each holding up to KeysPerSlot entries (key digest, expiry, states). A key
// lives in slot SHA-256(key) mod Slots; a decision reads the slot, decides
// with core.TakeAll on the entry's states, and writes the whole slot back
// with the cas it read, starting over on a mismatch. An entry whose states
// are all fully restored (now past the largest ResetAfter of its last
// admission) is free: it is dropped at the slot's next write and its place
// reused, so idle keys never pile up. A slot already holding KeysPerSlot
// live keys cannot take another: the decision fails with errFull and the
// rule's fail policy answers.
//
// A slot's value, all integers little-endian int64 words:
//
//	magic (slotMagic), entries
//	per entry: digest (2 words: the first 16 bytes of SHA-256(key)), expiry (µs), states
//	per state: algorithm, T, X, Y, log length, log entries
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
	// errFull: the key's slot holds KeysPerSlot live keys.
	errFull = errors.New("rl-filter: the key's slot is full (raise slots or keys_per_slot)")
	// errContention: the slot changed under every one of maxAttempts
	// tries.
	errContention = errors.New("rl-filter: shared data changed under every attempt")
)

const (
	slotMagic   = 0x0001_6c72 // "rl", encoding 1
	maxAttempts = 1000
	entryWords  = 4 // digest (2), expiry, states
	stateWords  = 5 // algorithm, T, X, Y, log length
)

// store decides keys of one configuration on shared data. It is used by
// one VM (one thread) at a time; its scratch space is reused per decision.
type store struct {
	cfg *config
	sd  sharedData
	// slotKeys[rule index][slot]: the shared-data keys, built once.
	slotKeys map[*rule][]string
	// Scratch: states and their log storage, decisions, the new value.
	states []core.State
	logs   []int64
	out    []byte
	refs   []entryRef
}

func newStore(cfg *config, sd sharedData) *store {
	s := &store{cfg: cfg, sd: sd, slotKeys: map[*rule][]string{}}
	logs := 0
	for _, r := range cfg.Rules {
		keys := make([]string, cfg.Slots)
		prefix := "rl/v1/" + r.Name + "/"
		for i := range keys {
			keys[i] = prefix + strconv.Itoa(i)
		}
		s.slotKeys[r] = keys
		n := 0
		for _, l := range r.Limits {
			if l.Algorithm == core.SlidingLog {
				n += int(l.Limit)
			}
		}
		logs = max(logs, n)
	}
	s.states = make([]core.State, maxLimits)
	s.logs = make([]int64, logs)
	return s
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

// digest returns the key's owner digest and its slot number.
func digest(key string, slots int) (d [2]int64, slot int) {
	sum := sha256.Sum256([]byte(key))
	d[0] = int64(binary.LittleEndian.Uint64(sum[0:8]))
	d[1] = int64(binary.LittleEndian.Uint64(sum[8:16]))
	return d, int(binary.LittleEndian.Uint64(sum[16:24]) % uint64(slots))
}

// take decides cost for key under r at now with core.TakeAll, on the key's
// state in shared data, writing the new state with compare-and-swap. It
// returns core.TakeAll's index and fills ds (len(r.Limits)). Errors are
// failures (shared data, a full slot, contention, a core error), never
// denials.
func (s *store) take(r *rule, key string, now, cost int64, ds []core.Decision) (int, error) {
	d, slot := digest(key, s.cfg.Slots)
	sk := s.slotKeys[r][slot]
	n := len(r.Limits)
	states := s.states[:n]
	for attempt := 0; attempt < maxAttempts; attempt++ {
		val, cas, err := s.sd.get(sk)
		if errors.Is(err, errNotFound) {
			// Not created at start (another configuration's VM may
			// have been first): create it empty and read it again.
			if err := s.sd.set(sk, encodeEmpty(), 0); err != nil && !errors.Is(err, errCASMismatch) {
				return 0, err
			}
			continue
		}
		if err != nil {
			return 0, err
		}
		sl := parseSlot(val, s.refs[:0])
		s.refs = sl.entries
		pos := sl.find(d)
		fresh := true
		if pos >= 0 && sl.loadStates(pos, r, states, s.logs) {
			fresh = false
		}
		if fresh {
			resetStates(r, states, s.logs)
		}
		idx, err := core.TakeAll(r.Limits, states, now, cost, ds)
		if err == core.ErrState {
			// A state no core would write (a foreign writer or a bug):
			// start the key afresh rather than fail it forever.
			resetStates(r, states, s.logs)
			idx, err = core.TakeAll(r.Limits, states, now, cost, ds)
		}
		if err != nil {
			return 0, err
		}
		if !ds[idx].Allowed || cost == 0 {
			// Nothing taken: the state read is the state, no write.
			return idx, nil
		}
		expiry := now
		for i := range ds {
			expiry = max(expiry, now+ds[i].ResetAfter)
		}
		out, ok := sl.encode(s.out[:0], pos, d, expiry, states, now, s.cfg.KeysPerSlot)
		if !ok {
			return 0, errFull
		}
		s.out = out
		switch err := s.sd.set(sk, out, cas); {
		case err == nil:
			return idx, nil
		case errors.Is(err, errCASMismatch):
			continue
		default:
			return 0, err
		}
	}
	return 0, errContention
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

// slot is a parsed slot value: the word offsets of its entries.
type slot struct {
	w       []byte // the value
	entries []entryRef
}

type entryRef struct {
	off, end int // byte offsets of the entry in w
	digest   [2]int64
	expiry   int64
	states   int
}

func (sl *slot) word(off int) int64 { return int64(binary.LittleEndian.Uint64(sl.w[off:])) }

// parseSlot parses a slot value, appending its entries to refs. A value it
// cannot parse (another encoding, a torn or foreign write) reads as an
// empty slot, which the next write replaces.
func parseSlot(v []byte, refs []entryRef) slot {
	sl := slot{w: v, entries: refs}
	if len(v) < 16 || len(v)%8 != 0 || binary.LittleEndian.Uint64(v) != slotMagic {
		return slot{}
	}
	n := sl.word(8)
	if n < 0 || n > maxKeysPerSlot {
		return slot{}
	}
	off := 16
	for i := int64(0); i < n; i++ {
		if off+entryWords*8 > len(v) {
			return slot{}
		}
		e := entryRef{off: off, digest: [2]int64{sl.word(off), sl.word(off + 8)}, expiry: sl.word(off + 16)}
		ns := sl.word(off + 24)
		if ns < 0 || ns > maxLimits {
			return slot{}
		}
		e.states = int(ns)
		p := off + entryWords*8
		for j := 0; j < e.states; j++ {
			if p+stateWords*8 > len(v) {
				return slot{}
			}
			ln := sl.word(p + 32)
			if ln < 0 || ln > core.MaxLogLimit || p+stateWords*8+int(ln)*8 > len(v) {
				return slot{}
			}
			p += stateWords*8 + int(ln)*8
		}
		e.end = p
		sl.entries = append(sl.entries, e)
		off = p
	}
	if off != len(v) {
		return slot{}
	}
	return sl
}

// find returns the index of the entry with digest d, or -1.
func (sl *slot) find(d [2]int64) int {
	for i, e := range sl.entries {
		if e.digest == d {
			return i
		}
	}
	return -1
}

// loadStates decodes entry i's states into states (log entries into logs).
// It reports false, leaving states to be reset, when the entry's states do
// not fit r (the rule's limits changed in number, or a sliding log is
// longer than its limit now allows).
func (sl *slot) loadStates(i int, r *rule, states []core.State, logs []int64) bool {
	e := sl.entries[i]
	if e.states != len(r.Limits) {
		return false
	}
	p := e.off + entryWords*8
	off := 0
	for j, l := range r.Limits {
		st := core.State{
			Algorithm: core.Algorithm(sl.word(p)),
			T:         sl.word(p + 8),
			X:         sl.word(p + 16),
			Y:         sl.word(p + 24),
		}
		if a := sl.word(p); a != int64(int32(a)) {
			st.Algorithm = -1 // read as corrupt by core
		}
		ln := int(sl.word(p + 32))
		p += stateWords * 8
		if l.Algorithm == core.SlidingLog {
			c := int(l.Limit)
			if ln > c {
				return false
			}
			st.Log = logs[off : off+ln : off+c]
			for k := range ln {
				st.Log[k] = sl.word(p + 8*k)
			}
			off += c
		}
		p += ln * 8
		states[j] = st
	}
	return true
}

// encode appends the slot's new value to b: entry pos (or a new entry if
// pos is -1) replaced by (d, expiry, states), entries of other keys that
// have expired by now dropped. It reports false when a new entry does not
// fit in keysPerSlot.
func (sl *slot) encode(b []byte, pos int, d [2]int64, expiry int64, states []core.State, now int64, keysPerSlot int) ([]byte, bool) {
	kept := 0
	for i, e := range sl.entries {
		if i != pos && e.expiry > now {
			kept++
		}
	}
	if kept+1 > keysPerSlot {
		return b, false
	}
	put := func(v int64) { b = binary.LittleEndian.AppendUint64(b, uint64(v)) }
	put(slotMagic)
	put(int64(kept + 1))
	for i, e := range sl.entries {
		if i != pos && e.expiry > now {
			b = append(b, sl.w[e.off:e.end]...)
		}
	}
	put(d[0])
	put(d[1])
	put(expiry)
	put(int64(len(states)))
	for _, st := range states {
		put(int64(st.Algorithm))
		put(st.T)
		put(st.X)
		put(st.Y)
		put(int64(len(st.Log)))
		for _, t := range st.Log {
			put(t)
		}
	}
	return b, true
}
