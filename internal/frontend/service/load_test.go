package service

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/memstore"
)

// TestLoad measures the decision API and the proxy on loopback against
// floors in the same run (a bare net/http handler, a bare
// httputil.ReverseProxy) and checks exactness on one hot key for every
// algorithm. It prints the figures (go test -run TestLoad -v) and asserts
// only exactness, never timings. RL_LOAD_DURATION sets each throughput
// phase's length (default 200ms: the suite checks that the phases run and
// every answer is right; figures to publish take RL_LOAD_DURATION=3s);
// RL_LOAD_CONCURRENCY the clients (default 64).
func TestLoad(t *testing.T) {
	dur := 200 * time.Millisecond
	if v := os.Getenv("RL_LOAD_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		dur = d
	}
	conc := 64
	if v := os.Getenv("RL_LOAD_CONCURRENCY"); v != "" {
		fmt.Sscan(v, &conc)
	}

	// The upstream and the bare floor handler: read the body, answer a small
	// JSON document.
	okBody := []byte(`{"allowed":true}` + "\n")
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(okBody)
	})
	floorSrv := httptest.NewServer(bare)
	defer floorSrv.Close()
	upURL, _ := url.Parse(floorSrv.URL)

	transport := func() *http.Transport {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 512
		return tr
	}
	floorProxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(upURL); pr.SetXForwarded() },
		Transport: transport(),
	})
	defer floorProxy.Close()

	cfg, err := ParseConfig("load.yaml", "yaml", []byte(`
upstream: `+floorSrv.URL+`
rules:
  - {name: api, strategy: token, limit: 1000000000, window: 1s}
  - {name: proxy, endpoint: /p, key_by: "header:X-User", strategy: token, limit: 1000000000, window: 1s}
  - {name: hot_fixed, strategy: fixed, limit: 1000, window: 10000d}
  - {name: hot_sliding, strategy: sliding, limit: 1000, window: 10000d}
  - {name: hot_log, strategy: sliding_log, limit: 1000, window: 1h}
  - {name: hot_token, strategy: token, limit: 1000, window: 10000d}
  - {name: hot_leaky, strategy: leaky, limit: 1000, window: 10000d}
  - {name: hot_gcra, strategy: gcra, limit: 1000, window: 10000d}
  - {name: hot_proxy, endpoint: /hot, key_by: global, strategy: sliding_log, limit: 1000, window: 1h}
  - {name: hot_proxy_multi, endpoint: /hotmulti, key_by: global, limits: [{name: burst, strategy: token, limit: 1500, window: 10000d}, {name: daily, strategy: fixed, limit: 1000, window: 10000d}]}
`))
	require.NoError(t, err)
	mem := memstore.New(&memstore.Config{Decider: wasmPool(t)})
	defer mem.Close()
	svc, err := New(cfg, Options{Store: mem, Logger: quietLogger(), Transport: transport()})
	require.NoError(t, err)
	svcSrv := httptest.NewServer(testHandler(svc))
	defer svcSrv.Close()
	// The same service with the native core, to show what hosting WASM costs.
	nativeMem := memstore.New(nil)
	defer nativeMem.Close()
	native, err := New(cfg, Options{Store: nativeMem, Logger: quietLogger(), Transport: transport()})
	require.NoError(t, err)
	nativeSrv := httptest.NewServer(testHandler(native))
	defer nativeSrv.Close()

	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 4 * conc, MaxIdleConnsPerHost: 2 * conc, DisableCompression: true}}
	const keys = 1000
	apiBodies := make([][]byte, keys)
	for i := range apiBodies {
		apiBodies[i] = fmt.Appendf(nil, `{"rule":"api","key":"user-%d"}`, i)
	}
	post := func(base string, bodies [][]byte) func(i int) *http.Request {
		return func(i int) *http.Request {
			r, _ := http.NewRequest("POST", base+APIPrefix+"check", bytes.NewReader(bodies[i%len(bodies)]))
			return r
		}
	}
	get := func(base, path string) func(i int) *http.Request {
		users := make([]string, keys)
		for i := range users {
			users[i] = fmt.Sprintf("user-%d", i)
		}
		return func(i int) *http.Request {
			r, _ := http.NewRequest("GET", base+path, nil)
			r.Header.Set("X-User", users[i%keys])
			return r
		}
	}

	// Warm up connections, the WASM instances and the keys.
	runLoad(client, conc, 200*time.Millisecond, 0, post(svcSrv.URL, apiBodies))
	runLoad(client, conc, 200*time.Millisecond, 0, get(svcSrv.URL, "/p"))
	runLoad(client, conc, 200*time.Millisecond, 0, post(nativeSrv.URL, apiBodies))

	// Phases alternate in rounds, so that a change in the machine's other
	// load touches every phase alike.
	phases := []struct {
		name string
		mk   func(int) *http.Request
	}{
		{"floor: bare net/http handler", post(floorSrv.URL, apiBodies)},
		{"decision API: POST /v1/ratelimit/check", post(svcSrv.URL, apiBodies)},
		{"floor: bare httputil.ReverseProxy", get(floorProxy.URL, "/p")},
		{"proxy filter: GET /p", get(svcSrv.URL, "/p")},
		{"decision API, native core (-decider native)", post(nativeSrv.URL, apiBodies)},
	}
	const rounds = 4
	results := make([]loadResult, len(phases))
	for range rounds {
		for i, ph := range phases {
			results[i] = results[i].merge(runLoad(client, conc, dur/rounds, 0, ph.mk))
			results[i].name = ph.name
		}
	}
	nativeRun := results[4]
	results = results[:4]
	var b strings.Builder
	fmt.Fprintf(&b, "\nload on loopback: %d clients, %s per phase (4 alternating rounds), GOMAXPROCS %d, %s, WASM decider, memory store, 1000 keys\n",
		conc, dur, runtime.GOMAXPROCS(0), runtime.GOARCH)
	fmt.Fprintf(&b, "%-42s %10s %12s %10s %10s %8s\n", "phase", "requests", "req/s", "p50", "p99", "vs floor")
	for i, r := range results {
		ratio := ""
		if i%2 == 1 {
			ratio = fmt.Sprintf("%.0f%%", 100*r.rate()/results[i-1].rate())
		}
		fmt.Fprintf(&b, "%-42s %10d %12.0f %10s %10s %8s\n", r.name, r.n, r.rate(), r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), ratio)
	}
	fmt.Fprintf(&b, "%-42s %10d %12.0f %10s %10s %8s\n", nativeRun.name, nativeRun.n, nativeRun.rate(), nativeRun.p50.Round(time.Microsecond),
		nativeRun.p99.Round(time.Microsecond), fmt.Sprintf("%.0f%%", 100*nativeRun.rate()/results[0].rate()))
	for _, r := range append(results, nativeRun) {
		require.Zero(t, r.errs, "%s: transport errors", r.name)
		require.Equal(t, r.n, r.codes[200], "%s: every request admitted: %v", r.name, r.codes)
	}

	// Exactness: on one hot key, exactly the limit is admitted, however many
	// clients race for it.
	fmt.Fprintf(&b, "\nexactness on one hot key, %d clients, 3000 requests each:\n", conc)
	for _, c := range []struct{ name, rule, path string }{
		{"api fixed_window", "hot_fixed", ""},
		{"api sliding_window", "hot_sliding", ""},
		{"api sliding_log", "hot_log", ""},
		{"api token_bucket", "hot_token", ""},
		{"api leaky_bucket", "hot_leaky", ""},
		{"api gcra", "hot_gcra", ""},
		{"proxy sliding_log", "", "/hot"},
		{"proxy token_bucket + fixed_window", "", "/hotmulti"},
	} {
		mk := get(svcSrv.URL, c.path)
		if c.rule != "" {
			mk = post(svcSrv.URL, [][]byte{fmt.Appendf(nil, `{"rule":%q,"key":"hot"}`, c.rule)})
		}
		r := runLoad(client, conc, 0, 3000, mk)
		fmt.Fprintf(&b, "  %-36s admitted %4d  denied %4d  (%.0f req/s, p99 %s)\n", c.name, r.codes[200], r.codes[429], r.rate(), r.p99.Round(time.Microsecond))
		require.Zero(t, r.errs, c.name)
		require.Equal(t, 1000, r.codes[200], "%s: admitted exactly the limit: %v", c.name, r.codes)
		require.Equal(t, 2000, r.codes[429], "%s: %v", c.name, r.codes)
	}
	t.Log(b.String())
}

type loadResult struct {
	name     string
	n, errs  int
	codes    map[int]int
	elapsed  time.Duration
	p50, p99 time.Duration
	lat      []time.Duration // sorted
}

// merge adds the requests of o to r.
func (r loadResult) merge(o loadResult) loadResult {
	if r.codes == nil {
		r.codes = map[int]int{}
	}
	for c, n := range o.codes {
		r.codes[c] += n
	}
	r.errs += o.errs
	r.elapsed += o.elapsed
	r.lat = append(r.lat, o.lat...)
	slices.Sort(r.lat)
	r.n = len(r.lat)
	if r.n > 0 {
		r.p50, r.p99 = r.lat[r.n/2], r.lat[r.n*99/100]
	}
	return r
}

func (r loadResult) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

// runLoad sends requests from conc clients for dur, or until total requests
// are sent when total > 0, and measures each one.
func runLoad(client *http.Client, conc int, dur time.Duration, total int, mk func(i int) *http.Request) loadResult {
	ctx := context.Background()
	if total == 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dur)
		defer cancel()
	}
	var next atomic.Int64
	lat := make([][]time.Duration, conc)
	codes := make([]map[int]int, conc)
	errs := make([]int, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		codes[w] = map[int]int{}
		lat[w] = make([]time.Duration, 0, 4096)
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if total > 0 && i >= total {
					return
				}
				t0 := time.Now()
				resp, err := client.Do(mk(i))
				if err != nil {
					if ctx.Err() == nil {
						errs[w]++
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat[w] = append(lat[w], time.Since(t0))
				codes[w][resp.StatusCode]++
			}
		})
	}
	wg.Wait()
	r := loadResult{elapsed: time.Since(start), codes: map[int]int{}}
	var all []time.Duration
	for w := range conc {
		all = append(all, lat[w]...)
		for c, n := range codes[w] {
			r.codes[c] += n
		}
		r.errs += errs[w]
	}
	r.n = len(all)
	if r.n > 0 {
		slices.Sort(all)
		r.p50, r.p99 = all[r.n/2], all[r.n*99/100]
	}
	r.lat = all
	return r
}
