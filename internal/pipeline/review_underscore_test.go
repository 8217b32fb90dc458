package pipeline

import (
	"fmt"
	"testing"
)

// Review: a key source reads exactly one field, refusing a second value
// (a decoy) — but "X_API_Key" is another field to the pipeline (net/http's
// canonical "X_api_key", proxy-wasm's "x_api_key") and the same one to
// every CGI-style upstream (PHP, WSGI, Rack: HTTP_X_API_KEY; Envoy's
// headers_with_underscores_action allows it by default, and the proxy
// forwards it). A client sending a fresh "X-API-Key" each time beside its
// real key in "X_API_Key" gets a fresh quota each time while the upstream
// may authenticate the real one: the decoy of issue 19, spelled with "_".
func TestReviewUnderscoreDecoy(t *testing.T) {
	kb := keyBy(t, "api_key:X-API-Key")
	seen := map[string]bool{}
	for i := range 3 {
		r := &Request{Header: headers("X-API-Key", fmt.Sprintf("decoy%d", i), "X_API_Key", "real")}
		k, err := Key(kb, IPKey{}, r, "/")
		if err == nil {
			seen[k] = true
		}
	}
	if len(seen) > 1 {
		t.Fatalf("%d distinct keys for one client whose X_API_Key (HTTP_X_API_KEY to a CGI upstream) stayed the same; want 400 for a field given twice in any spelling", len(seen))
	}
}
