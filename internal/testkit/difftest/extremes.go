package difftest

import (
	"fmt"

	"github.com/rlcore/rl/core"
)

// Extremes returns sequences that decide every algorithm at its parameter
// bounds (limits 1, 3 and the maximum; windows 1, 1000 and the maximum, or
// Limit × Window at MaxUnits exactly; rates 0, 1 and the maximum) against
// states whose words sit at 0, 1, MaxUnits and MaxStateValue, written by the
// limit's algorithm, by another or by none, and logs at the bounds, at times
// 0, 1, 2026 and MaxTime, for costs 0, 1, the limit and one above. Each step
// injects its state, so every combination is decided on its own.
func Extremes() []Sequence {
	nows := []int64{0, 1, Epoch2026, core.MaxTime}
	var seqs []Sequence
	algs := core.Algorithms()
	for i, a := range algs {
		var limits []core.Limit
		maxLim := core.MaxLimit
		if a == core.SlidingLog {
			maxLim = core.MaxLogLimit
		}
		for _, lim := range []int64{1, 3, maxLim} {
			for _, w := range []int64{1, 1000, core.MaxWindow} {
				if a.UnitsBounded() && lim > core.MaxUnits/w {
					w = core.MaxUnits / lim // at the bound exactly
				}
				rates := []int64{0}
				if !a.Windowed() {
					rates = []int64{0, 1, core.MaxLimit}
				}
				for _, r := range rates {
					limits = append(limits, core.Limit{Algorithm: a, Limit: lim, Window: w, Rate: r})
				}
			}
		}
		var states []core.State
		for _, sa := range []core.Algorithm{0, a, algs[(i+1)%len(algs)]} {
			if sa == 0 {
				states = append(states, core.State{})
			} else {
				states = append(states, mustOracle(sa).States()...)
			}
		}
		for _, l := range limits {
			seq := Sequence{Name: fmt.Sprintf("extreme %v limit %d window %d rate %d", a, l.Limit, l.Window, l.Rate),
				Limits: []core.Limit{l}, States: []core.State{{}}}
			for _, s := range states {
				for _, now := range nows {
					for _, cost := range []int64{0, 1, l.Limit, l.Limit + 1} {
						op := Take
						if cost == 1 && now == 1 {
							op = Peek
						}
						seq.Steps = append(seq.Steps, Step{Op: op, Now: now, Cost: min(cost, core.MaxCost),
							States: []core.State{s}})
					}
				}
			}
			seqs = append(seqs, seq)
		}
	}
	return seqs
}
