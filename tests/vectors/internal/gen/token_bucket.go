package main

import (
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/tests/vectors"
)

// token_bucket.json: the scenarios every algorithm shares (common), its corrupt
// states and its own cases.
func init() {
	register(algFile{
		alg:    core.TokenBucket,
		prefix: "tb",
		desc:   "Token bucket: capacity Limit, Rate tokens refilled per Window.",
		corrupt: func(e *builder) {
			e.takeFrom(t0+6, 1, vectors.State{Algorithm: int32(core.TokenBucket), T: t0, Y: 1}) // Y unused
		},
		own: func() []*builder {
			return []*builder{
				newCase("tb-rate", "burst 10 refilled at 1 token per 100 ms: exact fractional refill", nil, lim("default", core.TokenBucket, 10, sec, 10)).
					take(t0, 10).take(t0+99*ms, 1).take(t0+100*ms, 1).take(t0+150*ms, 1).take(t0+350*ms, 2).take(t0+2*sec, 10),
				newCase("tb-thirds", "3 tokens per second: one token every 333333⅓ µs, no drift", []string{"edge"}, lim("default", core.TokenBucket, 3, sec, 3)).
					take(t0, 3).take(t0+333333, 1).take(t0+333334, 1).take(t0+666667, 1).take(t0+sec-1, 1).take(t0+sec, 1).take(t0+100*sec, 3),
				newCase("tb-maxunits", "limit × window at MaxUnits and the largest rate", []string{"maxima"}, lim("big", core.TokenBucket, core.MaxUnits/core.MaxWindow, core.MaxWindow, core.MaxLimit)).
					take(t0, 2305).take(t0+1, 1).take(t0+2000, 1).take(t0+3000, 2305),
			}
		},
	})
}
