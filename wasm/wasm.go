package wasm

import (
	_ "embed"
	"errors"

	"github.com/rlcore/rl/wasm/internal/abi"
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
const ABIVersion = abi.Version

// MaxLimits is the most limits one call can decide: the module's buffer has
// this many slots. TakeAll and PeekAll return ErrTooManyLimits beyond it.
const MaxLimits = abi.MaxLimits

// Layout of the module's buffer in bytes (ABI.md, "Buffer layout"), from
// the word layout the guest shares (wasm/internal/abi).
const (
	logSlots      = abi.LogSlots
	headerBytes   = 8 * abi.HeaderWords
	slotHeadBytes = 8 * abi.SlotHeadWords
	slotBytes     = 8 * abi.SlotWords
	bufferBytes   = 8 * abi.BufWords

	// Header offsets.
	hStatus  = 8 * abi.HStatus
	hIndex   = 8 * abi.HIndex
	hWritten = 8 * abi.HWritten

	// Slot offsets.
	oLimitAlgorithm = 8 * abi.WLimitAlgorithm
	oLimitLimit     = 8 * abi.WLimitLimit
	oLimitWindow    = 8 * abi.WLimitWindow
	oLimitRate      = 8 * abi.WLimitRate
	oStateAlgorithm = 8 * abi.WStateAlgorithm
	oStateT         = 8 * abi.WStateT
	oStateX         = 8 * abi.WStateX
	oStateY         = 8 * abi.WStateY
	oStateL         = 8 * abi.WStateL
	oStateW         = 8 * abi.WStateW
	oStateR         = 8 * abi.WStateR
	oStateLogLen    = 8 * abi.WStateLogLen
	oStateLogCap    = 8 * abi.WStateLogCap
	oDecided        = 8 * abi.WDecided
	oAllowed        = 8 * abi.WAllowed
	oDecLimit       = 8 * abi.WDecLimit
	oRemaining      = 8 * abi.WRemaining
	oResetAfter     = 8 * abi.WResetAfter
	oRetryAfter     = 8 * abi.WRetryAfter
	oDelay          = 8 * abi.WDelay
	oNextAfter      = 8 * abi.WNextAfter
	oLog            = 8 * abi.WLog

	statusTooManyLimits = abi.StatusTooManyLimits
	statusBadLog        = abi.StatusBadLog
)

// Errors of the host. Decision errors are core.Error values, identical to
// the native core's.
var (
	// ErrClosed is returned by every call on a Pool after Close.
	ErrClosed = errors.New("wasm: pool closed")
	// ErrABIVersion is returned by New when the module is not one this
	// package can host: its abi_version differs from ABIVersion, it lacks
	// an export, or its buffer does not have the documented layout.
	ErrABIVersion = errors.New("wasm: module ABI version mismatch")
	// ErrTrap is matched (errors.Is) by the error of a call during which
	// the module trapped. The instance is discarded, never reused; the pool
	// keeps serving with fresh instances. It never happens with the
	// embedded module unless the host itself is broken.
	ErrTrap = errors.New("wasm: module trapped")
	// ErrTooManyLimits is returned by TakeAll and PeekAll for more than
	// MaxLimits limits.
	ErrTooManyLimits = errors.New("wasm: more limits than the module's buffer holds")
)
