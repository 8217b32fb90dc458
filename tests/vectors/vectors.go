// Package vectors holds the conformance vectors: JSON files that pin every
// decision of every algorithm. The Go core, the WebAssembly module (through
// the wazero host and through Node.js) and the PL/pgSQL functions all run
// these same files. The format is documented in README.md beside them.
//
// The package deliberately does not import core: it is plain data, so any
// runtime's runner can use it.
package vectors

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
)

//go:generate go run ./internal/gen -out .

//go:embed *.json
var files embed.FS

// FS returns the vector files (a flat directory of *.json).
func FS() fs.FS { return files }

// Schema is the format version every file names. Version 2 added the
// decisions' next_after.
const Schema = "rl-vectors/v2"

// File is one vector file.
type File struct {
	Schema      string            `json:"schema"`
	Name        string            `json:"-"`
	Description string            `json:"description"`
	Notes       map[string]string `json:"notes"`
	Cases       []Case            `json:"cases"`
}

// Case is one independent sequence of steps, starting from States (or
// fresh states when States is empty).
type Case struct {
	ID      string   `json:"id"`
	Comment string   `json:"comment"`
	Flags   []string `json:"flags,omitempty"`
	Limits  []Limit  `json:"limits"`
	States  []State  `json:"states,omitempty"`
	Steps   []Step   `json:"steps"`
}

// Limit is core.Limit with its algorithm as a number (see README.md).
type Limit struct {
	Name      string `json:"name"`
	Algorithm int32  `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Window    int64  `json:"window"`
	Rate      int64  `json:"rate"`
}

// State is core.State.
type State struct {
	Algorithm int32   `json:"algorithm"`
	T         int64   `json:"t"`
	X         int64   `json:"x"`
	Y         int64   `json:"y"`
	L         int64   `json:"l"`
	W         int64   `json:"w"`
	R         int64   `json:"r"`
	Log       []int64 `json:"log"`
}

// Step is one call. Limits, when present, replace the case's limits from
// this step on; SetStates, when present, replace the stored states before the
// call (to inject a corrupt or foreign state).
type Step struct {
	Now       int64   `json:"now"`
	Op        string  `json:"op"`   // "take", "peek", "reset" or "settle"
	Cost      int64   `json:"cost"` // for "settle", the delta (may be negative)
	Limits    []Limit `json:"limits,omitempty"`
	SetStates []State `json:"set_states,omitempty"`
	Expect    Expect  `json:"expect"`
}

// Expect is the expected outcome of a step.
type Expect struct {
	// Error is the error's name ("ErrCost") and ErrorCode its number; both
	// empty/zero on success. On an error the states stay as they were.
	Error     string `json:"error,omitempty"`
	ErrorCode int32  `json:"error_code,omitempty"`
	// Index is the deciding limit (see core.TakeAll), or the limit that
	// caused the error.
	Index     int        `json:"index"`
	Decisions []Decision `json:"decisions,omitempty"`
	// States are the stored states after the step, one per limit.
	States []State `json:"states"`
}

// Decision is core.Decision.
type Decision struct {
	Allowed    bool  `json:"allowed"`
	Limit      int64 `json:"limit"`
	Remaining  int64 `json:"remaining"`
	ResetAfter int64 `json:"reset_after"`
	RetryAfter int64 `json:"retry_after"`
	Delay      int64 `json:"delay"`
	NextAfter  int64 `json:"next_after"`
}

// Load parses every vector file, in name order.
func Load() ([]File, error) {
	names, err := fs.Glob(files, "*.json")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]File, 0, len(names))
	for _, name := range names {
		b, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, err
		}
		var f File
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("vectors: %s: %w", name, err)
		}
		if f.Schema != Schema {
			return nil, fmt.Errorf("vectors: %s: schema %q, want %q", name, f.Schema, Schema)
		}
		f.Name = name
		out = append(out, f)
	}
	return out, nil
}

// Differs reports whether s and o are different states (a nil and an empty
// log are the same).
func (s State) Differs(o State) bool {
	if s.Algorithm != o.Algorithm || s.T != o.T || s.X != o.X || s.Y != o.Y || s.L != o.L || s.W != o.W || s.R != o.R ||
		len(s.Log) != len(o.Log) {
		return true
	}
	for i := range s.Log {
		if s.Log[i] != o.Log[i] {
			return true
		}
	}
	return false
}
