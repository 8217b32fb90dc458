package wasm

import (
	_ "embed"
	"errors"
)

// The module is built by build.sh (Go version pinned in go.version; run
// "wasm/build.sh -check" to verify the committed file), equivalent to:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -buildvcs=false -ldflags="-s -w -buildid=" -o wasm/rl.wasm ./wasm/guest
//
//go:generate ./build.sh
//go:embed rl.wasm
var module []byte

// Module returns a copy of the embedded WebAssembly module, rl.wasm, for
// hosting it elsewhere (see ABI.md).
func Module() []byte {
	return append([]byte(nil), module...)
}

// ABIVersion is the version of the interface described in ABI.md that this
// package speaks. New refuses a module whose abi_version export returns
// anything else.
const ABIVersion = 1

// MaxLimits is the most limits one call can decide: the module's buffer has
// this many slots. TakeAll and PeekAll return ErrTooManyLimits beyond it.
const MaxLimits = 16

// Layout of the module's buffer (ABI.md, "Buffer layout").
const (
	logSlots      = 4097 // log entries per slot: core.MaxLogLimit + 1
	headerBytes   = 64
	slotHeadBytes = 144
	slotBytes     = slotHeadBytes + 8*logSlots
	bufferBytes   = headerBytes + MaxLimits*slotBytes

	// Header offsets.
	hStatus  = 0
	hIndex   = 8
	hWritten = 16

	// Slot offsets.
	oLimitAlgorithm = 0
	oLimitLimit     = 8
	oLimitWindow    = 16
	oLimitRate      = 24
	oStateAlgorithm = 32
	oStateT         = 40
	oStateX         = 48
	oStateY         = 56
	oStateLogLen    = 64
	oStateLogCap    = 72
	oDecided        = 80
	oAllowed        = 88
	oDecLimit       = 96
	oRemaining      = 104
	oResetAfter     = 112
	oRetryAfter     = 120
	oDelay          = 128
	oLog            = slotHeadBytes

	// ABI status codes beyond core.Error's 1..10.
	statusTooManyLimits = 100
	statusBadLog        = 101
)

// Errors of the host. Decision errors are core.Error values, identical to
// the native core's.
var (
	// ErrClosed is returned by every call on a Pool after Close.
	ErrClosed = errors.New("rl/wasm: pool closed")
	// ErrABIVersion is returned by New when the module is not one this
	// package can host: its abi_version differs from ABIVersion, it lacks
	// an export, or its buffer does not have the documented layout.
	ErrABIVersion = errors.New("rl/wasm: module ABI version mismatch")
	// ErrTrap is matched (errors.Is) by the error of a call during which
	// the module trapped. The instance is discarded, never reused; the pool
	// keeps serving with fresh instances. It never happens with the
	// embedded module unless the host itself is broken.
	ErrTrap = errors.New("rl/wasm: module trapped")
	// ErrTooManyLimits is returned by TakeAll and PeekAll for more than
	// MaxLimits limits.
	ErrTooManyLimits = errors.New("rl/wasm: more limits than the module's buffer holds")
)
