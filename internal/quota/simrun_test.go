package quota

import (
	"fmt"
	"strings"
	"testing"
)

func TestSimulation(t *testing.T) {
	var rows []simResult
	for _, sc := range scenarioOrder {
		for _, report := range []int64{Second, 5 * Second} {
			for _, n := range []int{2, 10, 50, 200} {
				for _, design := range []string{"rlqs", "rtc"} {
					rows = append(rows, runSim(simParams{scenario: sc, n: n, report: report, design: design}))
				}
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| scenario | report | N | design | admitted/ideal | overshoot (%% of 60·L) | steady overshoot | used (settled) | used (all) | fair after | grant changes |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		conv := "-"
		if r.design != "rtc" {
			conv = fmt.Sprintf("%.1f s", float64(r.converge)/float64(Second))
			if r.converge < 0 {
				conv = "never"
			}
		}
		fmt.Fprintf(&b, "| %s | %ds | %d | %s | %.3f | %.2f%% | %d | %.1f%% | %.1f%% | %s | %d |\n",
			r.scenario, r.report/Second, r.n, r.design, ratio(r.admitted, r.ideal),
			100*float64(r.overshoot)/float64(60*simRate), r.overshootSteady, 100*r.utilisation, 100*r.utilisationAll, conv, r.changes)
	}
	t.Log("\n" + b.String())
}
