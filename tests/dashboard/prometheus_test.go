package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// promPackage is the Debian package that holds prometheus and promtool.
const promPackage = "prometheus"

// tool returns the path of a binary of Debian's package prometheus. A
// missing one fails the test, naming the package, except under -short,
// which skips it.
func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if testing.Short() {
		t.Skipf("%s is not installed (Debian package %s); -short skips this test", name, promPackage)
	}
	t.Fatalf("%s is not installed: install Debian's package %s (apt-get install %s, or run scripts/test-setup.sh as root); only -short skips this test",
		name, promPackage, promPackage)
	return ""
}

var (
	hostOnce sync.Once
	hostBin  string
	hostErr  error
)

// hostBinary builds rl-wasm-host once for the package's tests.
func hostBinary(t *testing.T) string {
	t.Helper()
	hostOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rl-dashboard-")
		if err != nil {
			hostErr = err
			return
		}
		hostBin = filepath.Join(dir, "rl-wasm-host")
		out, err := exec.Command("go", "build", "-o", hostBin, "github.com/rlcore/rl/cmd/rl-wasm-host").CombinedOutput()
		if err != nil {
			hostErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, hostErr)
	return hostBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if hostBin != "" {
		os.RemoveAll(filepath.Dir(hostBin))
	}
	os.Exit(code)
}

// testContext is done shortly before the test's deadline (go test
// -timeout), so that a wait that never ends fails the test with what it
// waited for instead of a panic: the only bound of this file's waits.
func testContext(t *testing.T) context.Context {
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		margin := time.Until(d) / 20
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-max(margin, 5*time.Second)))
		t.Cleanup(cancel)
	}
	return ctx
}

// until calls cond until it reports done, pausing between calls; when ctx
// ends first it fails the test with what and cond's last word.
func until(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	for {
		ok, last := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s at the test's deadline: %s", what, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// hostProc is a running rl-wasm-host and the addresses it listens on.
type hostProc struct {
	cmd                   *exec.Cmd
	mu                    sync.Mutex
	logs                  []string
	proxy, api, grpcAddr  string
	exited                chan struct{}
	exitErr               error
	listening             chan struct{}
	listeningOnce         sync.Once
	proxySet, apiSet, rls bool
}

// startHost runs the binary with args and waits until its three listeners
// (proxy, decision API, gRPC) are bound, as its log says.
func startHost(t *testing.T, ctx context.Context, args ...string) *hostProc {
	t.Helper()
	h := &hostProc{cmd: exec.Command(hostBinary(t), args...), exited: make(chan struct{}), listening: make(chan struct{})}
	h.cmd.Env = append(os.Environ(), "DATABASE_URL=")
	stderr, err := h.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, h.cmd.Start())
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			h.line(sc.Text())
		}
		h.exitErr = h.cmd.Wait()
		close(h.exited)
	}()
	t.Cleanup(func() {
		h.cmd.Process.Kill()
		<-h.exited
		if t.Failed() {
			t.Logf("rl-wasm-host's log:\n%s", h.log())
		}
	})
	select {
	case <-h.listening:
	case <-h.exited:
		t.Fatalf("rl-wasm-host exited at start (%v):\n%s", h.exitErr, h.log())
	case <-ctx.Done():
		t.Fatalf("rl-wasm-host did not listen by the test's deadline:\n%s", h.log())
	}
	return h
}

func (h *hostProc) line(l string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.logs = append(h.logs, l)
	var rec struct{ Msg, Role, Addr string }
	if json.Unmarshal([]byte(l), &rec) != nil || rec.Msg != "listening" {
		return
	}
	switch rec.Role {
	case "proxy":
		h.proxy, h.proxySet = rec.Addr, true
	case "api":
		h.api, h.apiSet = rec.Addr, true
	case "grpc":
		h.grpcAddr, h.rls = rec.Addr, true
	}
	if h.proxySet && h.apiSet && h.rls {
		h.listeningOnce.Do(func() { close(h.listening) })
	}
}

func (h *hostProc) log() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.logs, "\n")
}

// logged reports whether a line of the log contains s.
func (h *hostProc) logged(s string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(h.logs, func(l string) bool { return strings.Contains(l, s) })
}

// freePort returns a loopback port no one listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// promServer is a running Prometheus.
type promServer struct {
	base   string
	addr   string
	out    *lockedBuffer
	exited chan struct{}
}

// startPrometheus runs prometheus on a free loopback port with config (a
// %s in it is its own address, for it to scrape itself) and a data
// directory of the test's, and waits until it is ready.
func startPrometheus(t *testing.T, ctx context.Context, config string) *promServer {
	t.Helper()
	bin := tool(t, "prometheus")
	dir := t.TempDir()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(strings.ReplaceAll(config, "$PROMETHEUS", addr)), 0o600))
	p := &promServer{base: "http://" + addr, addr: addr, out: &lockedBuffer{}, exited: make(chan struct{})}
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-p.exited
		if t.Failed() {
			t.Logf("prometheus's log:\n%s", p.out.String())
		}
	})
	until(t, ctx, "prometheus to be ready at "+p.base, func() (bool, string) {
		select {
		case <-p.exited:
			t.Fatalf("prometheus exited:\n%s", p.out.String())
		default:
		}
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	return p
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// sample is one series of an instant query's answer.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// value is the sample's value ("NaN" too).
func (s sample) value() float64 {
	str, _ := s.Value[1].(string)
	v, _ := strconv.ParseFloat(str, 64)
	return v
}

// query runs an instant PromQL query through the HTTP API. An error of
// Prometheus (a query that does not parse) fails the test at once.
func (p *promServer) query(t *testing.T, q string) []sample {
	t.Helper()
	var r struct {
		Status    string `json:"status"`
		Error     string `json:"error"`
		ErrorType string `json:"errorType"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	p.get(t, "/api/v1/query?query="+url.QueryEscape(q), &r)
	require.Equal(t, "success", r.Status, "query %s: %s: %s", q, r.ErrorType, r.Error)
	switch r.Data.ResultType {
	case "vector":
		var v []sample
		require.NoError(t, json.Unmarshal(r.Data.Result, &v))
		return v
	case "scalar":
		var s [2]any
		require.NoError(t, json.Unmarshal(r.Data.Result, &s))
		return []sample{{Value: s}}
	default:
		t.Fatalf("query %s: a %s, not an instant vector", q, r.Data.ResultType)
		return nil
	}
}

// labelValues is Grafana's label_values(selector, label) for Prometheus:
// the values of label among the series selector matches.
func (p *promServer) labelValues(t *testing.T, selector, label string) []string {
	t.Helper()
	var r struct {
		Status string   `json:"status"`
		Error  string   `json:"error"`
		Data   []string `json:"data"`
	}
	p.get(t, "/api/v1/label/"+label+"/values?match[]="+url.QueryEscape(selector), &r)
	require.Equal(t, "success", r.Status, "label_values(%s, %s): %s", selector, label, r.Error)
	return r.Data
}

func (p *promServer) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(p.base + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, v), "%s answered %s: %s", path, resp.Status, b)
}

// hostConfig has a rule for each thing the load does: a denial by a
// named limit, a shadow limit's would-deny, settles, and a proxied rule.
const hostConfig = `
upstream: demo
rules:
  - name: api
    limits:
      - {name: per_hour, strategy: fixed, limit: 1, window: 1h}
  - name: shadowed
    limits:
      - {name: enforced, strategy: fixed, limit: 1000000000, window: 1h}
      - {name: candidate, strategy: fixed, limit: 1, window: 1h, shadow: true}
  - name: metered
    strategy: fixed
    limit: 1000000000
    window: 1h
  - name: proxied
    endpoint: /
    key_by: ip
    strategy: fixed
    limit: 1
    window: 1h
`

// rlsConfig limits one descriptor (denials) and shadows another
// (would-denies); a third matches nothing.
const rlsConfig = `domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000000000, shadow_limits: [{name: candidate, unit: hour, requests_per_unit: 1}]}
`

// load runs one round of every kind of request the dashboard shows. The
// memory store never fails as an outage (a full one is load), so no rule
// fails open, and nothing here loads the service past its bounds: the
// fail-open and overload panels show their series at 0 (the service's
// PostgreSQL and overload tests make them grow).
func load(t *testing.T, h *hostProc, rls rlsv3.RateLimitServiceClient) {
	post := func(path, body string) int {
		resp, err := http.Post("http://"+h.api+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Errorf("POST %s: %v", path, err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	post("/v1/ratelimit/check", `{"rule":"api","key":"k"}`)      // then denied by per_hour
	post("/v1/ratelimit/check", `{"rule":"shadowed","key":"k"}`) // then would-denied by candidate
	post("/v1/ratelimit/check", `{"rule":"metered","key":"k","cost":2}`)
	post("/v1/ratelimit/settle", `{"rule":"metered","key":"k","estimate":2,"actual":3}`)
	if resp, err := http.Get("http://" + h.proxy + "/p"); err == nil { // then denied
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	} else {
		t.Errorf("GET /p: %v", err)
	}
	for _, d := range [][]*commonv3.RateLimitDescriptor_Entry{
		{{Key: "user", Value: "u"}},   // then over the limit
		{{Key: "tenant", Value: "t"}}, // then would-denied by candidate
		{{Key: "other", Value: "x"}},  // unmatched
	} {
		if _, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*commonv3.RateLimitDescriptor{{Entries: d}}}); err != nil {
			t.Errorf("ShouldRateLimit: %v", err)
		}
	}
	post("/v1/ratelimit/check", `{"rule":`) // invalid_json
}

// grafanaRegexEscape is Grafana's escaping of a multi-value variable's
// value in a Prometheus regex matcher: regex metacharacters get a
// backslash, doubled in PromQL's string literal.
func grafanaRegexEscape(v string) string {
	var b strings.Builder
	for _, r := range v {
		if strings.ContainsRune(`\$^*{}[]'+?.()|`, r) {
			b.WriteString(`\\`)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// grafanaAll is what Grafana puts for a multi-value variable with "All"
// selected and no custom all value: every value the variable's query
// found, escaped, as one alternation.
func grafanaAll(values []string) string {
	esc := make([]string, len(values))
	for i, v := range values {
		esc[i] = grafanaRegexEscape(v)
	}
	return "(" + strings.Join(esc, "|") + ")"
}

// substitute replaces the dashboard's variables in expr: vars, and
// Grafana's interval variables.
func substitute(expr string, vars map[string]string) string {
	r := []string{"$__rate_interval", "30s", "$__interval", "15s"}
	for k, v := range vars {
		r = append(r, "${"+k+"}", v, "$"+k, v)
	}
	return strings.NewReplacer(r...).Replace(expr)
}

// dashboardVariable is a query variable of the dashboard.
type dashboardVariable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Definition string `json:"definition"`
	IncludeAll bool   `json:"includeAll"`
	Multi      bool   `json:"multi"`
	AllValue   string `json:"allValue"`
}

func dashboardVariables(t *testing.T) []dashboardVariable {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d struct {
		Templating struct {
			List []dashboardVariable `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	return d.Templating.List
}

var labelValuesCall = regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// Every panel's, annotation's and variable's query returns series from a
// real Prometheus scraping a real rl-wasm-host under load, with the
// variables set as Grafana sets them; and they read only rl-wasm-host's
// targets: Prometheus scrapes itself too, as a shared one scrapes other
// services, and none of its series shows, nor does any with the job
// variable set to its job. The same Prometheus evaluates the alerting
// rules on those series: each evaluates without error, and none is
// active for the healthy service.
func TestDashboardOnPrometheus(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	cfgPath, rlsPath := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "ratelimit.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(hostConfig), 0o600))
	require.NoError(t, os.WriteFile(rlsPath, []byte(rlsConfig), 0o600))
	tool(t, "prometheus")
	h := startHost(t, ctx, "-config", cfgPath, "-listen", "127.0.0.1:0", "-api-listen", "127.0.0.1:0",
		"-grpc-listen", "127.0.0.1:0", "-rls-config", rlsPath)
	alerts, err := filepath.Abs(alertsFile)
	require.NoError(t, err)
	p := startPrometheus(t, ctx, fmt.Sprintf(`
global:
  scrape_interval: 200ms
  scrape_timeout: 200ms
  evaluation_interval: 200ms
rule_files: [%q]
scrape_configs:
  - job_name: rl-wasm-host
    static_configs: [{targets: [%q]}]
  - job_name: prometheus
    static_configs: [{targets: ["$PROMETHEUS"]}]
`, alerts, h.api))

	conn, err := grpc.NewClient(h.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	// The load runs until the test ends, so that every rate over the
	// last interval has something to count whenever it is asked.
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			load(t, h, rls)
		}
	}()
	defer func() { close(stop); <-stopped }()

	// Both targets up and scraped, then a reload (the annotation shows
	// it): before it, the reload counter must have a sample at 0.
	job, inst := "rl-wasm-host", h.api
	until(t, ctx, "both targets to be scraped", func() (bool, string) {
		s := p.query(t, `count(up == 1) == 2 and count(rl_config_reloads_total{job="rl-wasm-host",result="success"} == 0) == 1`)
		return len(s) == 1, fmt.Sprint(p.query(t, "up"))
	})
	// The alerting rules evaluate on the real series, and a healthy
	// service raises none of them, not even pending.
	requireRulesHealthy(t, p, func(what string, cond func() (bool, string)) { until(t, ctx, what, cond) })
	var active struct {
		Data struct {
			Alerts []map[string]any `json:"alerts"`
		} `json:"data"`
	}
	p.get(t, "/api/v1/alerts", &active)
	require.Empty(t, active.Data.Alerts, "alerts of a healthy service")

	require.NoError(t, h.cmd.Process.Signal(syscall.SIGHUP))
	until(t, ctx, "the reload", func() (bool, string) { return h.logged(`"config reloaded"`), "no \"config reloaded\" in the log" })

	// The variables, in order, as Grafana evaluates them with All chosen.
	vars := map[string]string{}
	for _, v := range dashboardVariables(t) {
		if v.Type != "query" {
			continue
		}
		m := labelValuesCall.FindStringSubmatch(v.Definition)
		require.NotNil(t, m, "variable %q: %q is not label_values(selector, label)", v.Name, v.Definition)
		selector := substitute(m[1], vars)
		var values []string
		until(t, ctx, "values of variable "+v.Name, func() (bool, string) {
			values = p.labelValues(t, selector, m[2])
			return len(values) > 0, "none"
		})
		switch v.Name {
		case "job":
			require.Equal(t, []string{job}, values, "the job variable lists rl-wasm-host's job alone")
		case "instance":
			require.Equal(t, []string{inst}, values, "the instance variable lists rl-wasm-host alone")
		case "rule":
			require.Subset(t, values, []string{"api", "shadowed", "metered", "proxied"})
		}
		require.True(t, v.IncludeAll && v.Multi, "variable %q offers All and several values", v.Name)
		if v.AllValue != "" {
			vars[v.Name] = v.AllValue
		} else {
			vars[v.Name] = grafanaAll(values)
		}
	}
	for _, name := range []string{"job", "instance", "rule"} {
		require.Contains(t, vars, name, "the dashboard has a %s variable", name)
	}

	// What the load makes grow: these targets must show more than zeros.
	positive := map[string]bool{}
	for _, w := range []string{"Decisions/s", "Denied", "Denials by limit", "Requests refused before a decision",
		"Shadow limits: would-denies", "Shadow limits: would-denies\" target 1", "Settles", "Calls by domain and code",
		"Descriptor decisions", "Descriptor decisions\" target 1", "Decision latency", "Store latency\" target 2",
		"CPU", "Reloads", "Instances", "Builds", "Rules in force", "Last reload"} {
		if !strings.Contains(w, "target") {
			w += `" target 0`
		}
		positive[`panel "`+w] = true
	}
	pending := map[query]bool{}
	for _, q := range queries(t) {
		if !strings.HasPrefix(q.where, "variable ") {
			pending[q] = true
		}
	}
	until(t, ctx, "every dashboard query to return series", func() (bool, string) {
		var empty []string
		for q := range pending {
			got := p.query(t, substitute(q.expr, vars))
			ok := len(got) > 0
			if ok && positive[q.where] {
				ok = slices.ContainsFunc(got, func(s sample) bool { return s.value() > 0 })
			}
			for _, s := range got {
				if j, has := s.Metric["job"]; has && j != job {
					t.Errorf("%s: a series of job %q: %v", q.where, j, s.Metric)
				}
				if i, has := s.Metric["instance"]; has && i != inst {
					t.Errorf("%s: a series of instance %q: %v", q.where, i, s.Metric)
				}
			}
			if ok {
				delete(pending, q)
			} else {
				empty = append(empty, fmt.Sprintf("%s: %s: %v", q.where, substitute(q.expr, vars), got))
			}
		}
		slices.Sort(empty)
		return len(empty) == 0, strings.Join(empty, "\n")
	})

	// Another job's target, the variables set to it (as if the job
	// variable offered it): a query shows nothing, or only that target's
	// series, so every selector names the variables.
	other := map[string]string{"job": "prometheus", "instance": grafanaRegexEscape(p.addr), "rule": ".*"}
	for _, q := range queries(t) {
		if strings.HasPrefix(q.where, "variable ") {
			continue
		}
		for _, s := range p.query(t, substitute(q.expr, other)) {
			if s.Metric["job"] != "prometheus" || s.Metric["instance"] != p.addr {
				t.Errorf("%s with job %q shows a series of another: %s: %v", q.where, "prometheus", substitute(q.expr, other), s)
			}
		}
	}
}

// Every metric selector of every dashboard query names the job and
// instance variables, so that in a Prometheus shared with other services
// a panel shows the chosen rl-wasm-host processes and nothing else.
func TestDashboardSelectsJobAndInstance(t *testing.T) {
	for _, q := range queries(t) {
		expr := q.expr
		if m := labelValuesCall.FindStringSubmatch(expr); m != nil {
			expr = m[1]
			if strings.HasPrefix(q.where, `variable "job"`) {
				continue // the job variable lists the jobs
			}
		}
		for name := range parsePromQL(expr).metrics {
			sels := regexp.MustCompile(`\b`+regexp.QuoteMeta(name)+`\b(\{[^}]*\})?`).FindAllStringSubmatch(expr, -1)
			require.NotEmpty(t, sels, q.where)
			for _, s := range sels {
				want := `job=~"$job"`
				if strings.HasPrefix(q.where, `variable "instance"`) {
					require.Contains(t, s[1], want, "%s: %s selects no job: %s", q.where, name, q.expr)
					continue
				}
				for _, w := range []string{want, `instance=~"$instance"`} {
					require.Contains(t, s[1], w, "%s: %s lacks %s: %s", q.where, name, w, q.expr)
				}
			}
		}
	}
}
