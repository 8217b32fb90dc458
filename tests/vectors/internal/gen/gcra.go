package main

import (
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/tests/vectors"
)

// gcra.json: the scenarios every algorithm shares (common), its corrupt
// states and its own cases.
func init() {
	register(algFile{
		alg:    core.GCRA,
		prefix: "gcra",
		desc:   "GCRA: burst Limit at Rate per Window, kept as one theoretical arrival time.",
		corrupt: func(e *builder) {
			// The fraction numerator is bounded by MaxLimit; the bound itself
			// is accepted (it arises when Rate was lowered).
			e.takeFrom(t0+6, 1, vectors.State{Algorithm: int32(core.GCRA), T: t0, X: core.MaxLimit + 1}).
				takeFrom(t0+6, 1, vectors.State{Algorithm: int32(core.GCRA), T: core.MaxStateValue, X: core.MaxStateValue}).
				takeFrom(t0+6, 0, vectors.State{Algorithm: int32(core.GCRA), T: t0 + 2_000_000, X: core.MaxLimit}).
				takeFrom(t0+6, 1, vectors.State{Algorithm: int32(core.GCRA), T: t0, Y: t0 + 1})
		},
		own: func() []*builder {
			return []*builder{
				newCase("gcra-burst", "burst 5 at 2 per second: the burst is exactly what passes at once", nil, lim("default", core.GCRA, 5, sec, 2)).
					take(t0, 5).take(t0+499999, 1).take(t0+500*ms, 1).take(t0+sec, 2).take(t0+10*sec, 5),
				newCase("gcra-backwards", "a clock that steps back makes the state look fuller, never emptier", []string{"backwards"}, lim("default", core.GCRA, 2, sec, 0)).
					take(t0, 2).take(t0-3*sec, 1).take(t0+500*ms, 1).take(t0-sec, 0),
				newCase("gcra-clamp-rate", "a burst of 2^20 at 1 per 2^41 µs, then 3 per second: the old TAT, 2^61 µs ahead, is read as one full refill from its admission",
					[]string{"params", "edge"}, lim("default", core.GCRA, 1<<20, core.MaxUnits>>20, 1)).
					take(t0, 1<<20).takeWith(t0+1, 2, []vectors.Limit{lim("default", core.GCRA, 3, sec, 3)}).take(t0+2, 1).retryEdge(1).
					takeWith(t0+3*sec, 1, []vectors.Limit{lim("default", core.GCRA, 2, 5*sec, core.MaxLimit)}),
				newCase("gcra-legacy", "a state without its admission time (y 0, written before it was kept) is not clamped",
					[]string{"params", "state"}, lim("default", core.GCRA, 10, sec, 0)).
					takeFrom(t0, 1, vectors.State{Algorithm: int32(core.GCRA), T: t0 + 365*day}).take(t0+365*day-900*ms-1, 1).take(t0+365*day-900*ms, 1),
				newCase("gcra-corrupt-y", "an admission time after the TAT it wrote is corrupt", []string{"state", "error"}, lim("default", core.GCRA, 3, sec, 0)).
					takeFrom(t0, 1, vectors.State{Algorithm: int32(core.GCRA), T: t0, Y: t0 + 1}).
					takeFrom(t0, 1, vectors.State{Algorithm: int32(core.GCRA), T: t0 + 1, Y: t0 + 1}),
			}
		},
	})
}
