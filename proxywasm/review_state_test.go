package main

import (
	"testing"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/outage"
)

// Review: the filter's store keeps its own failure rule for a corrupt
// state: store.decide resets a state core refuses (core.ErrState) and
// admits the request afresh (and parseSlot reads an unparsable slot as
// empty, every key in it fresh). SECURITY.md's rule, held by the service,
// the API and gRPC through outage.Classify, is that a corrupt stored state
// is Internal: refused (500 / OVER_LIMIT), never admitted. Anything that
// writes the vm_id's shared data (another plugin or filter configuration
// with the same vm_id) can thereby give every key a fresh quota.
func TestReviewCorruptStateIsInternal(t *testing.T) {
	cfg := mustConfig(t, `{"slots":1,"rules":[{"name":"r","strategy":"fixed","limit":2,"window":"1s"}]}`)
	r := cfg.Rules[0]
	ds := make([]core.Decision, 1)
	sd := newMemData()
	s := newStore(cfg, sd)
	b := appendState((&slot{}).appendKept(nil, t0, nil, 1), digest("k"), 0, t0+1e6, []core.State{{Algorithm: core.FixedWindow, T: -5, X: 1}})
	sd.set("rl/v2/r/0", b, 0)
	_, err := s.take(r, "k", t0, 1, ds)
	if c := (*outage.Detector)(nil).Classify(0, err); err == nil || c != outage.Internal {
		t.Fatalf("corrupt state: err %v (class %v), allowed %v; want an Internal failure, never a fresh admission", err, c, ds[0].Allowed)
	}
}
