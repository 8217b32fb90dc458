package core_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/testkit/difftest"
	"github.com/rlcore/rl/tests/vectors/vectorstest"
)

// compiled decides through Compile and the compiled entry points whenever
// every limit of a call compiles, and through the checked ones otherwise
// (an invalid limit has no compiled form: its error is Compile's, and the
// checked path orders it among the call's other errors).
type compiled struct{}

func compileAll(ls []core.Limit) ([]core.Compiled, bool) {
	cs := make([]core.Compiled, len(ls))
	for i, l := range ls {
		c, err := core.Compile(l)
		if err != nil {
			return nil, false
		}
		cs[i] = c
	}
	return cs, true
}

func (compiled) Take(l core.Limit, s core.State, now, cost int64) (core.Decision, core.State, error) {
	c, err := core.Compile(l)
	if err != nil {
		return core.Take(l, s, now, cost)
	}
	return c.Take(s, now, cost)
}

func (compiled) Peek(l core.Limit, s core.State, now, cost int64) (core.Decision, error) {
	c, err := core.Compile(l)
	if err != nil {
		return core.Peek(l, s, now, cost)
	}
	return c.Peek(s, now, cost)
}

func (compiled) TakeAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	if cs, ok := compileAll(ls); ok {
		return core.TakeAllCompiled(cs, ss, now, cost, ds)
	}
	return core.TakeAll(ls, ss, now, cost, ds)
}

func (compiled) PeekAll(ls []core.Limit, ss []core.State, now, cost int64, ds []core.Decision) (int, error) {
	if cs, ok := compileAll(ls); ok {
		return core.PeekAllCompiled(cs, ss, now, cost, ds)
	}
	return core.PeekAll(ls, ss, now, cost, ds)
}

func (compiled) Settle(l core.Limit, s core.State, now, delta int64) (core.Decision, core.State, error) {
	c, err := core.Compile(l)
	if err != nil {
		return core.Settle(l, s, now, delta)
	}
	var d core.Decision
	n := s
	if err := c.SettleInto(&n, now, delta, &d); err != nil {
		return core.Decision{}, s, err
	}
	return d, n, nil
}

func (compiled) SettleAll(ls []core.Limit, ss []core.State, now, delta int64, ds []core.Decision) (int, error) {
	if cs, ok := compileAll(ls); ok {
		return core.SettleAllCompiled(cs, ss, now, delta, ds)
	}
	return core.SettleAll(ls, ss, now, delta, ds)
}

// into is compiled with the single-limit calls made through TakeInto and
// PeekInto, on a state and decision held by the caller.
type into struct{ compiled }

func (into) Take(l core.Limit, s core.State, now, cost int64) (core.Decision, core.State, error) {
	c, err := core.Compile(l)
	if err != nil {
		return core.Take(l, s, now, cost)
	}
	var d core.Decision
	n := s
	if err := c.TakeInto(&n, now, cost, &d); err != nil {
		return core.Decision{}, s, err
	}
	return d, n, nil
}

func (into) Peek(l core.Limit, s core.State, now, cost int64) (core.Decision, error) {
	c, err := core.Compile(l)
	if err != nil {
		return core.Peek(l, s, now, cost)
	}
	var d core.Decision
	if err := c.PeekInto(&s, now, cost, &d); err != nil {
		return core.Decision{}, err
	}
	return d, nil
}

// TestCompiledVectors: the compiled entry points pass every conformance
// vector.
func TestCompiledVectors(t *testing.T) {
	t.Run("single", func(t *testing.T) { vectorstest.Run(t, compiled{}, false) })
	t.Run("all", func(t *testing.T) { vectorstest.Run(t, compiled{}, true) })
	t.Run("into", func(t *testing.T) { vectorstest.Run(t, into{}, false) })
}

// TestCompiledDifferential: random limits (up to the bounds and beyond),
// states (corrupt ones included), times and costs, decided by the checked
// and the compiled paths side by side, must give the same decisions,
// deciding index, errors and states at every step, sliding logs' storage
// included.
func TestCompiledDifferential(t *testing.T) {
	r := difftest.Runner{Exact: true, Workers: 2, Deciders: []difftest.Decider{
		{Name: "checked", Decider: vectorstest.Native{}},
		{Name: "compiled", Decider: compiled{}},
		{Name: "into", Decider: into{}},
	}}
	n := 3000
	if testing.Short() {
		n = 500
	}
	stats := r.Check(t, difftest.Config{}, 20261126, n)
	r.CheckSequences(t, difftest.Extremes())
	t.Log(stats)
}

// TestCompileErrors: Compile returns Validate's *LimitError, which matches
// the Error Take returns for the same limit, and the zero Compiled decides
// nothing.
func TestCompileErrors(t *testing.T) {
	for _, l := range []core.Limit{
		{},
		{Algorithm: core.Algorithm(len(core.Algorithms()) + 1), Limit: 1, Window: 1},
		{Algorithm: core.SlidingLog, Limit: core.MaxLogLimit + 1, Window: 1},
		{Algorithm: core.GCRA, Limit: 1, Window: core.MaxWindow + 1},
		{Algorithm: core.FixedWindow, Limit: 1, Window: 1, Rate: 1},
		{Algorithm: core.TokenBucket, Limit: core.MaxLimit, Window: core.MaxWindow},
	} {
		_, _, want := core.Take(l, core.State{}, 0, 1)
		require.Error(t, want)
		_, err := core.Compile(l)
		require.ErrorIs(t, err, want, "%+v", l)
		var le *core.LimitError
		require.ErrorAs(t, err, &le, "%+v", l)
		require.Equal(t, want, le.Code, "%+v", l)
		require.Equal(t, l.Validate(), err, "%+v", l)
	}
	var zero core.Compiled
	_, _, err := zero.Take(core.State{}, 0, 1)
	require.Equal(t, core.ErrAlgorithm, err)
	_, err = core.TakeAllCompiled([]core.Compiled{{}}, make([]core.State, 1), 0, 1, make([]core.Decision, 1))
	require.Equal(t, core.ErrAlgorithm, err)
}

// TestWrittenStateDropsLog holds what State.Log documents: every algorithm
// but SlidingLog drops a log buffer from the states it writes, through the
// checked path, the compiled one and TakeInto, on a fresh state and on one
// it wrote itself (the common case, which writes the state field by field).
func TestWrittenStateDropsLog(t *testing.T) {
	for _, alg := range core.Algorithms() {
		if alg == core.SlidingLog {
			continue
		}
		t.Run(alg.String(), func(t *testing.T) {
			l := core.Limit{Algorithm: alg, Limit: 10, Window: 1_000_000}
			c, err := core.Compile(l)
			require.NoError(t, err)
			buf := make([]int64, 0, 4)
			now := int64(1_767_225_600_000_000)
			_, s, err := core.Take(l, core.State{Log: buf}, now, 1)
			require.NoError(t, err)
			require.Nil(t, s.Log, "fresh state, checked path")
			l2, w2, r2 := c.Params()
			require.Equal(t, [3]int64{l2, w2, r2}, [3]int64{s.L, s.W, s.R}, "recorded parameters")

			s.Log = buf
			_, n, err := c.Take(s, now+1, 1)
			require.NoError(t, err)
			require.Nil(t, n.Log, "own state, compiled Take")

			s.Log = buf
			var d core.Decision
			require.NoError(t, c.TakeInto(&s, now+2, 1, &d))
			require.True(t, d.Allowed)
			require.Nil(t, s.Log, "own state, TakeInto")
			require.Equal(t, [3]int64{l2, w2, r2}, [3]int64{s.L, s.W, s.R}, "recorded parameters after TakeInto")
		})
	}
}
