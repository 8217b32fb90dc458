package main

import (
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/tests/vectors"
)

// leaky_bucket.json: the scenarios every algorithm shares (common), its corrupt
// states and its own cases.
func init() {
	register(algFile{
		alg:    core.LeakyBucket,
		prefix: "lb",
		desc:   "Leaky bucket: capacity Limit leaking Rate units per Window; admitted calls report their Delay.",
		corrupt: func(e *builder) {
			e.takeFrom(t0+6, 1, vectors.State{Algorithm: int32(core.LeakyBucket), T: t0, Y: 1}) // Y unused
		},
		own: func() []*builder {
			return []*builder{
				newCase("lb-delay", "admitted calls report when they leave the bucket (shaping)", nil, lim("default", core.LeakyBucket, 5, sec, 5)).
					take(t0, 1).take(t0, 1).take(t0, 1).take(t0+100*ms, 1).take(t0+100*ms, 1).take(t0+100*ms, 1).take(t0+2*sec, 1),
				newCase("lb-slow", "capacity 3 leaking 1 unit per 7 seconds", nil, lim("default", core.LeakyBucket, 3, 7*sec, 1)).
					take(t0, 3).take(t0+sec, 1).take(t0+7*sec, 1).take(t0+8*sec, 1).take(t0+30*sec, 3),
			}
		},
	})
}
