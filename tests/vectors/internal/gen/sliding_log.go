package main

import (
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/tests/vectors"
)

// sliding_log.json: the scenarios every algorithm shares (common), its corrupt
// states and its own cases.
func init() {
	register(algFile{
		alg:    core.SlidingLog,
		prefix: "sl",
		desc:   "Sliding window log: the exact times of admitted units in the last Window.",
		corrupt: func(e *builder) {
			e.takeFrom(t0+6, 1, vectors.State{Algorithm: int32(core.SlidingLog), Log: []int64{t0, t0 - 1}}).
				takeFrom(t0+7, 1, vectors.State{Algorithm: int32(core.SlidingLog), T: t0, Log: []int64{t0}})
		},
		own: func() []*builder {
			return []*builder{
				newCase("sl-exact", "entries expire exactly one window after they were admitted", []string{"edge"}, lim("default", core.SlidingLog, 3, sec, 0)).
					take(t0, 1).take(t0+300*ms, 1).take(t0+600*ms, 1).take(t0+sec-1, 1).take(t0+sec, 1).take(t0+sec+299*ms, 1).take(t0+sec+300*ms, 1),
				newCase("sl-maxlimit", "the largest log", []string{"maxima"}, lim("big", core.SlidingLog, core.MaxLogLimit, sec, 0)).
					take(t0, core.MaxLogLimit-1).take(t0+1, 2).take(t0+2, 1).take(t0+sec, core.MaxLogLimit).take(t0+sec+1, 1),
			}
		},
	})
}
