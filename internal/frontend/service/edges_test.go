package service

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/memstore"
)

// edgeEnv serves a configuration's proxy alone, its decision API alone
// (loopback, no tokens: admin) and everything on one listener, over a
// memstore with a frozen clock.
type edgeEnv struct {
	svc             *Service
	proxy, api, all *httptest.Server
}

func newEdgeEnv(t *testing.T, yaml string) *edgeEnv {
	t.Helper()
	cfg, err := ParseConfig("test.yaml", "yaml", []byte(yaml))
	require.NoError(t, err)
	now := &atomic.Int64{}
	now.Store(t0 + 10_000_000)
	mem := memstore.New(&memstore.Config{Clock: now.Load, SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	svc, err := New(cfg, Options{Store: mem, Clock: now.Load, Logger: quietLogger()})
	require.NoError(t, err)
	e := &edgeEnv{svc: svc, proxy: httptest.NewServer(svc.ProxyHandler()), api: httptest.NewServer(svc.APIHandler()),
		all: httptest.NewServer(svc.Handler())}
	t.Cleanup(e.proxy.Close)
	t.Cleanup(e.api.Close)
	t.Cleanup(e.all.Close)
	return e
}

// rawReply is a response read off the wire, with the 1xx responses before it.
type rawReply struct {
	code    int
	h       http.Header
	body    string
	interim []http.Header
}

// rawDo sends one request exactly as written (the request target is not
// cleaned or escaped by a client library) and reads the answer.
func rawDo(t *testing.T, srv *httptest.Server, method, target string, hdr ...string) rawReply {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close() // no read deadline: only the test's bounds the answer
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", method, target)
	host, conn1 := "example.test", "close"
	for i := 0; i+1 < len(hdr); i += 2 {
		switch hdr[i] {
		case "Host":
			host = hdr[i+1]
		case "Connection":
			conn1 = hdr[i+1]
		default:
			fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
		}
	}
	fmt.Fprintf(&b, "Host: %s\r\nConnection: %s\r\n\r\n", host, conn1)
	_, err = io.WriteString(conn, b.String())
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	var r rawReply
	for {
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err, "%s %s", method, target)
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			r.interim = append(r.interim, resp.Header)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		r.code, r.h, r.body = resp.StatusCode, resp.Header, string(body)
		return r
	}
}

// recorder is an upstream that records the request target of every
// request reaching it.
type recorder struct {
	srv     *httptest.Server
	mu      sync.Mutex
	targets []string
}

func newRecorder(t *testing.T) *recorder {
	u := &recorder{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.targets = append(u.targets, r.RequestURI)
		u.mu.Unlock()
		io.WriteString(w, "upstream "+r.RequestURI)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *recorder) got() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.targets...)
}

// Issue 9 item 3: with /admin exhausted, no spelling of /admin reaches the
// upstream, nothing leaves the upstream's base path, and what is forwarded
// is exactly the cleaned path that was matched.
func TestNonCanonicalPathsCannotSkipARule(t *testing.T) {
	up := newRecorder(t)
	e := newEdgeEnv(t, `
upstream: `+up.srv.URL+`/base
rules:
  - {name: admin, endpoint: /admin, strategy: fixed, limit: 1, window: 1m, key_by: global}
`)
	r := rawDo(t, e.proxy, "GET", "/admin")
	require.Equal(t, 200, r.code)
	require.Equal(t, []string{"/base/admin"}, up.got())
	require.Equal(t, 429, rawDo(t, e.proxy, "GET", "/admin").code)

	denied := []string{
		"/x/%2e%2e/admin", "/x/%2E%2E/admin", "/x/%2E%2e/admin", "/x/.%2e/admin",
		"//admin", "///admin", "/./admin", "/x/../admin", "/x/y/../../admin", "/admin;x", "/admin;x/y",
		"/x/..;/admin", "/;x/admin", "/ADMIN", "/Admin/", "/%61dmin", "/%41DMIN", "/admin/", "/admin/./sub",
		"/admin?x=1", "/admin//sub",
	}
	for _, p := range denied {
		r := rawDo(t, e.proxy, "GET", p)
		require.Equal(t, 429, r.code, "%s was not decided by the /admin rule: %s", p, r.body)
		require.Equal(t, "Rate limit exceeded\n", r.body, p)
	}
	refused := []string{
		"/../outside", "/../admin", "/x/../../admin", "/%2e%2e/admin", "/..;/admin",
		"/x%2F..%2Fadmin", "/x/%2f../admin", "/admin%2Fx", "/x%5C..%5Cadmin", "/x%5c..%5cadmin", `/x\..\admin`,
		"/admin%00", "/admin%0Ax", "/admin%0d%0a", "/admin%7f", "/%2561dmin",
	}
	for _, p := range refused {
		r := rawDo(t, e.proxy, "GET", p)
		require.Equal(t, 400, r.code, "%s: %s", p, r.body)
		require.Contains(t, r.body, "invalid request path", p)
	}
	require.Equal(t, []string{"/base/admin"}, up.got(), "nothing more reached the upstream")
	m := string(rawDo(t, e.api, "GET", "/metrics").body)
	require.Contains(t, m, fmt.Sprintf(`rl_rejected_requests_total{reason="invalid_path"} %d`, len(refused)))

	// On the shared listener net/http's mux redirects some forms to the
	// clean path first; none of them reaches the upstream either.
	for _, p := range append(denied, refused...) {
		r := rawDo(t, e.all, "GET", p)
		require.Contains(t, []int{301, 307, 308, 400, 429}, r.code, p)
	}
	require.Equal(t, []string{"/base/admin"}, up.got(), "nothing more reached the upstream")

	// Paths no rule matches are forwarded exactly as they were matched,
	// under the base path.
	for p, want := range map[string]string{
		"/x/../y":                 "/base/y",
		"/x/%2e%2e/y/./z//w":      "/base/y/z/w",
		"//y":                     "/base/y",
		"/p;jsessionid=1":         "/base/p;jsessionid=1",
		"/a%3bb":                  "/base/a%3Bb",
		"/%7Euser/%41":            "/base/~user/A",
		"/a%20b/c%c3%a9?q=%2e%2e": "/base/a%20b/c%C3%A9?q=%2e%2e",
		"/Y/":                     "/base/Y/",
		"/":                       "/base/",
	} {
		before := len(up.got())
		r := rawDo(t, e.proxy, "GET", p)
		require.Equal(t, 200, r.code, p)
		got := up.got()
		require.Len(t, got, before+1, p)
		require.Equal(t, want, got[before], p)
	}
}

// Host rules match whatever the case, port or trailing dots of the Host
// header (or of the host in an absolute request target).
func TestHostRulesAreCanonical(t *testing.T) {
	up := newRecorder(t)
	e := newEdgeEnv(t, `
upstream: `+up.srv.URL+`
rules:
  - {name: h, host: "API.Example.COM", strategy: fixed, limit: 1, window: 1m, key_by: global}
  - {name: w, host: "*.Example.ORG", endpoint: /w, strategy: fixed, limit: 1, window: 1m, key_by: global}
`)
	require.Equal(t, 200, rawDo(t, e.proxy, "GET", "/", "Host", "api.example.com").code)
	for _, h := range []string{"api.example.com", "API.EXAMPLE.COM", "api.example.com.", "Api.Example.Com.:8080", "api.example.com:443"} {
		require.Equal(t, 429, rawDo(t, e.proxy, "GET", "/x", "Host", h).code, h)
	}
	require.Equal(t, 200, rawDo(t, e.proxy, "GET", "/x", "Host", "other.example.com").code, "no rule: unlimited")
	require.Equal(t, 200, rawDo(t, e.proxy, "GET", "/x", "Host", "other.example.com").code, "no rule: unlimited")

	require.Equal(t, 200, rawDo(t, e.proxy, "GET", "/w", "Host", "a.example.org").code)
	for _, h := range []string{"B.EXAMPLE.ORG", "c.example.org.", "d.Example.Org:80"} {
		require.Equal(t, 429, rawDo(t, e.proxy, "GET", "/w", "Host", h).code, h)
	}
	// The absolute form of the request target names the host too.
	require.Equal(t, 429, rawDo(t, e.proxy, "GET", "http://API.example.com./x", "Host", "other.example.com").code)
}

// Issue 9 item 7: key_by: ip keys IPv6 clients by /64 and IPv4 by /32,
// both configurable.
func TestClientIPPrefixesInConfig(t *testing.T) {
	up := newRecorder(t)
	conf := func(extra string) *edgeEnv {
		return newEdgeEnv(t, "upstream: "+up.srv.URL+"\ntrusted_proxies: [127.0.0.1]\n"+extra+
			"rules: [{name: ip, endpoint: /, strategy: fixed, limit: 1, window: 1m, key_by: ip}]\n")
	}
	from := func(e *edgeEnv, ip string) int {
		return rawDo(t, e.proxy, "GET", "/", "X-Forwarded-For", ip).code
	}
	e := conf("")
	require.Equal(t, 200, from(e, "2001:db8:1:2::1"))
	require.Equal(t, 429, from(e, "2001:db8:1:2::2"), "same /64")
	require.Equal(t, 429, from(e, "2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "same /64")
	require.Equal(t, 200, from(e, "2001:db8:1:3::1"), "another /64")
	require.Equal(t, 200, from(e, "203.0.113.1"))
	require.Equal(t, 429, from(e, "::ffff:203.0.113.1"), "IPv4-mapped is IPv4")
	require.Equal(t, 200, from(e, "203.0.113.2"), "IPv4 by address")

	e = conf("ipv4_prefix: 24\nipv6_prefix: 48\n")
	require.Equal(t, 200, from(e, "2001:db8:1:2::1"))
	require.Equal(t, 429, from(e, "2001:db8:1:3::1"), "same /48")
	require.Equal(t, 200, from(e, "2001:db8:2::1"), "another /48")
	require.Equal(t, 200, from(e, "203.0.113.1"))
	require.Equal(t, 429, from(e, "203.0.113.200"), "same /24")
	require.Equal(t, 200, from(e, "203.0.114.1"), "another /24")

	for _, c := range []struct{ yaml, field string }{
		{"ipv4_prefix: 0", "ipv4_prefix: 0 is outside [1, 32]"},
		{"ipv4_prefix: 33", "ipv4_prefix: 33 is outside [1, 32]"},
		{"ipv6_prefix: 129", "ipv6_prefix: 129 is outside [1, 128]"},
		{"ipv6_prefix: -1", "ipv6_prefix: -1 is outside [1, 128]"},
		{`ipv6_prefix: "64"`, "ipv6_prefix: want an integer"},
	} {
		_, err := ParseConfig("p.yaml", "yaml", []byte(c.yaml+"\nrules: [{name: r, strategy: fixed, limit: 1, window: 1s}]\n"))
		var ce *ConfigError
		require.ErrorAs(t, err, &ce, c.yaml)
		require.Contains(t, err.Error(), c.field)
	}
}

// hungUpstream accepts connections, reads them and never answers.
func hungUpstream(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// Issue 9 item 8: an upstream that never answers, or answers too late, is
// a 504 after upstream_timeout, never a client held without end or an
// empty reply.
func TestUpstreamTimeout(t *testing.T) {
	rules := "rules: [{name: r, endpoint: /limited, strategy: fixed, limit: 100, window: 1m, key_by: global}]\n"
	client := &http.Client{}
	get := func(e *edgeEnv, path string) (int, string) {
		t.Helper()
		resp, err := client.Get(e.proxy.URL + path)
		require.NoError(t, err, "the client got no answer")
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}

	e := newEdgeEnv(t, "upstream: "+hungUpstream(t)+"\nupstream_timeout: 200ms\n"+rules)
	for _, p := range []string{"/limited", "/unlimited"} {
		code, body := get(e, p)
		require.Equal(t, 504, code, p)
		require.Contains(t, body, "Gateway timeout", p)
	}

	// An answer too late: the upstream answers only once the proxy has
	// given up on it (its request's context ends when the proxy drops the
	// connection), so the timeout fires however slow the machine.
	late := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		io.WriteString(w, "late")
	}))
	t.Cleanup(late.Close)
	e = newEdgeEnv(t, "upstream: "+late.URL+"\nupstream_timeout: 100ms\n"+rules)
	code, _ := get(e, "/limited")
	require.Equal(t, 504, code)

	// A slow answer within a generous timeout is no timeout.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(500 * time.Millisecond)
		io.WriteString(w, "late")
	}))
	t.Cleanup(slow.Close)
	e = newEdgeEnv(t, "upstream: "+slow.URL+"\nupstream_timeout: 10m\n"+rules)
	code, body := get(e, "/limited")
	require.Equal(t, 200, code)
	require.Equal(t, "late", body)
	m := string(rawDo(t, e.api, "GET", "/metrics").body)
	require.Contains(t, m, `rl_rejected_requests_total{reason="upstream_timeout"} 0`, "a slow answer within the timeout is no timeout")

	// A body streaming after the header is not cut by the header timeout:
	// the tail comes once the timeout's instant has passed (counted from
	// the handler's start, after the proxy's), the header at once. The
	// timeout is generous (2s) so that the header always beats it.
	const headerTimeout = 2 * time.Second
	stream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		time.Sleep(headerTimeout + 100*time.Millisecond - time.Since(start))
		io.WriteString(w, "tail")
	}))
	t.Cleanup(stream.Close)
	e = newEdgeEnv(t, "upstream: "+stream.URL+"\nupstream_timeout: "+headerTimeout.String()+"\n"+rules)
	code, body = get(e, "/limited")
	require.Equal(t, 200, code)
	require.Equal(t, "tail", body)
}

func TestUpstreamTimeoutConfig(t *testing.T) {
	parse := func(extra string) (*Config, error) {
		return ParseConfig("t.yaml", "yaml", []byte("upstream: demo\n"+extra+"rules: [{name: r, strategy: fixed, limit: 1, window: 1s}]\n"))
	}
	cfg, err := parse("")
	require.NoError(t, err)
	require.Zero(t, cfg.UpstreamTimeout)
	s := &Service{}
	require.Equal(t, 30*time.Second, s.upstreamTransport(cfg).d, "the default")
	cfg, err = parse("upstream_timeout: 1m30s\n")
	require.NoError(t, err)
	require.Equal(t, 90*time.Second, s.upstreamTransport(cfg).d)
	for _, bad := range []string{"upstream_timeout: soon", "upstream_timeout: 0s", "upstream_timeout: -1s", "upstream_timeout: 5"} {
		_, err := parse(bad + "\n")
		var ce *ConfigError
		require.ErrorAs(t, err, &ce, bad)
		require.Contains(t, err.Error(), "upstream_timeout: ", bad)
	}
}

// Hop-by-hop header fields, the standard ones and those a Connection
// field names, never cross the proxy, in either direction; 1xx responses
// included. Nor do the fields some upstreams take as the path.
func TestHopByHopHeadersStop(t *testing.T) {
	var gotDrop, gotKeep, gotOverride atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotDrop.Store(r.Header.Get("X-Drop"))
		gotOverride.Store(r.Header.Get("X-Original-URL") + r.Header.Get("X-Rewrite-URL"))
		gotKeep.Store(r.Header.Get("X-Keep"))
		h := w.Header()
		h.Set("Link", "</a.css>; rel=preload")
		h.Set("Connection", "X-Hint-Secret")
		h.Set("X-Hint-Secret", "h")
		w.WriteHeader(http.StatusEarlyHints)
		for k := range h {
			delete(h, k)
		}
		h.Set("Connection", "X-Secret, X-Other")
		h.Set("X-Secret", "s")
		h.Set("X-Other", "o")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Authenticate", "Basic")
		h.Set("X-Kept", "k")
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	e := newEdgeEnv(t, "upstream: "+up.URL+"\nrules: [{name: r, endpoint: /limited, strategy: fixed, limit: 100, window: 1m, key_by: global}]\n")
	for _, p := range []string{"/limited", "/unlimited"} {
		r := rawDo(t, e.proxy, "GET", p, "Connection", "close, X-Drop", "X-Drop", "1", "X-Keep", "2",
			"X-Original-URL", "/admin", "X-Rewrite-URL", "/admin")
		require.Equal(t, 200, r.code, p)
		require.Equal(t, "k", r.h.Get("X-Kept"), p)
		for _, f := range []string{"X-Secret", "X-Other", "Keep-Alive", "Proxy-Authenticate"} {
			require.Empty(t, r.h.Values(f), "%s: %s reached the client", p, f)
		}
		require.Len(t, r.interim, 1, p)
		require.Equal(t, "</a.css>; rel=preload", r.interim[0].Get("Link"), p)
		require.Empty(t, r.interim[0].Values("X-Hint-Secret"), "%s: a hop-by-hop field of a 1xx reached the client", p)
		require.Equal(t, "", gotDrop.Load(), p)
		require.Equal(t, "2", gotKeep.Load(), p)
		require.Equal(t, "", gotOverride.Load(), "%s: a path override reached the upstream", p)
	}
}

// Issue 9 item 10: a limit whose waits exceed what time.Duration holds
// gives huge, positive waits in the decision API's numbers and headers.
func TestDecisionDurationsSaturate(t *testing.T) {
	j := limitJSON(&rl.LimitResult{Name: "y", Window: 365 * 24 * time.Hour,
		ResetAfter: math.MaxInt64, RetryAfter: math.MaxInt64 - 1, Delay: math.MaxInt64})
	require.Equal(t, int64(9_223_372_036_855), j.ResetAfterMS)
	require.Equal(t, int64(9_223_372_037), j.ResetAfter)
	require.Equal(t, int64(9_223_372_036_855), j.RetryAfterMS)
	require.Equal(t, int64(9_223_372_037), j.RetryAfter)
	require.Equal(t, int64(9_223_372_036_855), j.DelayMS)
	require.Equal(t, int64(31_536_000_000), j.WindowMS)
	for _, c := range []struct {
		d, unit time.Duration
		want    int64
	}{
		{0, time.Second, 0}, {-5, time.Second, 0}, {1, time.Second, 1}, {time.Second, time.Second, 1},
		{time.Second + 1, time.Second, 2}, {math.MaxInt64 - time.Millisecond + 2, time.Millisecond, 9_223_372_036_854},
		{math.MaxInt64, time.Millisecond, 9_223_372_036_855}, {math.MaxInt64, 1, math.MaxInt64},
	} {
		require.Equal(t, c.want, ceilDiv(c.d, c.unit), "%d / %d", c.d, c.unit)
	}

	// End to end: a burst of 1000 refilled at 1 per 365 days; the whole
	// burst again waits 1000 years, beyond time.Duration.
	e := newEdgeEnv(t, "rules: [{name: yearly, strategy: token, limit: 1000, window: 365d, rate: 1}]\n")
	check := func() (int, http.Header, DecisionJSON) {
		resp, err := http.Post(e.api.URL+APIPrefix+"check", "application/json", strings.NewReader(`{"rule":"yearly","key":"k","cost":1000}`))
		require.NoError(t, err)
		defer resp.Body.Close()
		var d DecisionJSON
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&d))
		return resp.StatusCode, resp.Header, d
	}
	const centuries = int64(250 * 365 * 24 * 3600) // seconds; saturation is at about 292 years
	code, h, d := check()
	require.Equal(t, 200, code)
	require.Greater(t, d.ResetAfter, centuries)
	require.Greater(t, d.ResetAfterMS, 1000*centuries)
	reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	require.NoError(t, err)
	require.Greater(t, reset, centuries)
	code, h, d = check()
	require.Equal(t, 429, code)
	require.False(t, d.Never)
	require.Greater(t, d.RetryAfter, centuries)
	require.Greater(t, d.RetryAfterMS, 1000*centuries)
	retry, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
	require.NoError(t, err)
	require.Greater(t, retry, centuries, "Retry-After %q", h.Get("Retry-After"))
}

// stubRT answers every request at once, without I/O.
type stubRT struct{}

func (stubRT) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}}, nil
}

// BenchmarkHeaderTimeout is the cost the upstream timeout adds to a round
// trip (a timer, a context and the body wrapper), against none.
func BenchmarkHeaderTimeout(b *testing.B) {
	req := httptest.NewRequest("GET", "http://upstream.test/p", nil)
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
	}{{"none", stubRT{}}, {"timeout", &headerTimeout{rt: stubRT{}, d: DefaultUpstreamTimeout}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}

// An endpoint is written as on the wire: escapes kept, matched whatever the
// case of the request.
func TestEscapedEndpoint(t *testing.T) {
	up := newRecorder(t)
	e := newEdgeEnv(t, "upstream: "+up.srv.URL+"\nrules: [{name: sp, endpoint: /a%20b/Caf%C3%A9, strategy: fixed, limit: 1, window: 1m, key_by: global}]\n")
	require.Equal(t, 200, rawDo(t, e.proxy, "GET", "/a%20b/Caf%C3%A9").code)
	for _, p := range []string{"/a%20b/caf%c3%a9", "/A%20B/CAF%C3%A9/x", "/x/../a%20b/%43af%C3%A9"} {
		require.Equal(t, 429, rawDo(t, e.proxy, "GET", p).code, p)
	}
	require.Equal(t, 200, rawDo(t, e.proxy, "GET", "/a%20b/Cafe").code)
	require.Equal(t, []string{"/a%20b/Caf%C3%A9", "/a%20b/Cafe"}, up.got())
}
