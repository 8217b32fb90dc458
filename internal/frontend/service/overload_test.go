package service

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/internal/testkit/pgtest"
)

// Issue 9.4: 256 clients on one hot key of a fail-open rule (limit 400) over
// PostgreSQL were all admitted (5,804 by fail-open) while a light load on
// other keys got 100% 503: saturation was taken for an outage. Now load is
// never admitted (at most the limit passes, nothing by fail_open), the
// excess on the hot key is refused fast, and other keys keep being
// decided by the store.
func TestOverloadNeverAdmits(t *testing.T) {
	dbURL := pgtest.NewMigrated(t)
	cfg, err := ParseConfig("overload.yaml", "yaml", []byte(`
upstream: demo
rules:
  - {name: hot, endpoint: /hot, key_by: global, strategy: fixed, limit: 400, window: 1h, fail_open: true}
  - {name: light, endpoint: /light, key_by: "query:k", strategy: fixed, limit: 1000000, window: 1h, fail_open: true}
`))
	require.NoError(t, err)
	const conns = 4
	// The store's timeouts are the default minute: the excess on the hot
	// key must be refused by the per-key bound, never by a timeout, and no
	// answer may depend on how loaded the machine is (the attack runs
	// in-process).
	st, _ := openPGStore(t, pgStoreConfig{URL: dbURL, MaxConns: conns, Decide: "sql"})
	s, err := New(cfg, Options{Store: st, Logger: quietLogger(), MaxInFlightPerKey: conns / 2})
	require.NoError(t, err)
	srv := httptest.NewServer(s.ProxyHandler())
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}

	var (
		stop                 atomic.Bool
		wg                   sync.WaitGroup
		mu                   sync.Mutex
		hot                  = map[int]int{}
		light                = map[int]int{}
		lightLatency         []time.Duration
		hotFailOpen, hotSeen atomic.Int64
	)
	get := func(path string) (int, bool) {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			return 0, false
		}
		resp.Body.Close()
		// A fail-open admission carries no rate-limit headers.
		return resp.StatusCode, resp.StatusCode == 200 && resp.Header.Get("RateLimit") == ""
	}
	for range 256 {
		wg.Go(func() {
			for !stop.Load() {
				code, failOpen := get("/hot")
				hotSeen.Add(1)
				if failOpen {
					hotFailOpen.Add(1)
				}
				mu.Lock()
				hot[code]++
				mu.Unlock()
			}
		})
	}
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				start := time.Now()
				code, _ := get(fmt.Sprintf("/light?k=u%d-%d", w, i%50))
				d := time.Since(start)
				mu.Lock()
				light[code]++
				lightLatency = append(lightLatency, d)
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	// Until the hot key has seen 4 times its limit and the other keys 40
	// answers: counts, not a time, however slow the machine.
	await.Until(t, "1600 requests on the hot key and 40 answers on the others", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return hotSeen.Load() >= 1600 && len(lightLatency) >= 40
	})
	stop.Store(true)
	wg.Wait()

	slices.Sort(lightLatency)
	p := func(q float64) time.Duration { return lightLatency[int(q*float64(len(lightLatency)-1))] }
	t.Logf("hot key: %v (%d requests); other keys: %v, p50 %s p99 %s", hot, hotSeen.Load(), light, p(.5), p(.99))
	require.LessOrEqual(t, hot[200], 400, "never more than the limit on the hot key")
	require.Zero(t, hotFailOpen.Load(), "load is never admitted by fail_open")
	require.Positive(t, hot[200], "the store decided the hot key")
	total := 0
	for _, n := range light {
		total += n
	}
	require.GreaterOrEqual(t, float64(light[200]), 0.9*float64(total), "other keys keep being decided")
}
