package wasm_test

import (
	"encoding/binary"
	"slices"

	"github.com/rlcore/rl/wasm"
)

// fake describes a hand-assembled stand-in for rl.wasm: it has the exports
// ABI.md lists and decides nothing (every call returns status 0 and leaves
// the buffer as it is, so no decision or state is reported written), which
// makes it a probe for the host's own costs, and it traps on demand.
type fake struct {
	abi        int32  // abi_version's result
	bufferSize int32  // rl_buffer_size's result
	trapCost   int64  // a call with this cost executes unreachable
	omit       string // an export left out
}

func defaultFake() fake {
	return fake{abi: wasm.ABIVersion, bufferSize: 527168, trapCost: 666}
}

// module assembles the WebAssembly binary.
func (f fake) module() []byte {
	const (
		i32, i64 = 0x7f, 0x7e
		bufAddr  = 1024
	)
	types := [][]byte{
		{0x60, 0, 0},                     // 0: () -> ()
		{0x60, 0, 1, i32},                // 1: () -> i32
		{0x60, 2, i64, i64, 1, i32},      // 2: (now, cost i64) -> i32
		{0x60, 3, i32, i64, i64, 1, i32}, // 3: (n i32, now, cost i64) -> i32
	}
	constBody := func(v int32) []byte { return slices.Concat([]byte{0, 0x41}, sleb(int64(v)), []byte{0x0b}) }
	// if (local cost == trapCost) unreachable; return 0
	callBody := func(costLocal byte) []byte {
		return slices.Concat([]byte{0, 0x20, costLocal, 0x42}, sleb(f.trapCost),
			[]byte{0x51, 0x04, 0x40, 0x00, 0x0b, 0x41, 0, 0x0b})
	}
	funcs := []struct {
		name string
		typ  byte
		body []byte
	}{
		{"_initialize", 0, []byte{0, 0x0b}},
		{"abi_version", 1, constBody(f.abi)},
		{"rl_buffer", 1, constBody(bufAddr)},
		{"rl_buffer_size", 1, constBody(f.bufferSize)},
		{"rl_max_limits", 1, constBody(wasm.MaxLimits)},
		{"rl_log_slots", 1, constBody(4097)},
		{"rl_take", 2, callBody(1)},
		{"rl_peek", 2, callBody(1)},
		{"rl_take_all", 3, callBody(2)},
		{"rl_peek_all", 3, callBody(2)},
		{"rl_settle_all", 3, callBody(2)},
	}
	vec := func(items ...[]byte) []byte {
		return slices.Concat(append([][]byte{uleb(uint64(len(items)))}, items...)...)
	}
	section := func(id byte, body []byte) []byte {
		return slices.Concat([]byte{id}, uleb(uint64(len(body))), body)
	}
	str := func(s string) []byte { return slices.Concat(uleb(uint64(len(s))), []byte(s)) }

	var fsec, csec, esec [][]byte
	for i, fn := range funcs {
		fsec = append(fsec, []byte{fn.typ})
		csec = append(csec, slices.Concat(uleb(uint64(len(fn.body))), fn.body))
		if fn.name != f.omit {
			esec = append(esec, slices.Concat(str(fn.name), []byte{0}, uleb(uint64(i))))
		}
	}
	if f.omit != "memory" {
		esec = append(esec, slices.Concat(str("memory"), []byte{2, 0}))
	}
	pages := (bufAddr + 527168 + 65535) / 65536
	return slices.Concat(
		[]byte("\x00asm\x01\x00\x00\x00"),
		section(1, vec(types...)),
		section(3, vec(fsec...)),
		section(5, vec(slices.Concat([]byte{0}, uleb(uint64(pages))))),
		section(7, vec(esec...)),
		section(10, vec(csec...)),
	)
}

func uleb(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func sleb(v int64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}
