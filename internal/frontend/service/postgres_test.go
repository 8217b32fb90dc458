package service

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/failover"
	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/internal/testkit/tcpproxy"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/pgstore"
	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/store"
)

// pgStoreConfig is what the tests vary of the PostgreSQL store, built as
// the command builds it for -store postgres.
type pgStoreConfig struct {
	URL string
	// Decide is "sql" (default) or "go" (the embedded WebAssembly core).
	Decide string
	// Batch decides through pgstore.Batched.
	Batch    bool
	MaxConns int32
	// Pool, if set, is the pool the store decides on (URL is still
	// migrated); by default openPGStore opens one on URL.
	Pool *pgxpool.Pool
	// Timeout and QueueTimeout default to a minute each: generous, so that
	// no decision of a healthy phase times out however loaded the machine
	// is. A test of a timeout sets a short one where the database cannot
	// answer (a frozen proxy), so that it must fire.
	Timeout, QueueTimeout time.Duration
	// Failover puts a memstore behind a breaker (failover.Store), which
	// reports to OnFailover as the command's service.FailoverEvent.
	Failover          bool
	FailoverThreshold int
	FailoverCooldown  time.Duration
	OnFailover        func(to string)
}

// openPGStore migrates c.URL (as the command's -migrate does: nothing to do
// on a copy of the migrated template, pgtest.NewMigrated) and returns the store over it, closed when
// the test ends, and its readiness check (nil with failover, which serves
// while the database is down).
func openPGStore(t testing.TB, c pgStoreConfig) (store.Store, func(context.Context) error) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, migrations.Up(ctx, c.URL))
	pool := c.Pool
	if pool == nil {
		pcfg, err := pgxpool.ParseConfig(c.URL)
		require.NoError(t, err)
		if c.MaxConns > 0 {
			pcfg.MaxConns = c.MaxConns
		}
		pool, err = pgxpool.NewWithConfig(ctx, pcfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
	}
	var err error
	cfg := pgstore.Config{Mode: pgstore.ModeSQL, Durability: pgstore.DurabilityFast,
		Timeout: cmp.Or(c.Timeout, time.Minute), QueueTimeout: cmp.Or(c.QueueTimeout, time.Minute)}
	switch c.Decide {
	case "go":
		cfg.Mode, cfg.Decider = pgstore.ModeGo, wasmPool(t)
	case "", "sql":
	default:
		t.Fatalf("Decide %q", c.Decide)
	}
	var pg interface {
		store.Store
		Close() error
	}
	if c.Batch {
		pg, err = pgstore.NewBatched(pool, cfg, pgstore.BatchConfig{})
	} else {
		pg, err = pgstore.New(pool, cfg)
	}
	require.NoError(t, err)
	t.Cleanup(func() { pg.Close() })
	if !c.Failover {
		return pg, pool.Ping
	}
	mem := memstore.New(nil)
	t.Cleanup(func() { mem.Close() })
	fo, err := failover.New(failover.Config{Primary: pg, Fallback: mem,
		Threshold: c.FailoverThreshold, Cooldown: c.FailoverCooldown,
		OnChange: func(from, to failover.State) {
			switch {
			case to == failover.Open && from == failover.Closed:
				c.OnFailover("memory")
			case to == failover.Closed:
				c.OnFailover("primary")
			}
		}})
	require.NoError(t, err)
	return fo, nil
}

// pgEnv serves yaml's rules over PostgreSQL (a fresh database, migrated by
// the service) reached through a TCP proxy the test can cut.
type pgEnv struct {
	*env
	px    *tcpproxy.Proxy
	dbURL string // direct, not through the proxy
}

func newPGEnv(t *testing.T, yaml string, pc pgStoreConfig) *pgEnv {
	t.Helper()
	dbURL := pgtest.NewMigrated(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	px, err := tcpproxy.New(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { px.Close() })
	u.Host = px.Addr()
	pc.URL = u.String()

	cfg, err := ParseConfig("pg.yaml", "yaml", []byte(yaml))
	require.NoError(t, err)
	var svc atomic.Pointer[Service]
	pc.OnFailover = func(to string) {
		if s := svc.Load(); s != nil {
			s.FailoverEvent(to)
		}
	}
	st, ready := openPGStore(t, pc)
	s, err := New(cfg, Options{Store: st, Ready: ready, Logger: quietLogger()})
	require.NoError(t, err)
	svc.Store(s)
	e := &env{svc: s, srv: httptest.NewServer(testHandler(s))}
	t.Cleanup(e.srv.Close)
	return &pgEnv{env: e, px: px, dbURL: dbURL}
}

func (p *pgEnv) sqlRemaining(t *testing.T, key, alg string, limit int64, window string) int64 {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, p.dbURL)
	require.NoError(t, err)
	defer c.Close(ctx)
	var rem int64
	require.NoError(t, c.QueryRow(ctx, "SELECT remaining FROM rl.rl_peek($1, $2, $3, $4::interval, 0)", key, alg, limit, window).Scan(&rem))
	return rem
}

// The service decides on the same rows as rl_allow(): "rule:key".
func TestPostgresSharesRowsWithSQL(t *testing.T) {
	for _, mode := range []string{"go", "sql"} {
		t.Run("decide="+mode, func(t *testing.T) {
			p := newPGEnv(t, `rules: [{name: r, strategy: fixed, limit: 5, window: 1h}]`, pgStoreConfig{Decide: mode})
			for range 2 {
				require.Equal(t, 200, p.post(t, "check", `{"rule":"r","key":"k"}`).code)
			}
			require.Equal(t, int64(3), p.sqlRemaining(t, "r:k", "fixed_window", 5, "1 hour"))
			ctx := context.Background()
			c, err := pgx.Connect(ctx, p.dbURL)
			require.NoError(t, err)
			defer c.Close(ctx)
			_, err = c.Exec(ctx, "SELECT rl.rl_allow('r:k', 'fixed_window', 5, '1 hour', 2)")
			require.NoError(t, err)
			r := p.post(t, "check", `{"rule":"r","key":"k"}`)
			require.Equal(t, 200, r.code)
			require.Equal(t, int64(0), r.decision(t).Remaining)
			require.Equal(t, 429, p.post(t, "check", `{"rule":"r","key":"k"}`).code)
			require.Equal(t, 200, p.post(t, "reset", `{"rule":"r","key":"k"}`).code)
			require.Equal(t, int64(5), p.sqlRemaining(t, "r:k", "fixed_window", 5, "1 hour"))
			require.Equal(t, 200, p.do(t, "GET", "/readyz", "").code)
		})
	}
}

func TestPostgresExactness(t *testing.T) {
	p := newPGEnv(t, `
upstream: demo
rules:
  - {name: hot, strategy: sliding_log, limit: 100, window: 1h}
  - {name: hotp, endpoint: /hot, key_by: global, limits: [{name: b, strategy: token, limit: 150, window: 1000d}, {name: d, strategy: fixed, limit: 100, window: 10000d}]}
`, pgStoreConfig{}) // 32 clients queue on one row: this measures exactness, not latency (the timeouts are a minute)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	body := [][]byte{[]byte(`{"rule":"hot","key":"k"}`)}
	for _, c := range []struct {
		name string
		mk   func(int) *http.Request
	}{
		{"api", func(int) *http.Request {
			r, _ := http.NewRequest("POST", p.srv.URL+APIPrefix+"check", strings.NewReader(string(body[0])))
			return r
		}},
		{"proxy", func(int) *http.Request { r, _ := http.NewRequest("GET", p.srv.URL+"/hot", nil); return r }},
	} {
		r := runLoad(client, 32, 0, 400, c.mk)
		t.Logf("%s on PostgreSQL: admitted %d, denied %d, %.0f req/s, p50 %s, p99 %s", c.name, r.codes[200], r.codes[429], r.rate(), r.p50, r.p99)
		require.Zero(t, r.errs)
		require.Equal(t, 100, r.codes[200], "%s: %v", c.name, r.codes)
		require.Equal(t, 300, r.codes[429], "%s: %v", c.name, r.codes)
	}
}

// answer is one request of the outage test.
type answer struct {
	start, end time.Time
	code       string // "200", "200 fail_open", "429", "503", "error"
}

// hammer checks rule on a few keys from a few clients until stop.
func hammer(base, rule string, out *[]answer, mu *sync.Mutex, stop <-chan struct{}, wg *sync.WaitGroup) {
	client := &http.Client{} // no time bound: an answer that never came would fail the test at its deadline
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				a := answer{start: time.Now()}
				resp, err := client.Post(base+APIPrefix+"check", "application/json",
					strings.NewReader(fmt.Sprintf(`{"rule":%q,"key":"w%d-%d"}`, rule, w, i%50)))
				if err != nil {
					a.code = "error"
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					a.code = fmt.Sprint(resp.StatusCode)
					if resp.StatusCode == 200 {
						var d DecisionJSON
						json.Unmarshal(b, &d)
						if d.FailOpen {
							a.code += " fail_open"
						}
					}
				}
				a.end = time.Now()
				mu.Lock()
				*out = append(*out, a)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
}

// PostgreSQL is cut while requests run: every request is answered by its
// rule's fail policy, promptly, and decisions resume on PostgreSQL when it
// comes back, without a restart.
//
// Each phase lasts until enough answers came, never a fixed time. The
// store's timeouts are an hour: an answer during the cut that came from a
// timeout, not from the cut connection, would never come, and the test
// would fail at its deadline.
func TestPostgresOutage(t *testing.T) {
	p := newPGEnv(t, `
rules:
  - {name: open, strategy: token, limit: 1000000, window: 1s, fail_open: true}
  - {name: closed, strategy: token, limit: 1000000, window: 1s}
`, pgStoreConfig{Timeout: time.Hour, QueueTimeout: time.Hour})
	// Warm up: connections, prepared statements, WASM instances.
	for i := range 20 {
		require.Equal(t, 200, p.post(t, "check", fmt.Sprintf(`{"rule":"closed","key":"warm%d"}`, i)).code)
	}
	var mu sync.Mutex
	answers := map[string]*[]answer{"open": {}, "closed": {}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for rule, out := range answers {
		hammer(p.srv.URL, rule, out, &mu, stop, &wg)
	}
	// started counts, for each rule, the answers to requests started after t0.
	started := func(t0 time.Time, n int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, out := range answers {
				k := 0
				for _, a := range *out {
					if a.start.After(t0) {
						k++
					}
				}
				if k < n {
					return false
				}
			}
			return true
		}
	}
	await.Until(t, "20 answers of each rule before the cut", started(time.Time{}, 20))
	cutAt := time.Now()
	p.px.Cut()
	cutDone := time.Now()
	require.Equal(t, 503, p.do(t, "GET", "/readyz", "").code, "not ready without the database")
	await.Until(t, "60 answers of each rule during the cut", started(cutDone, 60))
	restoredAt := time.Now()
	p.px.Restore()
	// Recovery: the closed rule decides on PostgreSQL again.
	await.Until(t, "a decision on PostgreSQL after the database came back", func() bool {
		return p.post(t, "check", `{"rule":"closed","key":"probe"}`).code == 200
	})
	healedAt := time.Now()
	await.Until(t, "20 answers of each rule after the recovery", started(healedAt, 20))
	close(stop)
	wg.Wait()

	// Phases: before (answered before the cut began), the outage (started
	// once the cut was in effect and answered before the database was
	// back), after (started after the recovery was seen), and the edges in
	// between (in flight while the cut was made, however long a loaded
	// machine takes to make it, or while the pool reconnects: they may
	// still or already reach the database, so only their soundness is
	// checked).
	for rule, out := range answers {
		phases := map[string]map[string]int{"before": {}, "cut": {}, "edge": {}, "after": {}}
		slowest := time.Duration(0)
		for _, a := range *out {
			ph := "edge"
			switch {
			case a.end.Before(cutAt):
				ph = "before"
			case a.start.After(cutDone) && a.end.Before(restoredAt):
				ph = "cut"
			case a.start.After(healedAt):
				ph = "after"
			}
			phases[ph][a.code]++
			slowest = max(slowest, a.end.Sub(a.start))
		}
		t.Logf("%-6s before %v, outage %v, edges %v, after %v; slowest answer %s", rule, phases["before"], phases["cut"], phases["edge"], phases["after"], slowest.Round(time.Millisecond))
		for ph, codes := range phases {
			require.Zero(t, codes["error"], "%s %s: transport errors (a crash?)", rule, ph)
		}
		before, cut, edge, after := phases["before"], phases["cut"], phases["edge"], phases["after"]
		require.Equal(t, sum(before), before["200"], "%s before: all decided", rule)
		require.Equal(t, sum(after), after["200"], "%s after: all decided on PostgreSQL again", rule)
		require.Positive(t, before["200"])
		require.Positive(t, after["200"])
		if rule == "open" {
			require.Equal(t, sum(cut), cut["200 fail_open"], "fail_open rule: every request admitted, none decided on the cut database: %v", cut)
			// At the edges a decision may time out after it began before a
			// reconnect's first success: the outage rule refuses that (a
			// timeout is load until it is proven an outage), and a refusal
			// is always safe.
			require.Equal(t, sum(edge), edge["200 fail_open"]+edge["200"]+edge["503"], "fail_open rule: admitted, or refused at the edges: %v", edge)
		} else {
			require.Equal(t, sum(cut), cut["503"], "fail-closed rule: every request refused with 503, none decided on the cut database: %v", cut)
			require.Equal(t, sum(edge), edge["503"]+edge["200"], "fail-closed rule: refused with 503 when undecided: %v", edge)
		}
	}
	m := string(p.do(t, "GET", "/metrics", "").body)
	require.Regexp(t, `rate_limiter_fail_open_total\{rule="open"\} [1-9]`, m)
	require.Regexp(t, `rl_decisions_total\{outcome="fail_closed",rule="closed"\} [1-9]`, m)
	require.Equal(t, 200, p.do(t, "GET", "/readyz", "").code)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// With failover, an outage is served from memory behind the breaker (limits
// still enforced, per process), and decisions return to PostgreSQL, whose
// state resumes where it was, when it recovers.
func TestPostgresFailover(t *testing.T) {
	p := newPGEnv(t, `rules: [{name: r, strategy: fixed, limit: 10, window: 10000d}]`,
		pgStoreConfig{Failover: true, FailoverThreshold: 2, FailoverCooldown: 300 * time.Millisecond})
	for range 4 {
		require.Equal(t, 200, p.post(t, "check", `{"rule":"r","key":"k"}`).code)
	}
	require.Equal(t, int64(6), p.sqlRemaining(t, "r:k", "fixed_window", 10, "10000 days"))

	p.px.Cut()
	codes := map[int]int{}
	for range 12 {
		r := p.post(t, "check", `{"rule":"r","key":"k"}`)
		codes[r.code]++
		if r.code == 200 {
			require.False(t, r.decision(t).FailOpen, "decided in memory, not failed open")
		}
	}
	require.Equal(t, map[int]int{200: 10, 429: 2}, codes, "memory enforces the limit (from a fresh count)")
	require.Equal(t, 200, p.do(t, "GET", "/readyz", "").code, "ready: the failover serves")
	m := string(p.do(t, "GET", "/metrics", "").body)
	require.Contains(t, m, `rl_failover_events_total{to="memory"} 1`)
	require.Contains(t, m, "rl_failover_active 1")

	p.px.Restore()
	await.Until(t, "the breaker to close", func() bool {
		if strings.Contains(string(p.do(t, "GET", "/metrics", "").body), `rl_failover_events_total{to="primary"} 1`) {
			return true
		}
		p.post(t, "check", `{"rule":"r","key":"probe"}`) // calls drive the half-open probe
		return false
	})
	// Back on PostgreSQL: its count (4) resumes.
	r := p.post(t, "check", `{"rule":"r","key":"k"}`)
	require.Equal(t, 200, r.code)
	require.Equal(t, int64(5), r.decision(t).Remaining)
	require.Contains(t, string(p.do(t, "GET", "/metrics", "").body), "rl_failover_active 0")
}
