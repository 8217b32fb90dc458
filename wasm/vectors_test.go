package wasm_test

import (
	"errors"
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/tests/vectors"
)

// TestVectors runs every conformance vector file through the module, with
// the runner semantics of core/vectors_test.go. Each case runs twice: with
// the single-limit calls (Take/Peek, exports rl_take/rl_peek) for one limit
// as the vector README prescribes, and with TakeAll/PeekAll for every step
// (exports rl_take_all/rl_peek_all), the path stores use.
func TestVectors(t *testing.T) {
	files, err := vectors.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 7 {
		t.Fatalf("only %d vector files", len(files))
	}
	n := 0
	for _, f := range files {
		for _, c := range f.Cases {
			n++
			t.Run(f.Name+"/"+c.ID+"/single", func(t *testing.T) { runCase(t, c, false) })
			t.Run(f.Name+"/"+c.ID+"/all", func(t *testing.T) { runCase(t, c, true) })
		}
	}
	t.Logf("%d cases in %d files", n, len(files))
}

func toLimits(ls []vectors.Limit) []core.Limit {
	out := make([]core.Limit, len(ls))
	for i, l := range ls {
		out[i] = core.Limit{Algorithm: core.Algorithm(l.Algorithm), Limit: l.Limit, Window: l.Window, Rate: l.Rate}
	}
	return out
}

func toState(v vectors.State) core.State {
	s := core.State{Algorithm: core.Algorithm(v.Algorithm), T: v.T, X: v.X, Y: v.Y}
	s.Log = make([]int64, len(v.Log), core.MaxLogLimit+int64(len(v.Log)))
	copy(s.Log, v.Log)
	return s
}

func runCase(t *testing.T, c vectors.Case, alwaysAll bool) {
	limits := toLimits(c.Limits)
	states := make([]core.State, len(limits))
	for i := range states {
		states[i] = toState(vectors.State{})
	}
	for i, s := range c.States {
		states[i] = toState(s)
	}
	for i, st := range c.Steps {
		if st.Limits != nil {
			limits = toLimits(st.Limits)
		}
		for j, s := range st.SetStates {
			states[j] = toState(s)
		}
		var (
			err   error
			index int
			ds    = make([]core.Decision, len(limits))
		)
		switch st.Op {
		case "reset":
			for j := range states {
				states[j] = toState(vectors.State{})
			}
		case "take", "peek":
			single := len(limits) == 1 && !alwaysAll
			switch {
			case single && st.Op == "peek":
				ds[0], err = pool.Peek(limits[0], states[0], st.Now, st.Cost)
			case single:
				var n core.State
				ds[0], n, err = pool.Take(limits[0], states[0], st.Now, st.Cost)
				if err == nil {
					states[0] = n
				}
			case st.Op == "peek":
				index, err = pool.PeekAll(limits, states, st.Now, st.Cost, ds)
			default:
				index, err = pool.TakeAll(limits, states, st.Now, st.Cost, ds)
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
				if want := st.Expect.Decisions[j]; vectors.Decision(d) != want {
					t.Fatalf("step %d (now %d cost %d) limit %d:\n got %+v\nwant %+v", i, st.Now, st.Cost, j, d, want)
				}
			}
		}
		for j, s := range states {
			got := vectors.State{Algorithm: int32(s.Algorithm), T: s.T, X: s.X, Y: s.Y, Log: s.Log}
			want := st.Expect.States[j]
			if got.Algorithm != want.Algorithm || got.T != want.T || got.X != want.X || got.Y != want.Y || !equal(got.Log, want.Log) {
				t.Fatalf("step %d limit %d: state %+v, want %+v", i, j, got, want)
			}
		}
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
