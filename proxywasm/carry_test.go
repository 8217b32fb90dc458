package main

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rlcore/rl/core"
)

// TestStoreCarriesUsage (issue 22, item 1): a plugin configuration that
// changes a rule's limit (raised, lowered, another window or algorithm)
// finds the key's state in shared data, written under the old one, and
// decides on the usage it carries, as the core defines it: over random
// traffic whose configuration changes every few steps, each decision and
// settle through shared data equals core.TakeAll and core.SettleAll on one
// state kept in memory across the changes.
func TestStoreCarriesUsage(t *testing.T) {
	for _, c := range []struct {
		name  string
		rules []string // the rule's limit fields, in turn
	}{
		{"fixed", []string{`"strategy":"fixed","limit":6,"window":"1s"`, `"strategy":"fixed","limit":3,"window":"1s"`, `"strategy":"fixed","limit":9,"window":"700ms"`}},
		{"sliding", []string{`"strategy":"sliding","limit":6,"window":"1s"`, `"strategy":"sliding","limit":2,"window":"1s"`, `"strategy":"sliding","limit":8,"window":"1500ms"`}},
		{"log", []string{`"strategy":"log","limit":7,"window":"1s"`, `"strategy":"log","limit":3,"window":"1s"`, `"strategy":"log","limit":10,"window":"600ms"`}},
		{"token", []string{`"strategy":"token","limit":6,"window":"1s","rate":4`, `"strategy":"token","limit":2,"window":"1s"`, `"strategy":"token","limit":9,"window":"3s","rate":5`}},
		{"leaky", []string{`"strategy":"leaky","limit":6,"window":"1s"`, `"strategy":"leaky","limit":3,"window":"2s","rate":1`, `"strategy":"leaky","limit":10,"window":"1s"`}},
		{"gcra", []string{`"strategy":"gcra","limit":5,"window":"1s","rate":3`, `"strategy":"gcra","limit":2,"window":"1s"`, `"strategy":"gcra","limit":8,"window":"2s","rate":9`}},
		{"across algorithms", []string{`"strategy":"log","limit":8,"window":"1s"`, `"strategy":"gcra","limit":3,"window":"1s"`, `"strategy":"fixed","limit":5,"window":"1s"`,
			`"strategy":"token","limit":4,"window":"1s"`, `"strategy":"sliding","limit":6,"window":"1s"`, `"strategy":"leaky","limit":2,"window":"1s"`, `"strategy":"log","limit":2,"window":"1s"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sd := newMemData()
			var cfgs []*config
			for _, r := range c.rules {
				cfgs = append(cfgs, mustConfig(t, `{"slots":1,"keys_per_slot":4,"rules":[{"name":"r",`+r+`}]}`))
			}
			// The reference: one state in memory, its log room for the
			// largest limit (a log carried under a lower limit keeps its
			// entries).
			want := []core.State{{Log: make([]int64, 0, 4096)}}
			wd, gd := make([]core.Decision, 1), make([]core.Decision, 1)
			rnd := rand.New(rand.NewPCG(22, uint64(len(c.name))))
			now := t0
			for step := range 3000 {
				if want[0].Log == nil { // a settle left nothing, and no storage
					want[0].Log = make([]int64, 0, 4096)
				}
				cfg := cfgs[step/40%len(cfgs)]
				if rnd.IntN(3) == 0 {
					cfg = cfgs[rnd.IntN(len(cfgs))] // a change for one step
				}
				r := cfg.Rules[0]
				s := newStore(cfg, sd) // a new configuration's store, on the same shared data
				now += rnd.Int64N(90_000) - 5_000
				cost := rnd.Int64N(3)
				op := "take"
				var wi, gi int
				var werr, gerr error
				if rnd.IntN(6) == 0 {
					op, cost = "settle", rnd.Int64N(9)-3
					wi, werr = core.SettleAll(r.Limits, want, now, cost, wd)
					gi, gerr = s.settle(r, "k", now, cost, nil, gd)
				} else {
					wi, werr = core.TakeAll(r.Limits, want, now, cost, wd)
					gi, gerr = s.take(r, "k", now, cost, gd)
				}
				if werr != nil || gerr != nil || wi != gi || wd[0] != gd[0] {
					t.Fatalf("step %d (%s %d under %s): got %+v %v, want %+v %v", step, op, cost, fmt.Sprint(r.Limits[0]), gd[0], gerr, wd[0], werr)
				}
			}
		})
	}
}
