package pwhost

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rlcore/rl/internal/testkit/await"
)

// buildRLWasmHost builds cmd/rl-wasm-host once for the package's tests.
var buildRLWasmHost = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "pwhost-rl-wasm-host")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "rl-wasm-host")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../cmd/rl-wasm-host").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building rl-wasm-host: %v\n%s", err, out)
	}
	return bin, nil
})

// startRLWasmHost starts cmd/rl-wasm-host (built once) with a
// configuration file, and returns its base URL.
func startRLWasmHost(t *testing.T, config string) string {
	t.Helper()
	bin, err := buildRLWasmHost()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rules.json")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", cfg, "-listen", "127.0.0.1:0", "-api-listen", "127.0.0.1:0", "-decider", "native")
	cmd.Env = append(os.Environ(), "DATABASE_URL=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// The address it listens on, or "" once its log ends (it exited):
	// waiting is bounded by the test's deadline alone, not by how fast a
	// loaded machine starts it.
	addr := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec struct{ Msg, Role, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" && (rec.Role == "all" || rec.Role == "api") {
				addr <- rec.Addr
			}
		}
		addr <- ""
	}()
	a := await.Recv(t, "rl-wasm-host to listen", addr)
	if a == "" {
		t.Fatal("rl-wasm-host exited before it listened")
	}
	return "http://" + a
}

// TestGlobalWithRLWasmHost: two Envoy replicas (two hosts, two VMs each, no
// shared data between the replicas) in global mode, their callouts sent to
// a real rl-wasm-host, admit exactly each limit between them: one rule
// naming a rule of the service, one sending its limits inline.
func TestGlobalWithRLWasmHost(t *testing.T) {
	// Tokens: a check token for the named rule, an admin one for inline
	// limits (rl-wasm-host's roles); the file holds their SHA-256.
	sum := func(tok string) string { h := sha256.Sum256([]byte(tok)); return hex.EncodeToString(h[:]) }
	base := startRLWasmHost(t, `{"api_tokens":[{"name":"envoy","role":"check","sha256":"`+sum("check-token")+`"},
		{"name":"envoy-admin","role":"admin","sha256":"`+sum("admin-token")+`"}],
		"rules":[{"name":"login","strategy":"token","limit":5,"window":"1h","rate":1}]}`)
	const filterConfig = `{"rules":[
		{"name":"named","endpoint":"/login","key_by":"header:x-user","strategy":"token","limit":5,"window":"1h","rate":1,
		 "global":{"cluster":"rl","rule":"login","token":"check-token"}},
		{"name":"inline","endpoint":"/api","key_by":"header:x-user","strategy":"gcra","limit":4,"window":"1h","rate":1,
		 "global":{"cluster":"rl","timeout":"5s","token":"admin-token"}},
		{"name":"anonymous","endpoint":"/anon","key_by":"header:x-user","strategy":"gcra","limit":4,"window":"1h","rate":1,
		 "global":{"cluster":"rl","rule":"login"}}]}`
	ctx := context.Background()
	var vms []*VM
	for range 2 { // replicas
		h := newHost(t)
		for range 2 { // workers
			vm, err := h.NewVM(ctx, []byte(filterConfig))
			if err != nil {
				t.Fatal(err)
			}
			vms = append(vms, vm)
		}
	}
	forward := forwarder(t, base)
	paths := map[string]int{"/login": 5, "/api/x": 4}
	admitted := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				path := "/login"
				if (g+i)%2 == 1 {
					path = "/api/x"
				}
				vm := vms[(g+i)%len(vms)]
				req := [][2]string{{":method", "POST"}, {":authority", "app"}, {":path", path}, {"x-user", "alice"}}
				s, err := vm.Request(req, nil, nil)
				if err != nil || len(s.Callouts) != 1 {
					t.Errorf("request: %v, %d callouts", err, len(s.Callouts))
					return
				}
				if err := vm.Respond(s, s.Callouts[0], forward(s.Callouts[0]), [][2]string{{":status", "200"}}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				switch {
				case s.Resumed && s.Local == nil:
					admitted[path]++
				case s.Local != nil && s.Local.Status == 429:
				default:
					t.Errorf("%s: resumed %v, local %d %q; last log %q", path, s.Resumed, s.Local.Status, s.Local.Body, vm.Logs[len(vm.Logs)-1])
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for p, want := range paths {
		if admitted[p] != want {
			t.Errorf("%s: %d admitted across the replicas, want %d", p, admitted[p], want)
		}
	}
	// Without a token the service refuses the callout (401): the rule
	// fails closed.
	vm := vms[0]
	s, err := vm.Request([][2]string{{":method", "GET"}, {":authority", "app"}, {":path", "/anon"}, {"x-user", "bob"}}, nil, nil)
	if err != nil || len(s.Callouts) != 1 {
		t.Fatalf("anonymous: %v", err)
	}
	if err := vm.Respond(s, s.Callouts[0], forward(s.Callouts[0]), nil); err != nil {
		t.Fatal(err)
	}
	if s.Local == nil || s.Local.Status != 503 || !strings.Contains(vm.Logs[len(vm.Logs)-1], `answered status 401`) {
		t.Errorf("anonymous: %+v; last log %q", s.Local, vm.Logs[len(vm.Logs)-1])
	}
	for _, l := range vm.Logs {
		if strings.Contains(l, "check-token") || strings.Contains(l, "admin-token") {
			t.Errorf("a token reached the log: %q", l)
		}
	}
}

// forwarder plays Envoy's part of a callout to rl-wasm-host at base: the
// HTTP request to the cluster, the answer for the VM.
func forwarder(t *testing.T, base string) func(c *Callout) CalloutResponse {
	client := &http.Client{} // no time bound but the test's: rl-wasm-host answers
	return func(c *Callout) CalloutResponse {
		var method, path string
		for _, kv := range c.Headers {
			switch kv[0] {
			case ":method":
				method = kv[1]
			case ":path":
				path = kv[1]
			}
		}
		req, err := http.NewRequest(method, base+path, bytes.NewReader(c.Body))
		if err != nil {
			t.Error(err)
			return CalloutResponse{}
		}
		for _, kv := range c.Headers {
			if !strings.HasPrefix(kv[0], ":") {
				req.Header.Add(kv[0], kv[1])
			}
		}
		resp, err := client.Do(req)
		if err != nil {
			return CalloutResponse{} // no headers: the call failed
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return CalloutResponse{Headers: [][2]string{{":status", strconv.Itoa(resp.StatusCode)}}, Body: body}
	}
}
