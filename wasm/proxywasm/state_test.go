package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/rlcore/rl/core"
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

// TestStoreMatchesCore: a sequence of decisions on one key through shared
// data equals core.TakeAll on a state kept in memory, for every algorithm,
// several limits at once and sliding logs.
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
				wi, werr := core.TakeAll(r.Limits, want, now, cost, wd)
				gi, gerr := s.take(r, "k", now, cost, gd)
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
	if sl := parseSlot(val, nil); len(sl.entries) != 3 {
		t.Fatalf("%d entries, want 3 (the expired ones dropped)", len(sl.entries))
	}
	if len(sd.m) != 1 {
		t.Fatalf("%d shared-data keys, want 1", len(sd.m))
	}
}

// TestStoreBadValues: a slot value the store cannot parse, or a corrupt
// state in it, is replaced, never a permanent failure.
func TestStoreBadValues(t *testing.T) {
	cfg := mustConfig(t, `{"slots":1,"rules":[{"name":"r","strategy":"fixed","limit":2,"window":"1s"}]}`)
	r := cfg.Rules[0]
	ds := make([]core.Decision, 1)
	for name, val := range map[string][]byte{
		"garbage":     []byte("not a slot"),
		"other magic": binary.LittleEndian.AppendUint64(make([]byte, 8), 0),
		"truncated":   binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, slotMagic), 1),
	} {
		t.Run(name, func(t *testing.T) {
			sd := newMemData()
			sd.set("rl/v1/r/0", val, 0)
			s := newStore(cfg, sd)
			for i, want := range []bool{true, true, false} {
				if _, err := s.take(r, "k", t0, 1, ds); err != nil || ds[0].Allowed != want {
					t.Fatalf("take %d: %v %+v", i, err, ds[0])
				}
			}
		})
	}
	t.Run("corrupt state", func(t *testing.T) {
		sd := newMemData()
		s := newStore(cfg, sd)
		d, _ := digest("k", 1)
		sl := slot{}
		b, _ := sl.encode(nil, -1, d, t0+1e6, []core.State{{Algorithm: core.FixedWindow, T: -5, X: 1}}, t0, 4)
		sd.set("rl/v1/r/0", b, 0)
		if _, err := s.take(r, "k", t0, 1, ds); err != nil || !ds[0].Allowed || ds[0].Remaining != 1 {
			t.Fatalf("%v %+v, want admitted afresh", err, ds[0])
		}
	})
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
	d, _ := digest("k", 1)
	sl := slot{}
	good, _ := sl.encode(nil, -1, d, t0+1e6, []core.State{{Algorithm: core.SlidingLog, Log: []int64{t0 - 5, t0}}}, t0, 4)
	f.Add(good)
	f.Add(encodeEmpty())
	f.Add([]byte("junk"))
	cfg := mustConfig(f, `{"slots":1,"rules":[{"name":"r","limits":[{"strategy":"log","limit":3,"window":"1s"}]}]}`)
	r := cfg.Rules[0]
	f.Fuzz(func(t *testing.T, v []byte) {
		sl := parseSlot(v, nil)
		for _, e := range sl.entries {
			if e.off < 16 || e.end > len(v) || e.off >= e.end || e.states < 0 || e.states > maxLimits {
				t.Fatalf("entry %+v of %d bytes", e, len(v))
			}
		}
		sd := newMemData()
		sd.set("rl/v1/r/0", v, 0)
		s := newStore(cfg, sd)
		ds := make([]core.Decision, 1)
		if _, err := s.take(r, "k", t0, 1, ds); err != nil && !errors.Is(err, errFull) {
			t.Fatalf("take: %v", err)
		}
		if out, _, _ := sd.get("rl/v1/r/0"); len(parseSlot(out, nil).entries) == 0 && ds[0].Allowed {
			t.Fatalf("an admission wrote a slot that does not parse: %x", out)
		}
	})
}
