package service

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPostgresBatchedExactness: with -pg-batch the service decides through
// pgstore.Batched, exactly, on both decision paths.
func TestPostgresBatchedExactness(t *testing.T) {
	for _, mode := range []string{"go", "sql"} {
		t.Run(mode, func(t *testing.T) {
			p := newPGEnv(t, `
rules:
  - {name: hot, strategy: sliding_log, limit: 100, window: 1h}
`, pgStoreConfig{Decide: mode, Batch: true}) // the timeouts are a minute: exactness, not latency
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			r := runLoad(client, 32, 0, 400, func(int) *http.Request {
				r, _ := http.NewRequest("POST", p.srv.URL+APIPrefix+"check", strings.NewReader(`{"rule":"hot","key":"k"}`))
				return r
			})
			t.Logf("batched %s on PostgreSQL: admitted %d, denied %d, %.0f req/s, p50 %s, p99 %s", mode, r.codes[200], r.codes[429], r.rate(), r.p50, r.p99)
			require.Zero(t, r.errs)
			require.Equal(t, 100, r.codes[200], "%v", r.codes)
			require.Equal(t, 300, r.codes[429], "%v", r.codes)
		})
	}
}
