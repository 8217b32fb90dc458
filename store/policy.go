package store

import (
	"fmt"
	"sync/atomic"

	"github.com/rlcore/rl/core"
)

// Policy is a checked, immutable list of named limits decided together on
// a key, all or nothing: what a Request carries in place of its limits.
// Each limit is compiled once (core.Compile), so a store that decides with
// the native core skips the limit's validation on every call. Some of the
// limits may be shadow limits (WithShadow), decided beside the others and
// never denying; see Decide.
//
// Build a Policy once and use it for many requests (rl.NewPolicy builds one
// per rl.Policy); it is safe for concurrent use. A store may keep a
// *Policy, or its ID, for as long as it likes: two requests with the same
// ID carry the same names in the same order, which lets a store recognise a
// key's states without comparing names.
type Policy struct {
	id       uint64
	names    []string
	limits   []core.Limit
	compiled []core.Compiled
	// sh is nil unless some limits are shadow limits (WithShadow).
	sh *shadows
}

// policyIDs numbers the policies of the process; 0 is no policy.
var policyIDs atomic.Uint64

// NewPolicy checks limits and returns them with their names as a Policy.
// names and limits are parallel, 1 to core.MaxLimits long, and the names
// unique; a limit's name identifies its state within a key. The slices are
// copied. Errors match core.ErrLimits (a bad list) or the core.Error that
// core.Compile returns for an invalid limit.
func NewPolicy(names []string, limits []core.Limit) (*Policy, error) {
	n := len(limits)
	if n == 0 || n > core.MaxLimits || len(names) != n {
		return nil, fmt.Errorf("store: %d names for %d limits, want 1 to %d of each: %w", len(names), n, core.MaxLimits, core.ErrLimits)
	}
	p := &Policy{
		names:    append([]string(nil), names...),
		limits:   append([]core.Limit(nil), limits...),
		compiled: make([]core.Compiled, n),
	}
	for i := range limits {
		for _, prev := range names[:i] {
			if prev == names[i] {
				return nil, fmt.Errorf("store: two limits named %q: %w", names[i], core.ErrLimits)
			}
		}
		c, err := core.Compile(limits[i])
		if err != nil {
			return nil, fmt.Errorf("store: limit %q: %w", names[i], err)
		}
		p.compiled[i] = c
	}
	p.id = policyIDs.Add(1)
	return p, nil
}

// ID identifies the policy within the process: it is never 0 and never
// shared by two policies, even with the same limits.
func (p *Policy) ID() uint64 { return p.id }

// Len returns the number of limits.
func (p *Policy) Len() int { return len(p.limits) }

// Names returns the limits' names. The slice is the policy's own: read it,
// never modify it.
func (p *Policy) Names() []string { return p.names }

// Limits returns the limits, in the order of Names. The slice is the
// policy's own: read it, never modify it.
func (p *Policy) Limits() []core.Limit { return p.limits }

// Compiled returns the compiled limits, in the order of Names, for
// core.TakeAllCompiled and core.PeekAllCompiled. The slice is the policy's
// own: read it, never modify it.
func (p *Policy) Compiled() []core.Compiled { return p.compiled }

// MustPolicy is NewPolicy for limits known to be valid, such as a test's or
// a package-level variable's; it panics on an error.
func MustPolicy(names []string, limits ...core.Limit) *Policy {
	p, err := NewPolicy(names, limits)
	if err != nil {
		panic(err)
	}
	return p
}
