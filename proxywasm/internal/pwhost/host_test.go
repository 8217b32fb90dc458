package pwhost

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// filterWasm is the committed, built filter (proxywasm/build.sh).
const filterWasm = "../../rl-filter.wasm"

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// cache compiles the module once for all the tests.
var cache = wazero.NewCompilationCache()

func newHost(t testing.TB) *Host {
	t.Helper()
	b, err := os.ReadFile(filterWasm)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := New(ctx, b, cache)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx) })
	h.Now.Store(t0.UnixNano())
	return h
}

func sig(params []api.ValueType, results []api.ValueType) string {
	return typeList(params) + " -> " + typeList(results)
}

func typeList(ts []api.ValueType) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = api.ValueTypeName(t)
	}
	return "(" + strings.Join(s, ",") + ")"
}

// spec gives the wasm type of every function of the proxy-wasm ABI v0.2.1
// specification (proxy-wasm/spec, abi-versions/v0.2.1): the callbacks a
// module may export and the functions a host exposes in module env. 0.2.0
// has the same functions (0.2.1 added none a module of this SDK imports).
func spec(n int, result bool, i64At ...int) string {
	ps := make([]api.ValueType, n)
	for i := range ps {
		ps[i] = api.ValueTypeI32
		if slices.Contains(i64At, i) {
			ps[i] = api.ValueTypeI64
		}
	}
	var rs []api.ValueType
	if result {
		rs = []api.ValueType{api.ValueTypeI32}
	}
	return sig(ps, rs)
}

var specCallbacks = map[string]string{
	"_initialize":                             spec(0, false),
	"proxy_abi_version_0_2_0":                 spec(0, false),
	"proxy_abi_version_0_2_1":                 spec(0, false),
	"proxy_on_memory_allocate":                spec(1, true),
	"malloc":                                  spec(1, true),
	"proxy_on_context_create":                 spec(2, false),
	"proxy_on_done":                           spec(1, true),
	"proxy_on_log":                            spec(1, false),
	"proxy_on_delete":                         spec(1, false),
	"proxy_on_vm_start":                       spec(2, true),
	"proxy_on_configure":                      spec(2, true),
	"proxy_on_tick":                           spec(1, false),
	"proxy_on_new_connection":                 spec(1, true),
	"proxy_on_downstream_data":                spec(3, true),
	"proxy_on_downstream_connection_close":    spec(2, false),
	"proxy_on_upstream_data":                  spec(3, true),
	"proxy_on_upstream_connection_close":      spec(2, false),
	"proxy_on_request_headers":                spec(3, true),
	"proxy_on_request_body":                   spec(3, true),
	"proxy_on_request_trailers":               spec(2, true),
	"proxy_on_response_headers":               spec(3, true),
	"proxy_on_response_body":                  spec(3, true),
	"proxy_on_response_trailers":              spec(2, true),
	"proxy_on_http_call_response":             spec(5, false),
	"proxy_on_grpc_receive_initial_metadata":  spec(3, false),
	"proxy_on_grpc_receive":                   spec(3, false),
	"proxy_on_grpc_receive_trailing_metadata": spec(3, false),
	"proxy_on_grpc_close":                     spec(3, false),
	"proxy_on_queue_ready":                    spec(2, false),
	"proxy_on_foreign_function":               spec(3, false),
}

var specHostFunctions = map[string]string{
	"proxy_done":                         spec(0, true),
	"proxy_set_effective_context":        spec(1, true),
	"proxy_log":                          spec(3, true),
	"proxy_get_log_level":                spec(1, true),
	"proxy_get_current_time_nanoseconds": spec(1, true),
	"proxy_set_tick_period_milliseconds": spec(1, true),
	"proxy_set_buffer_bytes":             spec(5, true),
	"proxy_get_buffer_bytes":             spec(5, true),
	"proxy_get_buffer_status":            spec(3, true),
	"proxy_get_header_map_size":          spec(2, true),
	"proxy_get_header_map_pairs":         spec(3, true),
	"proxy_set_header_map_pairs":         spec(3, true),
	"proxy_get_header_map_value":         spec(5, true),
	"proxy_add_header_map_value":         spec(5, true),
	"proxy_replace_header_map_value":     spec(5, true),
	"proxy_remove_header_map_value":      spec(3, true),
	"proxy_continue_stream":              spec(1, true),
	"proxy_close_stream":                 spec(1, true),
	"proxy_get_status":                   spec(3, true),
	"proxy_send_local_response":          spec(8, true),
	"proxy_http_call":                    spec(10, true),
	"proxy_grpc_call":                    spec(12, true),
	"proxy_grpc_stream":                  spec(9, true),
	"proxy_grpc_send":                    spec(4, true),
	"proxy_grpc_cancel":                  spec(1, true),
	"proxy_grpc_close":                   spec(1, true),
	"proxy_set_shared_data":              spec(5, true),
	"proxy_get_shared_data":              spec(5, true),
	"proxy_register_shared_queue":        spec(3, true),
	"proxy_resolve_shared_queue":         spec(5, true),
	"proxy_enqueue_shared_queue":         spec(3, true),
	"proxy_dequeue_shared_queue":         spec(3, true),
	"proxy_define_metric":                spec(4, true),
	"proxy_record_metric":                spec(2, true, 1),
	"proxy_increment_metric":             spec(2, true, 1),
	"proxy_get_metric":                   spec(2, true),
	"proxy_get_property":                 spec(4, true),
	"proxy_set_property":                 spec(4, true),
	"proxy_call_foreign_function":        spec(6, true),
}

// specWASI are the WASI functions the specification names (their types
// are WASI preview 1's); the Go runtime imports a few more, which Envoy's
// proxy-wasm host provides from 1.33 on (the SDK's stated requirement).
var (
	specWASI = []string{"fd_write", "clock_time_get", "random_get", "environ_sizes_get", "environ_get",
		"args_sizes_get", "args_get", "proc_exit"}
	goRuntimeWASI = []string{"fd_read", "fd_close", "fd_fdstat_get", "fd_fdstat_set_flags", "fd_prestat_get",
		"fd_prestat_dir_name", "poll_oneoff", "sched_yield"}
)

// TestABI checks the built module's exports and imports against the
// proxy-wasm ABI v0.2 specification.
func TestABI(t *testing.T) {
	h := newHost(t)
	mod := h.Module()

	exports := mod.ExportedFunctions()
	for _, name := range []string{"_initialize", "proxy_abi_version_0_2_0", "proxy_on_memory_allocate",
		"proxy_on_context_create", "proxy_on_vm_start", "proxy_on_configure", "proxy_on_request_headers",
		"proxy_on_response_headers", "proxy_on_http_call_response", "proxy_on_done", "proxy_on_delete"} {
		if exports[name] == nil {
			t.Errorf("missing export %s", name)
		}
	}
	for name, f := range exports {
		want, ok := specCallbacks[name]
		if !ok {
			t.Errorf("export %s is not a proxy-wasm 0.2 callback", name)
			continue
		}
		if got := sig(f.ParamTypes(), f.ResultTypes()); got != want {
			t.Errorf("export %s: %s, the spec says %s", name, got, want)
		}
	}
	if _, ok := mod.ExportedMemories()["memory"]; !ok {
		t.Error("no exported memory")
	}

	// WASI types from wazero's implementation of preview 1.
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	wasi, err := wasi_snapshot_preview1.NewBuilder(rt).Compile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wasiTypes := map[string]string{}
	for name, f := range wasi.ExportedFunctions() {
		wasiTypes[name] = sig(f.ParamTypes(), f.ResultTypes())
	}

	env := map[string]bool{}
	for _, f := range mod.ImportedFunctions() {
		module, name, _ := f.Import()
		got := sig(f.ParamTypes(), f.ResultTypes())
		switch module {
		case "env":
			env[name] = true
			if want, ok := specHostFunctions[name]; !ok {
				t.Errorf("import env.%s is not a proxy-wasm 0.2 host function", name)
			} else if got != want {
				t.Errorf("import env.%s: %s, the spec says %s", name, got, want)
			}
			if n, ok := EnvFunctions[name]; !ok || spec(n, true, EnvI64[name]...) != got {
				t.Errorf("import env.%s: this host does not implement it as %s", name, got)
			}
		case "wasi_snapshot_preview1":
			if !slices.Contains(specWASI, name) && !slices.Contains(goRuntimeWASI, name) {
				t.Errorf("import wasi_snapshot_preview1.%s: neither in the spec nor one the Go runtime needs", name)
			}
			if got != wasiTypes[name] {
				t.Errorf("import wasi_snapshot_preview1.%s: %s, WASI preview 1 says %s", name, got, wasiTypes[name])
			}
		default:
			t.Errorf("import from module %q (want env or wasi_snapshot_preview1)", module)
		}
	}
	for name := range EnvFunctions {
		if !env[name] {
			t.Errorf("this host implements env.%s, which the module does not import (keep the host minimal)", name)
		}
	}
	// The filter's own needs.
	for _, name := range []string{"proxy_get_shared_data", "proxy_set_shared_data", "proxy_send_local_response", "proxy_http_call"} {
		if !env[name] {
			t.Errorf("the filter does not import %s", name)
		}
	}
}

const exactConfig = `{"slots":64,"keys_per_slot":4,"rules":[
	{"name":"users","endpoint":"/api","strategy":"fixed","limit":100,"window":"1h","key_by":"header:x-user"},
	{"name":"multi","endpoint":"/multi","limits":[{"strategy":"log","limit":60,"window":"1h"},{"strategy":"gcra","limit":80,"window":"1h"}],"key_by":"header:x-user"},
	{"name":"ip","endpoint":"/ip","strategy":"token","limit":50,"window":"1h"}]}`

// TestSharedDataExact: several VMs (Envoy's workers) on one shared-data
// map, driven by concurrent requests, admit exactly each limit.
func TestSharedDataExact(t *testing.T) {
	h := newHost(t)
	ctx := context.Background()
	const vms = 4
	var pool []*VM
	for range vms {
		vm, err := h.NewVM(ctx, []byte(exactConfig))
		if err != nil {
			t.Fatal(err)
		}
		pool = append(pool, vm)
	}
	type target struct {
		path, user string
		limit      int
	}
	targets := []target{{"/api/a", "alice", 100}, {"/api/b", "bob", 100}, {"/multi", "alice", 60}, {"/ip", "", 50}}
	const goroutines, perGoroutine = 16, 100
	admitted := make([]int, len(targets))
	denied := make([]int, len(targets))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perGoroutine {
				k := (g + i) % len(targets)
				tg := targets[k]
				vm := pool[(g*7+i)%vms]
				hs := [][2]string{{":method", "GET"}, {":authority", "x"}, {":path", tg.path}}
				if tg.user != "" {
					hs = append(hs, [2]string{"x-user", tg.user})
				}
				s, err := vm.Request(hs, map[string]string{"source.address": "192.0.2.9:1000"}, [][2]string{{":status", "200"}})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				switch {
				case s.Local == nil && s.Action == ActionContinue:
					admitted[k]++
				case s.Local != nil && s.Local.Status == 429:
					denied[k]++
				default:
					t.Errorf("%s: action %d, local %+v", tg.path, s.Action, s.Local)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for k, tg := range targets {
		if admitted[k] != tg.limit || admitted[k]+denied[k] != goroutines*perGoroutine/len(targets) {
			t.Errorf("%s %s: admitted %d, denied %d; want exactly %d admitted", tg.path, tg.user, admitted[k], denied[k], tg.limit)
		}
	}
	t.Logf("%d VMs, %d requests: %d shared-data writes, %d cas mismatches retried, %d shared-data keys",
		vms, goroutines*perGoroutine, h.Writes.Load(), h.Mismatches.Load(), h.SharedKeys())
	// Every VM created the same slots at start; no decision created more.
	if got, want := h.SharedKeys(), 3*64; got != want {
		t.Errorf("%d shared-data keys, want %d (3 rules × 64 slots)", got, want)
	}
}

// TestResponses: the answers a VM gives, through the real module: fields
// on an admitted response, 429 with Retry-After, 400 without a key, and the
// next window admitting again.
func TestResponses(t *testing.T) {
	h := newHost(t)
	vm, err := h.NewVM(context.Background(), []byte(`[{"name":"r","strategy":"fixed","limit":1,"window":"1m","key_by":"header:x-user"}]`))
	if err != nil {
		t.Fatal(err)
	}
	h.Now.Store(t0.Add(15 * time.Second).UnixNano())
	req := [][2]string{{":method", "GET"}, {":authority", "x"}, {":path", "/"}, {"x-user", "u"}}
	s, err := vm.Request(req, nil, [][2]string{{":status", "200"}, {"ratelimit", `"up";r=5;t=9`}})
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{":status", "200"}, {"ratelimit", `"up";r=5;t=9, "r";r=0;t=45`},
		{"ratelimit-policy", `"r";q=1;w=60`}, {"x-ratelimit-limit", "1"}, {"x-ratelimit-remaining", "0"}, {"x-ratelimit-reset", "45"}}
	if fmt.Sprint(s.ResponseHeaders) != fmt.Sprint(want) {
		t.Errorf("response headers\n%q\nwant\n%q", s.ResponseHeaders, want)
	}
	s, _ = vm.Request(req, nil, nil)
	if s.Local == nil || s.Local.Status != 429 || string(s.Local.Body) != "Rate limit exceeded\n" {
		t.Fatalf("second: %+v", s.Local)
	}
	wantLocal := [][2]string{{"RateLimit-Policy", `"r";q=1;w=60`}, {"RateLimit", `"r";r=0;t=45`},
		{"X-RateLimit-Limit", "1"}, {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", "45"}, {"Retry-After", "45"},
		{"content-type", "text/plain; charset=utf-8"}, {"x-content-type-options", "nosniff"}}
	if fmt.Sprint(s.Local.Headers) != fmt.Sprint(wantLocal) {
		t.Errorf("429 headers\n%q\nwant\n%q", s.Local.Headers, wantLocal)
	}
	s, _ = vm.Request(req[:3], nil, nil)
	if s.Local == nil || s.Local.Status != 400 || !strings.Contains(string(s.Local.Body), "x-user") {
		t.Fatalf("no key: %+v", s.Local)
	}
	h.Now.Store(t0.Add(time.Minute).UnixNano())
	if s, _ = vm.Request(req, nil, nil); s.Local != nil {
		t.Fatalf("next window: %+v", s.Local)
	}
}

// TestGlobalCallout: global mode through the real module: the callout's
// request, then the request resumed or answered per the service's answer.
func TestGlobalCallout(t *testing.T) {
	h := newHost(t)
	vm, err := h.NewVM(context.Background(), []byte(`[{"name":"g","strategy":"fixed","limit":1,"window":"1s","key_by":"header:x-user",
		"global":{"cluster":"rl","timeout":"30ms","rule":"login"}}]`))
	if err != nil {
		t.Fatal(err)
	}
	req := [][2]string{{":method", "GET"}, {":authority", "x"}, {":path", "/"}, {"x-user", "u"}}
	for _, tc := range []struct {
		status, body string
		want         uint32 // 0: resumed
	}{
		{"200", `{"allowed":true,"limit_name":"default","limit":1,"remaining":0,"window_ms":1000,"reset_after_ms":999,"retry_after_ms":0}`, 0},
		{"429", `{"allowed":false,"limit_name":"default","limit":1,"remaining":0,"window_ms":1000,"reset_after_ms":999,"retry_after_ms":999}`, 429},
		{"", "", 503},
	} {
		s, err := vm.Request(req, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.Action != ActionPause || len(s.Callouts) != 1 {
			t.Fatalf("action %d, %d callouts", s.Action, len(s.Callouts))
		}
		c := s.Callouts[0]
		if c.Cluster != "rl" || c.TimeoutMS != 30 || string(c.Body) != `{"rule":"login","key":"u","cost":1}` {
			t.Fatalf("callout %+v %s", c, c.Body)
		}
		var hs [][2]string
		if tc.status != "" {
			hs = [][2]string{{":status", tc.status}}
		}
		if err := vm.Respond(s, c, CalloutResponse{Headers: hs, Body: []byte(tc.body)}, [][2]string{{":status", "200"}}); err != nil {
			t.Fatal(err)
		}
		switch {
		case tc.want == 0:
			if !s.Resumed || s.Local != nil || len(s.ResponseHeaders) != 6 {
				t.Errorf("%s: resumed %v, local %+v, response %q", tc.status, s.Resumed, s.Local, s.ResponseHeaders)
			}
		case s.Local == nil || s.Local.Status != tc.want:
			t.Errorf("%s: local %+v, want %d", tc.status, s.Local, tc.want)
		}
	}
}

// TestBadConfiguration: the module refuses a bad configuration at
// proxy_on_configure, logging the field.
func TestBadConfiguration(t *testing.T) {
	h := newHost(t)
	_, err := h.NewVM(context.Background(), []byte(`[{"name":"r","strategy":"fixed","limit":0,"window":"1s"}]`))
	if err == nil || !strings.Contains(err.Error(), `rules[0] \"r\": limit 0: outside [1, 1099511627776]`) {
		t.Fatalf("err = %v", err)
	}
}

// BenchmarkDecision is one request decided in the wazero-hosted module:
// stream context created, request headers (match, key, shared-data read,
// core.TakeAll, compare-and-swap write), response headers (the fields
// added), done and delete. 1000 keys on a token bucket that admits all; two
// limits; every request denied (no write); no rule matching (the host's and
// the SDK's share).
func BenchmarkDecision(b *testing.B) {
	for _, bc := range []struct{ name, conf string }{
		{"token_bucket", `{"slots":4096,"rules":[{"name":"r","strategy":"token","limit":1000000,"window":"1s","key_by":"header:x-user"}]}`},
		{"two_limits", `{"slots":4096,"rules":[{"name":"r","limits":[{"strategy":"gcra","limit":1000000,"window":"1s"},{"strategy":"fixed","limit":1000000000,"window":"1d"}],"key_by":"header:x-user"}]}`},
		{"denied", `{"slots":4096,"rules":[{"name":"r","strategy":"fixed","limit":1,"window":"1h","key_by":"header:x-user"}]}`},
		// The floor: the same request through the module, no rule matching.
		{"unmatched", `{"slots":1,"rules":[{"name":"r","endpoint":"/none","strategy":"fixed","limit":1,"window":"1h","key_by":"header:x-user"}]}`},
	} {
		b.Run("case="+bc.name, func(b *testing.B) {
			h := newHost(b)
			vm, err := h.NewVM(context.Background(), []byte(bc.conf))
			if err != nil {
				b.Fatal(err)
			}
			reqs := make([][][2]string, 1000)
			for i := range reqs {
				reqs[i] = [][2]string{{":method", "GET"}, {":authority", "x"}, {":path", "/"}, {"x-user", fmt.Sprint("user-", i)}}
			}
			upstream := [][2]string{{":status", "200"}}
			b.ReportAllocs()
			i := 0
			cpu0 := cpuTime()
			for b.Loop() {
				h.Now.Add(1000)
				if _, err := vm.Request(reqs[i%len(reqs)], nil, upstream); err != nil {
					b.Fatal(err)
				}
				i++
			}
			// The process's CPU time per request: on a shared, loaded
			// machine ns/op (wall time) also counts the waits for a core.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(i), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user and system CPU time in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
