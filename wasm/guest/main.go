//go:build wasip1

// Command guest is the rate-limiting core (package core) compiled to a
// WebAssembly WASI reactor: wasm/rl.wasm. It is a thin export layer over
// core.Take, core.Peek, core.TakeAll and core.PeekAll and decides nothing
// itself. The interface it exports is documented in wasm/ABI.md, the one
// place that defines it; the constants below must match that file.
//
// Build it with wasm/build.sh, never by hand: the committed rl.wasm must be
// reproducible byte for byte.
//
// The guest reads no clock (now is an argument), performs no I/O and
// allocates nothing per call: every call decodes its input from the static
// buffer returned by rl_buffer into static arrays, calls core, and encodes
// the outcome back into the same buffer.
package main

import (
	"unsafe"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/wasm/internal/abi"
)

// ABI constants (wasm/ABI.md, "Constants"), shared with the host through
// wasm/internal/abi.
const (
	abiVersion = abi.Version

	maxLimits = abi.MaxLimits // slots in the buffer
	logSlots  = abi.LogSlots  // log entries per slot: core.MaxLogLimit + 1

	headerWords   = abi.HeaderWords
	slotHeadWords = abi.SlotHeadWords
	slotWords     = abi.SlotWords
	bufWords      = abi.BufWords
)

// Header words.
const (
	hStatus  = abi.HStatus
	hIndex   = abi.HIndex
	hWritten = abi.HWritten
)

// Slot words.
const (
	wLimitAlgorithm = abi.WLimitAlgorithm
	wLimitLimit     = abi.WLimitLimit
	wLimitWindow    = abi.WLimitWindow
	wLimitRate      = abi.WLimitRate
	wStateAlgorithm = abi.WStateAlgorithm
	wStateT         = abi.WStateT
	wStateX         = abi.WStateX
	wStateY         = abi.WStateY
	wStateLogLen    = abi.WStateLogLen
	wStateLogCap    = abi.WStateLogCap
	wDecided        = abi.WDecided
	wAllowed        = abi.WAllowed
	wDecLimit       = abi.WDecLimit
	wRemaining      = abi.WRemaining
	wResetAfter     = abi.WResetAfter
	wRetryAfter     = abi.WRetryAfter
	wDelay          = abi.WDelay
	wNextAfter      = abi.WNextAfter
	wStateL         = abi.WStateL
	wStateW         = abi.WStateW
	wStateR         = abi.WStateR
)

// ABI-level status codes (core.Error values are 1..10).
const (
	statusTooManyLimits = abi.StatusTooManyLimits
	statusBadLog        = abi.StatusBadLog
)

var (
	// buf is the shared buffer: the host writes the input here and reads
	// the outcome from here. An int64 array, so it is 8-byte aligned; wasm
	// is little-endian, so word k is bytes 8k..8k+7 little-endian.
	buf [bufWords]int64

	ls [maxLimits]core.Limit
	ss [maxLimits]core.State
	ds [maxLimits]core.Decision
)

func main() {}

//go:wasmexport abi_version
func exportABIVersion() int32 { return abiVersion }

//go:wasmexport rl_buffer
func exportBuffer() uint32 { return uint32(uintptr(unsafe.Pointer(&buf[0]))) }

//go:wasmexport rl_buffer_size
func exportBufferSize() uint32 { return uint32(unsafe.Sizeof(buf)) }

//go:wasmexport rl_max_limits
func exportMaxLimits() int32 { return maxLimits }

//go:wasmexport rl_log_slots
func exportLogSlots() int32 { return logSlots }

//go:wasmexport rl_take
func exportTake(now, cost int64) int32 { return single(now, cost, true) }

//go:wasmexport rl_peek
func exportPeek(now, cost int64) int32 { return single(now, cost, false) }

//go:wasmexport rl_take_all
func exportTakeAll(n int32, now, cost int64) int32 { return multi(n, now, cost, true) }

//go:wasmexport rl_peek_all
func exportPeekAll(n int32, now, cost int64) int32 { return multi(n, now, cost, false) }

//go:wasmexport rl_settle_all
func exportSettleAll(n int32, now, delta int64) int32 { return settle(n, now, delta) }

// slot returns the words of slot i.
func slot(i int) *[slotWords]int64 {
	off := headerWords + i*slotWords
	return (*[slotWords]int64)(buf[off : off+slotWords])
}

// algorithm reads an algorithm word. A value outside int32 is read as -1,
// an unknown algorithm, so it fails exactly like any other unknown one
// (ErrAlgorithm for a limit, ErrState for a state).
func algorithm(v int64) core.Algorithm {
	if v != int64(int32(v)) {
		return -1
	}
	return core.Algorithm(v)
}

// load decodes slots [0, n) into ls and ss. It returns an ABI status and the
// offending slot, or 0. Fields are assigned one by one: Go's wasm backend
// turns a whole-struct assignment into memory.copy, which costs far more.
func load(n int) (int32, int) {
	for i := 0; i < n; i++ {
		w := slot(i)
		ln, cp := w[wStateLogLen], w[wStateLogCap]
		if ln < 0 || cp < ln || cp > logSlots {
			return statusBadLog, i
		}
		l := &ls[i]
		l.Algorithm = algorithm(w[wLimitAlgorithm])
		l.Limit = w[wLimitLimit]
		l.Window = w[wLimitWindow]
		l.Rate = w[wLimitRate]
		s := &ss[i]
		s.Algorithm = algorithm(w[wStateAlgorithm])
		s.T = w[wStateT]
		s.X = w[wStateX]
		s.Y = w[wStateY]
		s.L = w[wStateL]
		s.W = w[wStateW]
		s.R = w[wStateR]
		// The log lives in the slot: core writes new entries in place.
		s.Log = w[slotHeadWords : slotHeadWords+int(ln) : slotHeadWords+int(cp)]
	}
	return 0, 0
}

// unset marks a decision core has not written: core writes the limit's
// Limit (≥ 1) or a zero Decision, never a negative Limit.
const unset = -1

func storeDecision(w *[slotWords]int64, d *core.Decision) {
	allowed := int64(0)
	if d.Allowed {
		allowed = 1
	}
	w[wDecided] = 1
	w[wAllowed] = allowed
	w[wDecLimit] = d.Limit
	w[wRemaining] = d.Remaining
	w[wResetAfter] = d.ResetAfter
	w[wRetryAfter] = d.RetryAfter
	w[wDelay] = d.Delay
	w[wNextAfter] = d.NextAfter
}

// storeState writes a new state into slot words w. Its log entries are
// already in place: core wrote them into the slot's log region, the backing
// array of the state it was given.
func storeState(w *[slotWords]int64, s *core.State) {
	w[wStateAlgorithm] = int64(s.Algorithm)
	w[wStateT] = s.T
	w[wStateX] = s.X
	w[wStateY] = s.Y
	w[wStateL] = s.L
	w[wStateW] = s.W
	w[wStateR] = s.R
	w[wStateLogLen] = int64(len(s.Log))
}

func header(status int32, index int, written bool) int32 {
	buf[hStatus] = int64(status)
	buf[hIndex] = int64(index)
	buf[hWritten] = 0
	if written {
		buf[hWritten] = 1
	}
	return status
}

// code returns the status code of a core error.
func code(err error) int32 {
	if err == nil {
		return 0
	}
	return int32(err.(core.Error))
}

func single(now, cost int64, take bool) int32 {
	if st, i := load(1); st != 0 {
		return header(st, i, false)
	}
	w := slot(0)
	if !take {
		d, err := core.Peek(ls[0], ss[0], now, cost)
		storeDecision(w, &d)
		return header(code(err), 0, false)
	}
	d, n, err := core.Take(ls[0], ss[0], now, cost)
	storeDecision(w, &d)
	// core.Take returns the state unchanged unless it admitted a positive
	// cost.
	written := err == nil && d.Allowed && cost > 0
	if written {
		storeState(w, &n)
	}
	return header(code(err), 0, written)
}

// settle is core.SettleAll on slots [0, n): every state is replaced unless
// it fails (or delta is 0, which changes nothing).
func settle(n32 int32, now, delta int64) int32 {
	if n32 < 0 || n32 > maxLimits {
		return header(statusTooManyLimits, 0, false)
	}
	n := int(n32)
	if st, i := load(n); st != 0 {
		return header(st, i, false)
	}
	for i := 0; i < n; i++ {
		ds[i].Limit = unset
	}
	index, err := core.SettleAll(ls[:n], ss[:n], now, delta, ds[:n])
	return finish(n, index, err, err == nil && delta != 0)
}

// finish writes a multi-limit call's outcome: the decisions core wrote
// (marked unset before the call), the new states if written, the header.
func finish(n, index int, err error, written bool) int32 {
	for i := 0; i < n; i++ {
		if ds[i].Limit == unset {
			slot(i)[wDecided] = 0
		} else {
			storeDecision(slot(i), &ds[i])
		}
	}
	if written {
		for i := 0; i < n; i++ {
			storeState(slot(i), &ss[i])
		}
	}
	return header(code(err), index, written)
}

func multi(n32 int32, now, cost int64, take bool) int32 {
	if n32 < 0 || n32 > maxLimits {
		return header(statusTooManyLimits, 0, false)
	}
	n := int(n32)
	if st, i := load(n); st != 0 {
		return header(st, i, false)
	}
	// Mark the decisions so that those core writes, on success or on
	// error (where it may have written some), can be told from the rest.
	for i := 0; i < n; i++ {
		ds[i].Limit = unset
	}
	var (
		index int
		err   error
	)
	if take {
		index, err = core.TakeAll(ls[:n], ss[:n], now, cost, ds[:n])
	} else {
		index, err = core.PeekAll(ls[:n], ss[:n], now, cost, ds[:n])
	}
	// core.TakeAll replaces the states only when every limit admitted a
	// positive cost; otherwise they are untouched.
	return finish(n, index, err, take && err == nil && ds[index].Allowed && cost > 0)
}
