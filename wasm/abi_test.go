package wasm_test

import (
	"context"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/wasm"
)

// TestABI hosts rl.wasm with plain wazero and the numbers of ABI.md, not the
// host package, to check the document: instantiation, constants, layout,
// status codes and the edge cases of the buffer. It uses wazero's
// interpreter, so the module is also shown to run where wazero cannot
// compile (and the test needs no compilation).
func TestABI(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	mod, err := rt.InstantiateWithConfig(ctx, wasm.Module(),
		wazero.NewModuleConfig().WithStartFunctions("_initialize"))
	if err != nil {
		t.Fatal(err)
	}
	call := func(name string, args ...uint64) uint64 {
		t.Helper()
		r, err := mod.ExportedFunction(name).Call(ctx, args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(r) == 0 {
			return 0
		}
		return r[0]
	}
	// ABI.md, "Constants".
	for name, want := range map[string]uint64{
		"abi_version": 2, "rl_buffer_size": 527168, "rl_max_limits": 16, "rl_log_slots": 4097,
	} {
		if got := call(name); uint32(got) != uint32(want) {
			t.Fatalf("%s = %d, want %d", name, got, want)
		}
	}
	buf := uint32(call("rl_buffer"))
	if buf%8 != 0 {
		t.Fatalf("rl_buffer %d is not 8-byte aligned", buf)
	}
	mem := mod.ExportedMemory("memory")
	const slotBytes = 168 + 8*4097
	word := func(off uint32) int64 {
		v, ok := mem.ReadUint64Le(buf + off)
		if !ok {
			t.Fatalf("read at %d", off)
		}
		return int64(v)
	}
	set := func(off uint32, v int64) { mem.WriteUint64Le(buf+off, uint64(v)) }
	slot := func(i int) uint32 { return 64 + uint32(i)*slotBytes }
	put := func(i int, lim [4]int64, st [6]int64, log ...int64) {
		for k, v := range lim {
			set(slot(i)+8*uint32(k), v)
		}
		for k, v := range st {
			set(slot(i)+32+8*uint32(k), v)
		}
		for k := range 3 { // state.l, w, r: a legacy or fresh state
			set(slot(i)+144+8*uint32(k), 0)
		}
		for k, v := range log {
			set(slot(i)+168+8*uint32(k), v)
		}
	}
	const now = 1767225600000000
	tb := [4]int64{4, 10, 1_000_000, 0}
	freshSt := [6]int64{0, 0, 0, 0, 0, 0}
	status := func(fn string, args ...uint64) int64 {
		t.Helper()
		st := int32(call(fn, args...))
		if int64(st) != word(0) {
			t.Fatalf("%s returned %d, header status %d", fn, st, word(0))
		}
		return int64(st)
	}

	// A take: decision, written flag, new state.
	put(0, tb, freshSt)
	if st := status("rl_take_all", 1, now, 3); st != 0 || word(8) != 0 || word(16) != 1 {
		t.Fatalf("take: status %d index %d written %d", st, word(8), word(16))
	}
	if d := [7]int64{word(slot(0) + 80), word(slot(0) + 88), word(slot(0) + 96), word(slot(0) + 104), word(slot(0) + 112), word(slot(0) + 120), word(slot(0) + 128)}; d != [7]int64{1, 1, 10, 7, 300000, 0, 0} {
		t.Fatalf("decision words %v", d)
	}
	if s := [5]int64{word(slot(0) + 32), word(slot(0) + 40), word(slot(0) + 48), word(slot(0) + 56), word(slot(0) + 64)}; s != [5]int64{4, now, 3_000_000, 0, 0} {
		t.Fatalf("state words %v", s)
	}
	if p := [3]int64{word(slot(0) + 144), word(slot(0) + 152), word(slot(0) + 160)}; p != [3]int64{10, 1_000_000, 10} {
		t.Fatalf("state parameter words %v", p)
	}
	// A peek writes no state.
	put(0, tb, freshSt)
	if st := status("rl_peek", now, 3); st != 0 || word(16) != 0 || word(slot(0)+80) != 1 || word(slot(0)+104) != 7 {
		t.Fatalf("peek: status %d written %d", st, word(16))
	}
	// A sliding log: entries in place, log_len out.
	put(0, [4]int64{3, 5, 1000, 0}, [6]int64{3, 0, 0, 0, 2, 4097}, now-2000, now-10)
	if st := status("rl_take", now, 2); st != 0 || word(16) != 1 || word(slot(0)+64) != 3 ||
		word(slot(0)+168) != now-10 || word(slot(0)+176) != now || word(slot(0)+184) != now {
		t.Fatalf("sliding log: status %d written %d len %d entries %d %d %d", st, word(16), word(slot(0)+64),
			word(slot(0)+168), word(slot(0)+176), word(slot(0)+184))
	}
	// Too little capacity: ErrLogCapacity.
	put(0, [4]int64{3, 5, 1000, 0}, [6]int64{3, 0, 0, 0, 2, 3}, now-10, now-5)
	if st := status("rl_take_all", 1, now, 2); st != int64(core.ErrLogCapacity) {
		t.Fatalf("capacity: status %d", st)
	}

	// ABI-level statuses.
	if st := status("rl_take_all", 17, now, 1); st != 100 {
		t.Fatalf("17 limits: status %d, want 100", st)
	}
	if st := status("rl_peek_all", uint64(0xffffffff), now, 1); st != 100 {
		t.Fatalf("-1 limits: status %d, want 100", st)
	}
	for _, lc := range [][2]int64{{5, 3}, {-1, 0}, {0, 4098}, {4098, 4098}} {
		put(0, tb, freshSt)
		put(1, tb, [6]int64{0, 0, 0, 0, lc[0], lc[1]})
		if st := status("rl_take_all", 2, now, 1); st != 101 || word(8) != 1 {
			t.Fatalf("log len/cap %v: status %d index %d, want 101 at 1", lc, st, word(8))
		}
	}
	// No limits: core's ErrLimits.
	if st := status("rl_take_all", 0, now, 1); st != int64(core.ErrLimits) {
		t.Fatalf("0 limits: status %d", st)
	}
	// Algorithm words outside int32 are unknown algorithms.
	put(0, [4]int64{1<<32 + 4, 10, 1_000_000, 0}, freshSt)
	if st := status("rl_take", now, 1); st != int64(core.ErrAlgorithm) {
		t.Fatalf("limit algorithm 2^32+4: status %d", st)
	}
	put(0, tb, [6]int64{1<<32 + 4, 0, 0, 0, 0, 0})
	if st := status("rl_take", now, 1); st != int64(core.ErrState) {
		t.Fatalf("state algorithm 2^32+4: status %d", st)
	}
	// A sliding log longer than 4096 (log_len 4097) is corrupt.
	put(0, [4]int64{3, 5, 1000, 0}, [6]int64{3, 0, 0, 0, 4097, 4097})
	if st := status("rl_take", now, 1); st != int64(core.ErrState) {
		t.Fatalf("log_len 4097: status %d", st)
	}
	// An error on the second limit: index 1, the first decided, the second
	// not; no state written.
	put(0, tb, freshSt)
	put(1, [4]int64{1, 10, 0, 0}, freshSt) // window 0
	set(slot(1)+80, 99)
	if st := status("rl_take_all", 2, now, 1); st != int64(core.ErrWindow) || word(8) != 1 ||
		word(slot(0)+80) != 1 || word(slot(1)+80) != 0 || word(16) != 0 {
		t.Fatalf("error on limit 1: status %d index %d decided %d %d written %d", st, word(8),
			word(slot(0)+80), word(slot(1)+80), word(16))
	}
	// The memory is exported under the name ABI.md gives, and the
	// functions have the documented types.
	types := map[string]string{
		"abi_version": "->i32", "rl_buffer": "->i32", "rl_buffer_size": "->i32",
		"rl_max_limits": "->i32", "rl_log_slots": "->i32", "_initialize": "->",
		"rl_take": "i64i64->i32", "rl_peek": "i64i64->i32",
		"rl_take_all": "i32i64i64->i32", "rl_peek_all": "i32i64i64->i32", "rl_settle_all": "i32i64i64->i32",
	}
	for name, want := range types {
		f := mod.ExportedFunction(name)
		if f == nil {
			t.Fatalf("no export %s", name)
		}
		sig := ""
		for _, p := range f.Definition().ParamTypes() {
			sig += api.ValueTypeName(p)
		}
		sig += "->"
		for _, r := range f.Definition().ResultTypes() {
			sig += api.ValueTypeName(r)
		}
		if sig != want {
			t.Fatalf("%s: %s, want %s", name, sig, want)
		}
	}
	if got := len(mod.ExportedFunctionDefinitions()); got != len(types) {
		t.Fatalf("%d exported functions, ABI.md lists %d", got, len(types))
	}
}
