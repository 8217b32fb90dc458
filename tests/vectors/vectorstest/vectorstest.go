// Package vectorstest runs the conformance vectors (package vectors) against
// anything with the core's decision API: package core itself (Native), the
// WebAssembly host (package wasm) or the SQL functions (internal/testkit/sqldecider).
package vectorstest

import (
	"errors"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/tests/vectors"
)

// Core is the decision API under test.
type Core interface {
	Take(l core.Limit, s core.State, now, cost int64) (core.Decision, core.State, error)
	Peek(l core.Limit, s core.State, now, cost int64) (core.Decision, error)
	Settle(l core.Limit, s core.State, now, delta int64) (core.Decision, core.State, error)
	core.Decider
}

// Native is package core as a Core.
type Native struct{ core.Native }

// Take calls core.Take.
func (Native) Take(l core.Limit, s core.State, now, cost int64) (core.Decision, core.State, error) {
	return core.Take(l, s, now, cost)
}

// Peek calls core.Peek.
func (Native) Peek(l core.Limit, s core.State, now, cost int64) (core.Decision, error) {
	return core.Peek(l, s, now, cost)
}

// Settle calls core.Settle.
func (Native) Settle(l core.Limit, s core.State, now, delta int64) (core.Decision, core.State, error) {
	return core.Settle(l, s, now, delta)
}

// Run runs every vector file against c, a subtest per case. With alwaysAll,
// one-limit steps go through TakeAll/PeekAll too (the path stores use)
// instead of Take/Peek as the vectors' README prescribes.
func Run(t *testing.T, c Core, alwaysAll bool) {
	files, err := vectors.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 7 {
		t.Fatalf("only %d vector files", len(files))
	}
	for _, f := range files {
		for _, cs := range f.Cases {
			t.Run(f.Name+"/"+cs.ID, func(t *testing.T) { runCase(t, c, cs, alwaysAll) })
		}
	}
}

// ToLimits converts vector limits to the core's.
func ToLimits(ls []vectors.Limit) []core.Limit {
	out := make([]core.Limit, len(ls))
	for i, l := range ls {
		out[i] = core.Limit{Algorithm: core.Algorithm(l.Algorithm), Limit: l.Limit, Window: l.Window, Rate: l.Rate}
	}
	return out
}

// ToState converts a vector state to the core's, with room for every log
// entry a sliding log can hold (as the vectors' README requires).
func ToState(v vectors.State) core.State {
	s := core.State{Algorithm: core.Algorithm(v.Algorithm), T: v.T, X: v.X, Y: v.Y, L: v.L, W: v.W, R: v.R}
	s.Log = make([]int64, len(v.Log), core.MaxLogLimit+int64(len(v.Log)))
	copy(s.Log, v.Log)
	return s
}

// FromDecision converts a core decision to the vectors' form.
func FromDecision(d core.Decision) vectors.Decision {
	return vectors.Decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		ResetAfter: d.ResetAfter, RetryAfter: d.RetryAfter, Delay: d.Delay, NextAfter: d.NextAfter}
}

// FromState converts a core state to the vectors' form.
func FromState(s core.State) vectors.State {
	return vectors.State{Algorithm: int32(s.Algorithm), T: s.T, X: s.X, Y: s.Y, L: s.L, W: s.W, R: s.R,
		Log: append([]int64{}, s.Log...)}
}

func runCase(t *testing.T, c Core, cs vectors.Case, alwaysAll bool) {
	limits := ToLimits(cs.Limits)
	states := make([]core.State, len(limits))
	for i := range states {
		states[i] = ToState(vectors.State{})
	}
	for i, s := range cs.States {
		states[i] = ToState(s)
	}
	for i, st := range cs.Steps {
		if st.Limits != nil {
			limits = ToLimits(st.Limits)
		}
		for j, s := range st.SetStates {
			states[j] = ToState(s)
		}
		for j := range states { // storage for log entries, as a store gives
			if states[j].Log == nil {
				states[j].Log = make([]int64, 0, core.MaxLogLimit)
			}
		}
		var (
			err   error
			index int
			ds    = make([]core.Decision, len(limits))
		)
		switch st.Op {
		case "reset":
			for j := range states {
				states[j] = ToState(vectors.State{})
			}
		case "take", "peek":
			single := len(limits) == 1 && !alwaysAll
			switch {
			case single && st.Op == "peek":
				ds[0], err = c.Peek(limits[0], states[0], st.Now, st.Cost)
			case single:
				var n core.State
				ds[0], n, err = c.Take(limits[0], states[0], st.Now, st.Cost)
				if err == nil {
					states[0] = n
				}
			case st.Op == "peek":
				index, err = c.PeekAll(limits, states, st.Now, st.Cost, ds)
			default:
				index, err = c.TakeAll(limits, states, st.Now, st.Cost, ds)
			}
		case "settle":
			if len(limits) == 1 && !alwaysAll {
				var n core.State
				ds[0], n, err = c.Settle(limits[0], states[0], st.Now, st.Cost)
				if err == nil {
					states[0] = n
				}
			} else {
				index, err = c.SettleAll(limits, states, st.Now, st.Cost, ds)
			}
		default:
			t.Fatalf("step %d: unknown op %q", i, st.Op)
		}
		if st.Expect.ErrorCode != 0 {
			if !errors.Is(err, core.Error(st.Expect.ErrorCode)) {
				t.Fatalf("step %d: got error %v, want %s", i, err, st.Expect.Error)
			}
		} else if err != nil {
			t.Fatalf("step %d: unexpected error %v", i, err)
		}
		if index != st.Expect.Index {
			t.Fatalf("step %d: index %d, want %d", i, index, st.Expect.Index)
		}
		if err == nil && st.Op != "reset" {
			for j, d := range ds {
				if want := st.Expect.Decisions[j]; FromDecision(d) != want {
					t.Fatalf("step %d (now %d cost %d) limit %d:\n got %+v\nwant %+v", i, st.Now, st.Cost, j, d, want)
				}
			}
		}
		for j, s := range states {
			want := st.Expect.States[j]
			if FromState(s).Differs(want) {
				t.Fatalf("step %d limit %d: state %+v, want %+v", i, j, FromState(s), want)
			}
		}
	}
}
