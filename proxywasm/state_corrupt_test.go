package main

import (
	"testing"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/outage"
)

// TestCorruptStateIsInternal: the filter's store follows the one failure
// rule for a corrupt state, as the service, the API and gRPC do through
// outage.Classify: a state core refuses (core.ErrState) is Internal,
// refused (500) even on a fail_open rule, never admitted. store.decide used
// to reset such a state and admit the request afresh (and parseSlot read
// an unparsable slot as empty, every key in it fresh), so anything that
// writes the vm_id's shared data (another plugin or filter configuration
// with the same vm_id) could give any key a fresh quota.
func TestCorruptStateIsInternal(t *testing.T) {
	cfg := mustConfig(t, `{"slots":1,"rules":[{"name":"r","strategy":"fixed","limit":2,"window":"1s"}]}`)
	r := cfg.Rules[0]
	ds := make([]core.Decision, 1)
	sd := newMemData()
	s := newStore(cfg, sd)
	b := appendState((&slot{}).appendKept(nil, t0, nil, 1), digest("k"), 0, t0+1e6, []core.State{{Algorithm: core.FixedWindow, T: -5, X: 1}})
	sd.set("rl/v3/r/0", b, 0)
	_, err := s.take(r, "k", t0, 1, ds)
	if c := (*outage.Detector)(nil).Classify(0, err); err == nil || c != outage.Internal {
		t.Fatalf("corrupt state: err %v (class %v), allowed %v; want an Internal failure, never a fresh admission", err, c, ds[0].Allowed)
	}

	// Through the filter, on a fail_open rule: 500, never forwarded.
	host := emulate(t, `{"slots":1,"rules":[{"name":"r","strategy":"fixed","limit":2,"window":"1s","key_by":"header:x-user","fail_open":true}]}`)
	b = appendState((&slot{}).appendKept(nil, t0, nil, 1), digest("k"), 0, t0+1e9, []core.State{{Algorithm: core.FixedWindow, T: -5, X: 1}})
	for _, v := range [][]byte{b, []byte("not a slot")} {
		_, cas, err := proxywasm.GetSharedData("rl/v3/r/0")
		if err != nil {
			t.Fatal(err)
		}
		if err := proxywasm.SetSharedData("rl/v3/r/0", v, cas); err != nil {
			t.Fatal(err)
		}
		id := host.InitializeHttpContext()
		host.CallOnRequestHeaders(id, get("/", [2]string{"x-user", "k"}), true)
		if local := host.GetSentLocalResponse(id); local == nil || local.StatusCode != 500 {
			t.Errorf("%q: %+v, want 500 (a corrupt state is never admitted, fail_open or not)", v[:10], local)
		}
	}
}
