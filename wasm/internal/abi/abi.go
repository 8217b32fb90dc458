// Package abi holds the constants of the WebAssembly module's ABI
// (wasm/ABI.md) in one place, for the guest (wasm/guest) that exports it and
// the host (package wasm) that calls it. The buffer is an array of int64
// words; a word index times 8 is its byte offset.
package abi

import "github.com/rlcore/rl/core"

// Version is the module's abi_version.
const Version = 2

// Buffer shape.
const (
	MaxLimits     = core.MaxLimits           // slots in the buffer
	LogSlots      = 4097                     // log entries per slot: core.MaxLogLimit + 1
	HeaderWords   = 8                        // status, index, written, reserved
	SlotHeadWords = 21                       // limit, state, decision, the state's parameters
	SlotWords     = SlotHeadWords + LogSlots // + log entries
	BufWords      = HeaderWords + MaxLimits*SlotWords
)

// Header words.
const (
	HStatus  = 0
	HIndex   = 1
	HWritten = 2
)

// Slot words.
const (
	WLimitAlgorithm = 0
	WLimitLimit     = 1
	WLimitWindow    = 2
	WLimitRate      = 3
	WStateAlgorithm = 4
	WStateT         = 5
	WStateX         = 6
	WStateY         = 7
	WStateLogLen    = 8
	WStateLogCap    = 9
	WDecided        = 10
	WAllowed        = 11
	WDecLimit       = 12
	WRemaining      = 13
	WResetAfter     = 14
	WRetryAfter     = 15
	WDelay          = 16
	// WNextAfter was reserved (0) until the module reported it; a
	// version-1 host may ignore it.
	WNextAfter = 17
	// The state's recorded parameters (core.State L, W, R), from version 2.
	WStateL = 18
	WStateW = 19
	WStateR = 20
	WLog    = SlotHeadWords
)

// Status codes beyond core.Error's values.
const (
	StatusTooManyLimits = 100
	StatusBadLog        = 101
)

// LogSlots must be core.MaxLogLimit + 1 (a compile error otherwise).
var _ = [1]int{}[LogSlots-1-core.MaxLogLimit]
