package main

import (
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/tests/vectors"
)

// fixed_window.json: the scenarios every algorithm shares (common), its corrupt
// states and its own cases.
func init() {
	register(algFile{
		alg:    core.FixedWindow,
		prefix: "fw",
		desc:   "Fixed window: Limit units per Window, windows aligned to the epoch.",
		corrupt: func(e *builder) {
			e.takeFrom(t0+6, 1, vectors.State{Algorithm: int32(core.FixedWindow), T: t0, Y: 1}) // Y unused
		},
		own: func() []*builder {
			return []*builder{
				newCase("fw-aligned", "windows are aligned to the epoch: a window opened at :59 ends at the minute", []string{"edge"}, lim("m", core.FixedWindow, 3, min, 0)).
					take(t0+59*sec, 3).take(t0+59*sec+1, 1).take(t0+min, 3),
				newCase("fw-maxlimit", "the largest limit and cost", []string{"maxima"}, lim("big", core.FixedWindow, core.MaxLimit, day, 0)).
					take(t0, core.MaxCost).take(t0+1, 1).take(t0+day, core.MaxLimit-1).take(t0+day, 1).take(t0+day, 1),
			}
		},
	})
}
