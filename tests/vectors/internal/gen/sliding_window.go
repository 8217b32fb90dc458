package main

import (
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/tests/vectors"
)

// sliding_window.json: the scenarios every algorithm shares (common), its corrupt
// states and its own cases.
func init() {
	register(algFile{
		alg:    core.SlidingWindow,
		prefix: "sw",
		desc:   "Sliding window counter: current and previous window counts, the previous weighted by its overlap.",
		corrupt: func(e *builder) {
			e.takeFrom(t0+6, 1, vectors.State{Algorithm: int32(core.SlidingWindow), Y: -3})
		},
		own: func() []*builder {
			return []*builder{
				newCase("sw-weighted", "the previous window's count weighs by the part still inside the sliding window", []string{"edge"}, lim("default", core.SlidingWindow, 10, 10*sec, 0)).
					take(t0+5*sec, 10).take(t0+10*sec, 1).take(t0+12*sec, 2).take(t0+13*sec, 1).take(t0+15*sec, 3).take(t0+19*sec+1, 3).take(t0+25*sec, 10).take(t0+40*sec, 10),
				newCase("sw-maxunits", "limit × window at MaxUnits", []string{"maxima"}, lim("big", core.SlidingWindow, core.MaxUnits/core.MaxWindow, core.MaxWindow, 0)).
					take(t0, 1000).take(t0+1, 1152).take(t0+2, 1).take(t0+core.MaxWindow, 1),
			}
		},
	})
}
