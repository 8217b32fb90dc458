package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/outage"
)

// memData is shared data as Envoy's proxy-wasm host keeps it: one cas
// counter for the map, bumped on every write; set with cas 0, or on a
// missing key, always succeeds; values are copied in and out.
type memData struct {
	mu               sync.Mutex
	m                map[string]memValue
	next             uint32
	sets, mismatches int
}

type memValue struct {
	v   []byte
	cas uint32
}

func newMemData() *memData { return &memData{m: map[string]memValue{}} }

func (d *memData) get(key string) ([]byte, uint32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.m[key]
	if !ok {
		return nil, 0, errNotFound
	}
	return append([]byte(nil), v.v...), v.cas, nil
}

func (d *memData) set(key string, value []byte, cas uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.m[key]; ok && cas != 0 && cas != v.cas {
		d.mismatches++
		return errCASMismatch
	}
	d.next++
	d.sets++
	d.m[key] = memValue{append([]byte(nil), value...), d.next}
	return nil
}

func mustConfig(t testing.TB, js string) *config {
	t.Helper()
	cfg, err := parseConfig([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const t0 = int64(1_767_225_600_000_000) // 2026-01-01T00:00:00Z in µs

// TestStoreMatchesCore: a sequence of decisions and settles on one key
// through shared data equals core.TakeAll and core.SettleAll on a state
// kept in memory, for every algorithm, several limits at once and sliding
// logs.
func TestStoreMatchesCore(t *testing.T) {
	for _, js := range []string{
		`[{"name":"f","strategy":"fixed","limit":5,"window":"1s"}]`,
		`[{"name":"s","strategy":"sliding","limit":5,"window":"1s"}]`,
		`[{"name":"l","strategy":"log","limit":7,"window":"1s"}]`,
		`[{"name":"t","strategy":"token","limit":5,"window":"1s","rate":3}]`,
		`[{"name":"k","strategy":"leaky","limit":5,"window":"1s"}]`,
		`[{"name":"g","strategy":"gcra","limit":3,"window":"1s","rate":2}]`,
		`[{"name":"m","limits":[{"strategy":"log","limit":4,"window":"500ms"},{"strategy":"gcra","limit":2,"window":"1s"},{"strategy":"log","limit":30,"window":"10s"}]}]`,
	} {
		cfg := mustConfig(t, `{"slots":4,"keys_per_slot":8,"rules":`+js+`}`)
		r := cfg.Rules[0]
		t.Run(r.Name, func(t *testing.T) {
			s := newStore(cfg, newMemData())
			if err := s.createSlots(); err != nil {
				t.Fatal(err)
			}
			n := len(r.Limits)
			want := make([]core.State, n)
			for i, l := range r.Limits {
				if l.Algorithm == core.SlidingLog {
					want[i].Log = make([]int64, 0, l.Limit)
				}
			}
			wd := make([]core.Decision, n)
			gd := make([]core.Decision, n)
			rnd := rand.New(rand.NewPCG(7, uint64(len(js))))
			now := t0
			for step := range 3000 {
				now += rnd.Int64N(120_000) - 5_000 // sometimes backwards
				cost := rnd.Int64N(3)
				var wi, gi int
				var werr, gerr error
				for i, l := range r.Limits {
					if l.Algorithm == core.SlidingLog && want[i].Log == nil { // a settle left nothing: no storage
						want[i].Log = make([]int64, 0, l.Limit)
					}
				}
				if rnd.IntN(5) == 0 { // a settle: debt or refund
					cost = rnd.Int64N(11) - 4
					wi, werr = core.SettleAll(r.Limits, want, now, cost, wd)
					gi, gerr = s.settle(r, "k", now, cost, nil, gd)
				} else {
					wi, werr = core.TakeAll(r.Limits, want, now, cost, wd)
					gi, gerr = s.take(r, "k", now, cost, gd)
				}
				if werr != nil || gerr != nil || wi != gi {
					t.Fatalf("step %d: index %d/%d, errors %v/%v", step, gi, wi, gerr, werr)
				}
				for i := range wd {
					if wd[i] != gd[i] {
						t.Fatalf("step %d limit %d: got %+v, want %+v", step, i, gd[i], wd[i])
					}
				}
			}
		})
	}
}

// TestStoreExact: VMs (one store each, as Envoy's workers) deciding the
// same keys concurrently on one shared-data map admit exactly the limit.
func TestStoreExact(t *testing.T) {
	cfg := mustConfig(t, `{"slots":2,"keys_per_slot":8,"rules":[
		{"name":"a","limits":[{"strategy":"fixed","limit":100,"window":"1h"},{"strategy":"log","limit":150,"window":"1h"}]},
		{"name":"b","strategy":"gcra","limit":70,"window":"1h","rate":1}]}`)
	sd := newMemData()
	const vms, keys, perVM = 8, 5, 300
	admitted := make([][keys]int64, len(cfg.Rules))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for vm := range vms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newStore(cfg, sd)
			if err := s.createSlots(); err != nil {
				t.Error(err)
				return
			}
			ds := make([]core.Decision, maxLimits)
			for i := range perVM {
				ri, k := (vm+i)%len(cfg.Rules), i%keys
				r := cfg.Rules[ri]
				idx, err := s.take(r, fmt.Sprint("key-", k), t0+int64(i), 1, ds[:len(r.Limits)])
				if err != nil {
					t.Error(err)
					return
				}
				if ds[idx].Allowed {
					mu.Lock()
					admitted[ri][k]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for k := range keys {
		if admitted[0][k] != 100 || admitted[1][k] != 70 {
			t.Errorf("key %d: admitted %d and %d, want 100 and 70", k, admitted[0][k], admitted[1][k])
		}
	}
	t.Logf("%d writes, %d cas mismatches retried", sd.sets, sd.mismatches)
	if sd.mismatches == 0 {
		t.Log("no cas mismatch happened (the scheduler ran the VMs one after another)")
	}
}

// TestStoreSlotReuse: a slot holds KeysPerSlot live keys; a key whose
// state is fully restored frees its place for another.
func TestStoreSlotReuse(t *testing.T) {
	cfg := mustConfig(t, `{"slots":1,"keys_per_slot":3,"rules":[{"name":"r","strategy":"fixed","limit":2,"window":"1s"}]}`)
	sd := newMemData()
	s := newStore(cfg, sd)
	if err := s.createSlots(); err != nil {
		t.Fatal(err)
	}
	r := cfg.Rules[0]
	ds := make([]core.Decision, 1)
	take := func(key string, now int64) error {
		_, err := s.take(r, key, now, 1, ds)
		return err
	}
	now := t0 + 100 // within the window [t0, t0+1s)
	for _, k := range []string{"a", "b", "c"} {
		if err := take(k, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := take("d", now); !errors.Is(err, errFull) {
		t.Fatalf("a 4th live key: %v, want errFull", err)
	}
	// A live key still decides, and a denial needs no room.
	if err := take("a", now); err != nil || !ds[0].Allowed {
		t.Fatalf("a again: %v %+v", err, ds[0])
	}
	if err := take("a", now); err != nil || ds[0].Allowed {
		t.Fatalf("a denied: %v %+v", err, ds[0])
	}
	// At the next window every key is restored: their places are free.
	now = t0 + 1_000_000
	for _, k := range []string{"d", "e", "f"} {
		if err := take(k, now); err != nil || !ds[0].Allowed {
			t.Fatalf("%s after the window: %v %+v", k, err, ds[0])
		}
	}
	val, _, _ := sd.get(s.slotKeys[r][0])
	if sl := mustParse(t, val); len(sl.recs) != 3 {
		t.Fatalf("%d records, want 3 (the expired ones dropped)", len(sl.recs))
	}
	if len(sd.m) != 1 {
		t.Fatalf("%d shared-data keys, want 1", len(sd.m))
	}
}

// mustParse parses a slot value the store wrote.
func mustParse(t testing.TB, v []byte) slot {
	t.Helper()
	sl, ok := parseSlot(v, nil)
	if !ok {
		t.Fatalf("the store wrote a slot value it cannot read: %x", v)
	}
	return sl
}

// TestStoreBadValues: a slot value the store cannot parse, or a state in
// it that core refuses, is a corrupt stored state (core.ErrState): every
// take on it fails, Internal by the one failure rule (refused, never
// admitted), and the value is left as it is. It used to read as an empty
// slot (a fresh quota for every key in it) and a corrupt state as a fresh
// one; anything that writes the vm_id's shared data could reset any key.
func TestStoreBadValues(t *testing.T) {
	cfg := mustConfig(t, `{"slots":1,"rules":[{"name":"r","strategy":"fixed","limit":2,"window":"1s"}]}`)
	r := cfg.Rules[0]
	ds := make([]core.Decision, 1)
	for name, val := range map[string][]byte{
		"garbage":       []byte("not a slot"),
		"other magic":   binary.LittleEndian.AppendUint64(make([]byte, 8), 0),
		"truncated":     binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, slotMagic), 1),
		"corrupt state": appendState((&slot{}).appendKept(nil, t0, nil, 1), digest("k"), 0, t0+1e6, []core.State{{Algorithm: core.FixedWindow, T: -5, X: 1}}),
	} {
		t.Run(name, func(t *testing.T) {
			sd := newMemData()
			sd.set("rl/v3/r/0", val, 0)
			s := newStore(cfg, sd)
			for i := range 3 {
				_, err := s.take(r, "k", t0, 1, ds)
				if !errors.Is(err, core.ErrState) || (*outage.Detector)(nil).Classify(0, err) != outage.Internal {
					t.Fatalf("take %d: %v %+v, want a corrupt state (Internal)", i, err, ds[0])
				}
			}
			if got, _, _ := sd.get("rl/v3/r/0"); string(got) != string(val) {
				t.Fatalf("the value was replaced: %x", got)
			}
		})
	}
	t.Run("missing slot", func(t *testing.T) {
		s := newStore(cfg, newMemData()) // createSlots not called
		if _, err := s.take(r, "k", t0, 1, ds); err != nil || !ds[0].Allowed {
			t.Fatalf("%v %+v", err, ds[0])
		}
	})
}

// TestStoreLimitsChanged: a key's states written under other limits (a
// different number of them) start fresh; the same number are read by core
// under the new parameters.
func TestStoreLimitsChanged(t *testing.T) {
	sd := newMemData()
	one := mustConfig(t, `{"slots":1,"rules":[{"name":"r","strategy":"fixed","limit":2,"window":"1m"}]}`)
	two := mustConfig(t, `{"slots":1,"rules":[{"name":"r","limits":[{"strategy":"fixed","limit":2,"window":"1m"},{"strategy":"gcra","limit":5,"window":"1s"}]}]}`)
	ds := make([]core.Decision, 2)
	s1 := newStore(one, sd)
	for range 2 {
		s1.take(one.Rules[0], "k", t0, 1, ds[:1])
	}
	if s1.take(one.Rules[0], "k", t0, 1, ds[:1]); ds[0].Allowed {
		t.Fatal("third admitted")
	}
	s2 := newStore(two, sd)
	if _, err := s2.take(two.Rules[0], "k", t0, 1, ds); err != nil || !ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("after the change: %v %+v", err, ds)
	}
}

func BenchmarkStoreTake(b *testing.B) {
	cfg := mustConfig(b, `{"rules":[{"name":"r","strategy":"token","limit":1000000,"window":"1s"}]}`)
	s := newStore(cfg, newMemData())
	s.createSlots()
	r := cfg.Rules[0]
	ds := make([]core.Decision, 1)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.take(r, keys[i%len(keys)], t0+int64(i), 1, ds); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// FuzzParseSlot: any shared-data value (another plugin on the same vm_id
// can write anything) parses without panicking, and a decision on it either
// succeeds or fails with a typed error; what the store writes parses back.
func FuzzParseSlot(f *testing.F) {
	good := appendState((&slot{}).appendKept(nil, t0, nil, 1), digest("k"), 0, t0+1e6, []core.State{{Algorithm: core.SlidingLog, Log: []int64{t0 - 5, t0}}})
	f.Add(good)
	f.Add(appendForward(appendState((&slot{}).appendKept(nil, t0, nil, 2), digest("j"), 7, t0+1e6, nil), digest("k"), 9, 1))
	f.Add(encodeEmpty())
	f.Add([]byte("junk"))
	cfg := mustConfig(f, `{"slots":1,"rules":[{"name":"r","limits":[{"strategy":"log","limit":3,"window":"1s"}]}]}`)
	r := cfg.Rules[0]
	f.Fuzz(func(t *testing.T, v []byte) {
		sl, _ := parseSlot(v, nil)
		for _, e := range sl.recs {
			if e.off < 16 || e.end > len(v) || e.off >= e.end || e.states < 0 || e.states > maxLimits || e.alt >= alternates {
				t.Fatalf("record %+v of %d bytes", e, len(v))
			}
		}
		sd := newMemData()
		sd.set("rl/v3/r/0", v, 0)
		s := newStore(cfg, sd)
		ds := make([]core.Decision, 1)
		_, err := s.take(r, "k", t0, 1, ds)
		switch {
		case errors.Is(err, errFull):
		case errors.Is(err, core.ErrState):
			if out, _, _ := sd.get("rl/v3/r/0"); string(out) != string(v) {
				t.Fatalf("a corrupt slot was written: %x", out)
			}
		case err != nil:
			t.Fatalf("take: %v", err)
		default:
			if out, _, _ := sd.get("rl/v3/r/0"); ds[0].Allowed {
				mustParse(t, out)
			}
		}
	})
}

// capacityPercent is the share of slots × keys_per_slot that random keys
// fill without a refusal, as README.md states it (keys_per_slot 4 and up).
const capacityPercent = 90

// randomKeys returns n distinct random keys, the same for a seed.
func randomKeys(seed uint64, n int) []string {
	rnd := rand.New(rand.NewPCG(seed, 1))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%016x%016x", rnd.Uint64(), rnd.Uint64())
	}
	return keys
}

// TestStoreCapacity: random keys, all live, fill capacityPercent of
// slots × keys_per_slot without one refusal; the first refusal after that
// is logged (the measured capacity). The placement of encoding 1 (one slot
// per key) refused its 5,844th key of the default 65,536.
func TestStoreCapacity(t *testing.T) {
	for _, tc := range []struct{ slots, perSlot int }{
		{defaultSlots, defaultKeysPerSlot}, {1024, 4}, {64, 4}, {2048, 8}, {256, 64},
	} {
		t.Run(fmt.Sprintf("slots=%d/keys_per_slot=%d", tc.slots, tc.perSlot), func(t *testing.T) {
			cfg := mustConfig(t, fmt.Sprintf(`{"slots":%d,"keys_per_slot":%d,"rules":[{"name":"r","strategy":"fixed","limit":5,"window":"1h"}]}`, tc.slots, tc.perSlot))
			s := newStore(cfg, newMemData())
			if err := s.createSlots(); err != nil {
				t.Fatal(err)
			}
			r := cfg.Rules[0]
			ds := make([]core.Decision, 1)
			capacity := tc.slots * tc.perSlot
			stated := capacity * capacityPercent / 100
			for i, k := range randomKeys(uint64(tc.slots), capacity) {
				_, err := s.take(r, k, t0+int64(i), 1, ds)
				if err == nil && !ds[0].Allowed {
					t.Fatalf("key %d denied", i)
				}
				if i < stated && err != nil {
					t.Fatalf("key %d of %d (%.1f%% of %d): %v", i+1, stated, 100*float64(i+1)/float64(capacity), capacity, err)
				}
				if err != nil {
					if !errors.Is(err, errFull) {
						t.Fatal(err)
					}
					t.Logf("first refusal: key %d, %.1f%% of %d", i+1, 100*float64(i+1)/float64(capacity), capacity)
					return
				}
			}
			t.Logf("no refusal up to %d keys (100%%)", capacity)
		})
	}
}

// hooked is shared data whose set runs before(key) first: a test's way
// to run another VM's decision at an exact point of one.
type hooked struct {
	*memData
	before func(key string)
}

func (h *hooked) set(key string, value []byte, cas uint32) error {
	if h.before != nil {
		h.before(key)
	}
	return h.memData.set(key, value, cas)
}

// keysWith returns n keys (of the form prefix-i) whose place satisfies ok.
func keysWith(t *testing.T, slots, n int, prefix string, ok func(place) bool) []string {
	t.Helper()
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if i > 1_000_000 {
			t.Fatal("no such keys")
		}
		k := fmt.Sprint(prefix, "-", i)
		if ok(placeOf(digest(k), slots)) {
			keys = append(keys, k)
		}
	}
	return keys
}

// records returns the state records of key in every slot of r, and its
// forwards.
func records(t *testing.T, s *store, r *rule, key string) (states, forwards int) {
	t.Helper()
	d := digest(key)
	for _, k := range s.slotKeys[r] {
		val, _, err := s.sd.get(k)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range mustParse(t, val).recs {
			if e.d != d {
				continue
			}
			if e.forward() {
				forwards++
			} else {
				states++
			}
		}
	}
	return states, forwards
}

// remaining takes key until it is denied and returns how many it admitted.
func remaining(t *testing.T, s *store, r *rule, key string, now int64) int {
	t.Helper()
	ds := make([]core.Decision, len(r.Limits))
	for n := 0; ; n++ {
		idx, err := s.take(r, key, now, 1, ds)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if !ds[idx].Allowed {
			return n
		}
	}
}

// TestStorePlaceRace: two VMs place one new key whose home is full at
// once: the first writes its state to an alternate, then, before it adds
// the forward, the second places the key (another alternate, its forward).
// The first's forward then fails, it takes its state back out and decides
// on the second's: one state, both admissions in it.
func TestStorePlaceRace(t *testing.T) {
	const slots = 16
	cfg := mustConfig(t, `{"slots":16,"keys_per_slot":1,"rules":[{"name":"r","strategy":"fixed","limit":5,"window":"1h"}]}`)
	r := cfg.Rules[0]
	key := "k"
	p := placeOf(digest(key), slots)
	blocker := keysWith(t, slots, 1, "b", func(q place) bool { return q.home == p.home })[0]
	sd := &hooked{memData: newMemData()}
	a, b := newStore(cfg, sd), newStore(cfg, sd)
	if err := a.createSlots(); err != nil {
		t.Fatal(err)
	}
	ds := make([]core.Decision, 1)
	if _, err := a.take(r, blocker, t0, 1, ds); err != nil || !ds[0].Allowed {
		t.Fatal(err, ds)
	}
	// b prefers another alternate than a: a's gets a key of its own once
	// a has written there.
	home := a.slotKeys[r][p.home]
	fired := false
	sd.before = func(k string) {
		if k != home || fired {
			return
		}
		fired = true
		bd := make([]core.Decision, 1)
		if _, err := b.take(r, key, t0, 1, bd); err != nil || !bd[0].Allowed {
			t.Errorf("b: %v %+v", err, bd)
		}
	}
	if _, err := a.take(r, key, t0, 1, ds); err != nil || !ds[0].Allowed {
		t.Fatal(err, ds)
	}
	if !fired {
		t.Fatal("a never wrote the home: the race did not happen")
	}
	sd.before = nil
	if st, fw := records(t, a, r, key); st != 1 || fw != 1 {
		t.Fatalf("%d states and %d forwards of the key, want 1 and 1", st, fw)
	}
	if n := remaining(t, a, r, key, t0); n != 3 {
		t.Fatalf("%d left of 5 after 2 admissions", n)
	}
}

// TestStoreMoveRace: a key at home is moved out to make room while
// another VM decides on it between the copy and the swap: the swap fails,
// the copy is taken out, and the key's state keeps that admission.
func TestStoreMoveRace(t *testing.T) {
	const slots = 16
	cfg := mustConfig(t, `{"slots":16,"keys_per_slot":1,"rules":[{"name":"r","strategy":"fixed","limit":3,"window":"1h"}]}`)
	r := cfg.Rules[0]
	key := "k"
	p := placeOf(digest(key), slots)
	cands := map[int]bool{p.home: true}
	for _, a := range p.alts {
		cands[a] = true
	}
	// v lives at home in k's home and has an alternate none of k's
	// slots; each of k's alternates holds a key at home there.
	v := keysWith(t, slots, 1, "v", func(q place) bool {
		return q.home == p.home && !cands[q.alts[0]]
	})[0]
	sd := &hooked{memData: newMemData()}
	a, b := newStore(cfg, sd), newStore(cfg, sd)
	if err := a.createSlots(); err != nil {
		t.Fatal(err)
	}
	ds := make([]core.Decision, 1)
	take := func(s *store, k string) {
		t.Helper()
		if _, err := s.take(r, k, t0, 1, ds); err != nil || !ds[0].Allowed {
			t.Fatalf("%s: %v %+v", k, err, ds)
		}
	}
	take(a, v)
	for i, alt := range p.alts {
		take(a, keysWith(t, slots, 1, fmt.Sprint("w", i), func(q place) bool { return q.home == alt })[0])
	}
	vp := placeOf(digest(v), slots)
	home := a.slotKeys[r][p.home]
	copied, fired := false, false
	sd.before = func(k string) {
		switch {
		case k == a.slotKeys[r][vp.alts[0]] && !copied:
			copied = true
		case k == home && copied && !fired:
			fired = true
			bd := make([]core.Decision, 1)
			if _, err := b.take(r, v, t0, 1, bd); err != nil || !bd[0].Allowed {
				t.Errorf("b: %v %+v", err, bd)
			}
		}
	}
	take(a, key)
	if !fired {
		t.Fatal("the move's swap never ran: the race did not happen")
	}
	sd.before = nil
	if st, _ := records(t, a, r, v); st != 1 {
		t.Fatalf("%d states of the moved key, want 1", st)
	}
	if n := remaining(t, a, r, v, t0); n != 1 {
		t.Fatalf("%d left of 3 after 2 admissions", n)
	}
}

// TestStoreDeadForward: a key placed in an alternate whose state came to
// rest and was dropped is decided afresh, its forward removed; and a home
// full of such forwards is swept for a new key.
func TestStoreDeadForward(t *testing.T) {
	const slots = 2 // a key's one alternate is the other slot
	cfg := mustConfig(t, `{"slots":2,"keys_per_slot":1,"rules":[{"name":"r","strategy":"fixed","limit":2,"window":"1s"}]}`)
	r := cfg.Rules[0]
	s := newStore(cfg, newMemData())
	if err := s.createSlots(); err != nil {
		t.Fatal(err)
	}
	keys := keysWith(t, slots, 3*maxHomeRecords(1), "k", func(q place) bool { return q.home == 0 })
	blocker, keys := keys[0], keys[1:]
	ds := make([]core.Decision, 1)
	for i, k := range keys {
		// Each second: the blocker fills slot 0; k goes to slot 1,
		// whose previous key is at rest (dropped) by now.
		now := t0 + int64(i)*1_000_000
		for _, key := range []string{blocker, k} {
			if _, err := s.take(r, key, now, 1, ds); err != nil || !ds[0].Allowed {
				t.Fatalf("second %d, %s: %v %+v", i, key, err, ds)
			}
		}
		if st, fw := records(t, s, r, k); st != 1 || fw != 1 {
			t.Fatalf("second %d: %d states, %d forwards", i, st, fw)
		}
		val, _, _ := s.sd.get(s.slotKeys[r][0])
		sl := mustParse(t, val)
		if _, homes := sl.count(now); homes > maxHomeRecords(1) {
			t.Fatalf("second %d: %d home records", i, homes)
		}
	}
	if t.Failed() {
		return
	}
	// keys[0]'s forward has been swept, keys[len-2]'s is dead: both
	// are decided afresh (keys[0] at home, the blocker being at rest,
	// keys[len-2] in slot 1 again).
	now := t0 + int64(len(keys)+1)*1_000_000
	for _, k := range []string{keys[0], keys[len(keys)-2]} {
		if n := remaining(t, s, r, k, now); n != 2 {
			t.Fatalf("%s: %d left, want 2 (fresh)", k, n)
		}
		if st, fw := records(t, s, r, k); st != 1 || fw > 1 {
			t.Fatalf("%s: %d states, %d forwards", k, st, fw)
		}
	}
}

// TestStorePlacementExact: VMs deciding keys concurrently on slots too
// small for them at home (keys in alternates, moves) admit exactly each
// limit, and every key has one state.
func TestStorePlacementExact(t *testing.T) {
	cfg := mustConfig(t, `{"slots":8,"keys_per_slot":2,"rules":[{"name":"r","strategy":"fixed","limit":40,"window":"1h"}]}`)
	r := cfg.Rules[0]
	sd := newMemData()
	keys := randomKeys(3, 12) // 75% of 16
	const vms, perVM = 8, 150
	// The slots exist before the VMs decide, as when Envoy's workers have
	// started: creation is the one unconditional write (README, "Creating
	// slots"), and a VM creating a slot while another already decides on
	// it is the start-up window this test is not about.
	if err := newStore(cfg, sd).createSlots(); err != nil {
		t.Fatal(err)
	}
	admitted := make([]int, len(keys))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for vm := range vms {
		wg.Go(func() {
			s := newStore(cfg, sd)
			if err := s.createSlots(); err != nil {
				t.Error(err)
				return
			}
			ds := make([]core.Decision, 1)
			for i := range perVM {
				k := (vm*5 + i) % len(keys)
				if _, err := s.take(r, keys[k], t0+int64(i), 1, ds); err != nil {
					t.Error(err)
					return
				}
				if ds[0].Allowed {
					mu.Lock()
					admitted[k]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	s := newStore(cfg, sd)
	for k, n := range admitted {
		if n != 40 {
			t.Errorf("key %d: admitted %d, want 40", k, n)
		}
		if st, _ := records(t, s, r, keys[k]); st != 1 {
			t.Errorf("key %d: %d states", k, st)
		}
	}
	away := 0
	for _, k := range keys {
		if _, fw := records(t, s, r, k); fw == 1 {
			away++
		}
	}
	t.Logf("%d of %d keys in an alternate; %d writes, %d cas mismatches retried", away, len(keys), sd.sets, sd.mismatches)
	if away == 0 {
		t.Error("every key at home: the test did not exercise placement")
	}
}
