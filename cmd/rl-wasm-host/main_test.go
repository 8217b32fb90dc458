package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/internal/testkit/pgtest"
)

// The end-to-end tests build the real binary and run it.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rl-wasm-host-e2e")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "rl-wasm-host")
		out, err := exec.Command("go", "build", "-buildvcs=auto", "-ldflags", "-X github.com/rlcore/rl/internal/request/version.version=v0.0.0-e2e", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// proc is a running rl-wasm-host.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	logs   []string
	addr   chan [2]string // role, address
	exited chan error
	base   string // the proxy's listener (or the one listener, -api-listen main)
	api    string // the decision API's listener
}

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	if !slices.Contains(args, "-api-listen") {
		args = append([]string{"-api-listen", "127.0.0.1:0"}, args...)
	}
	p := &proc{cmd: exec.Command(binary(t), append([]string{"-listen", "127.0.0.1:0"}, args...)...),
		addr: make(chan [2]string, 4), exited: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), "DATABASE_URL=")
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs = append(p.logs, line)
			p.mu.Unlock()
			var rec struct{ Msg, Role, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" {
				p.addr <- [2]string{rec.Role, rec.Addr}
			}
		}
		p.exited <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("rl-wasm-host logs:\n%s", p.log())
		}
	})
	// Bounded by the test's deadline alone: a loaded machine starts it late.
	await.Until(t, "rl-wasm-host to listen", func() bool {
		select {
		case a := <-p.addr:
			switch a[0] {
			case "all":
				p.base, p.api = "http://"+a[1], "http://"+a[1]
			case "proxy":
				p.base = "http://" + a[1]
			case "api":
				p.api = "http://" + a[1]
			}
		case err := <-p.exited:
			t.Fatalf("rl-wasm-host exited at start: %v\n%s", err, p.log())
		default:
		}
		return p.base != "" && p.api != ""
	})
	return p
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.logs, "\n")
}

// waitLog waits for a log line containing s.
func (p *proc) waitLog(t *testing.T, s string) string {
	t.Helper()
	var line string
	await.Until(t, fmt.Sprintf("a log line with %q", s), func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, l := range p.logs {
			if strings.Contains(l, s) {
				line = l
				return true
			}
		}
		return false
	})
	return line
}

func (p *proc) wait(t *testing.T) error {
	t.Helper()
	return await.Recv(t, "rl-wasm-host to exit", p.exited)
}

func call(t *testing.T, method, url, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
}

func TestNoConfigIsUsage(t *testing.T) {
	out, err := exec.Command(binary(t)).CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 2, ee.ExitCode())
	require.Contains(t, string(out), "-config is required")
	require.Contains(t, string(out), "Usage of rl-wasm-host")
}

func TestSampleConfigStarts(t *testing.T) {
	p := start(t, "-config", "sample.yaml")
	p.waitLog(t, "decider: native Go core while the WebAssembly module compiles") // the WebAssembly core takes over once compiled: TestServesBeforeCompiled
	code, h, body := call(t, "POST", p.api+"/v1/ratelimit/check", `{"rule":"/v1/pay","key":"demo-key"}`)
	require.Equal(t, 200, code, body)
	require.Equal(t, `"/v1/pay";q=100;w=10`, h.Get("RateLimit-Policy"))
	code, _, body = call(t, "GET", p.base+"/v1/pay", "", "Authorization", "Bearer demo-key")
	require.Equal(t, 200, code)
	require.Contains(t, body, "demo upstream")
	code, _, _ = call(t, "GET", p.api+"/readyz", "")
	require.Equal(t, 200, code)
	// The API is not reachable through the proxy's listener: its paths are
	// proxied like any other.
	code, _, body = call(t, "POST", p.base+"/v1/ratelimit/reset", `{"rule":"/v1/pay","key":"demo-key"}`)
	require.NotContains(t, body, `"reset":true`)
}

func TestInvalidConfigAtStart(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bad.yaml")
	writeFile(t, cfg, "rules:\n  - {name: a, strategy: tokn, limit: 1, window: 1s}\n  - {name: b, strategy: fixed, limit: 0, window: 1s}\n")
	cmd := exec.Command(binary(t), "-config", cfg, "-listen", "127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 2, ee.ExitCode())
	require.Contains(t, string(out), `bad.yaml: rules[0] "a": strategy: unknown strategy "tokn"`)
	require.Contains(t, string(out), `bad.yaml: rules[1] "b": limit 0: outside`)

	out, err = exec.Command(binary(t), "-decider", "nope", "-config", "sample.yaml", "-listen", "127.0.0.1:0").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), `-decider \"nope\": want wasm or native`)
}

// The API and the proxy, SIGHUP with a changed and an invalid file, and
// SIGTERM finishing a request in flight.
func TestEndToEnd(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	var slowOnce sync.Once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			<-release
		}
		fmt.Fprintf(w, "upstream saw %s", r.URL.Path)
	}))
	defer up.Close()
	defer slowOnce.Do(func() { close(release) })

	dir := t.TempDir()
	cfg := filepath.Join(dir, "rules.json")
	rules := func(limit int) string {
		return fmt.Sprintf(`{"upstream": %q, "rules": [
			{"endpoint":"/v1/pay","strategy":"token_bucket","key_by":"api_key","limit":%d,"window":"10s","fail_open":false},
			{"name":"slow","endpoint":"/slow","strategy":"fixed","limit":100,"window":"1m","key_by":"global"}
		]}`, up.URL, limit)
	}
	writeFile(t, cfg, rules(2))
	p := start(t, "-config", cfg, "-decider", "native")
	api, proxy := p.api, p.base

	// Decision API on its own listener.
	code, _, body := call(t, "POST", api+"/v1/ratelimit/check", `{"rule":"/v1/pay","key":"k1","cost":2}`)
	require.Equal(t, 200, code, body)
	code, h, body := call(t, "POST", api+"/v1/ratelimit/check", `{"rule":"/v1/pay","key":"k1"}`)
	require.Equal(t, 429, code, body)
	require.NotEmpty(t, h.Get("Retry-After"))
	code, _, body = call(t, "POST", api+"/v1/ratelimit/check", `{"rule":"/v1/pay","key":`)
	require.Equal(t, 400, code, body)
	// The proxy listener proxies every path, the API's too.
	code, _, body = call(t, "GET", proxy+"/v1/ratelimit/rules", "")
	require.Equal(t, 200, code)
	require.Equal(t, "upstream saw /v1/ratelimit/rules", body)
	code, _, _ = call(t, "GET", proxy+"/v1/pay", "", "Authorization", "Bearer k2")
	require.Equal(t, 200, code)
	code, _, _ = call(t, "GET", proxy+"/v1/pay", "", "Authorization", "Bearer k2")
	require.Equal(t, 200, code)
	code, _, body = call(t, "GET", proxy+"/v1/pay", "", "Authorization", "Bearer k2")
	require.Equal(t, 429, code)
	require.Equal(t, "Rate limit exceeded\n", body)

	limitOf := func() int64 {
		_, _, body := call(t, "GET", api+"/v1/ratelimit/rules", "")
		var out struct {
			Rules []struct {
				Limits []struct{ Limit int64 }
			}
		}
		require.NoError(t, json.Unmarshal([]byte(body), &out))
		return out.Rules[0].Limits[0].Limit
	}
	require.Equal(t, int64(2), limitOf())

	// SIGHUP with a changed file: the new rules, the state kept.
	writeFile(t, cfg, rules(5))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	p.waitLog(t, "config reloaded")
	require.Equal(t, int64(5), limitOf())
	code, _, _ = call(t, "GET", proxy+"/v1/pay", "", "Authorization", "Bearer k2")
	require.Equal(t, 200, code, "a bigger bucket admits more")

	// SIGHUP with an invalid file: logged with file, rule and field; the
	// rules in force stay.
	writeFile(t, cfg, `{"rules":[{"endpoint":"/v1/pay","strategy":"token_bucket","limit":-1,"window":"10s"}]}`)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	line := p.waitLog(t, "config reload failed")
	require.Contains(t, line, `rules[0] \"/v1/pay\": limit -1: outside`)
	require.Equal(t, int64(5), limitOf())
	_, _, metrics := call(t, "GET", api+"/metrics", "")
	require.Contains(t, metrics, `rl_config_reloads_total{result="failure"} 1`)
	require.Contains(t, metrics, `rl_config_reloads_total{result="success"} 1`)
	require.Contains(t, metrics, `rl_decisions_total{outcome="denied",rule="/v1/pay"} 2`)

	// SIGTERM while a request is in flight: it completes, then the process
	// exits 0.
	slow := make(chan int, 1)
	go func() {
		resp, err := http.Get(proxy + "/slow")
		if err != nil {
			slow <- -1
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	await.Done(t, "the slow request to reach the upstream", arrived) // in flight, held by the upstream
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.waitLog(t, "shutting down")
	// The shutdown is under way once the proxy's listener is closed: only
	// then is the request released.
	await.Until(t, "the proxy to stop accepting connections", func() bool {
		c, err := net.Dial("tcp", strings.TrimPrefix(proxy, "http://"))
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	slowOnce.Do(func() { close(release) })
	require.Equal(t, 200, <-slow, "the request in flight was served")
	require.NoError(t, p.wait(t), "clean exit")
	p.waitLog(t, `"msg":"stopped"`)
}

func TestPostgresStore(t *testing.T) {
	db := pgtest.NewDatabase(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rules.yaml")
	writeFile(t, cfg, "rules: [{name: r, strategy: sliding_log, limit: 2, window: 1m}]\n")
	// Generous store timeouts: on a loaded machine a slow first decision would
	// be answered by the failover (in memory) and the counts would differ.
	p := start(t, "-config", cfg, "-store", "postgres", "-database-url", db, "-migrate", "-failover",
		"-store-timeout", "10m", "-store-queue-timeout", "10m")
	p.waitLog(t, "database migrated")
	for i, want := range []int{200, 200, 429} {
		code, _, body := call(t, "POST", p.api+"/v1/ratelimit/check", `{"rule":"r","key":"k"}`)
		require.Equal(t, want, code, "call %d: %s", i, body)
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, p.wait(t))

	// Without -migrate on a fresh database, the start fails clearly.
	out, err := exec.Command(binary(t), "-config", cfg, "-store", "postgres", "-database-url", pgtest.NewDatabase(t), "-listen", "127.0.0.1:0").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "is not migrated")
}
