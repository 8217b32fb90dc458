package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rlcore/rl/httplimit"
)

func TestMatch(t *testing.T) {
	cfg := mustConfig(t, `[
		{"name":"all","endpoint":"/","strategy":"fixed","limit":1,"window":"1s"},
		{"name":"pay","endpoint":"/v1/pay","strategy":"fixed","limit":1,"window":"1s"},
		{"name":"pay-post","endpoint":"/v1/pay","methods":["POST"],"strategy":"fixed","limit":1,"window":"1s"},
		{"name":"pay-host","endpoint":"/v1/pay","host":"*.example.com","strategy":"fixed","limit":1,"window":"1s"},
		{"name":"pay-exact","endpoint":"/v1/pay","host":"api.example.com","strategy":"fixed","limit":1,"window":"1s"},
		{"name":"dir","endpoint":"/static/","strategy":"fixed","limit":1,"window":"1s"}]`)
	for _, tc := range []struct{ method, authority, path, want string }{
		{"GET", "x", "/", "all"},
		{"GET", "x", "/v1/payments", "all"},
		{"GET", "x", "/v1/pay", "pay"},
		{"GET", "x", "/v1/pay/refund?x=1", "pay"},
		{"POST", "x:8080", "/v1/pay", "pay-post"},
		{"POST", "www.example.com", "/v1/pay", "pay-host"},
		{"POST", "API.Example.com.:443", "/v1/pay", "pay-exact"},
		{"POST", "[::1]:443", "/v1/pay", "pay-post"},
		{"GET", "x", "/static/a.css", "dir"},
		{"GET", "x", "/static", "all"},
	} {
		r := cfg.match(&request{method: tc.method, authority: tc.authority, path: tc.path})
		if r == nil || r.Name != tc.want {
			t.Errorf("%s %s %s: %v, want %s", tc.method, tc.authority, tc.path, r, tc.want)
		}
	}
	none := mustConfig(t, `[{"name":"a","endpoint":"/a","strategy":"fixed","limit":1,"window":"1s"}]`)
	if r := none.match(&request{method: "GET", path: "/b"}); r != nil {
		t.Errorf("/b matched %s", r.Name)
	}
}

func TestKeys(t *testing.T) {
	hs := map[string]string{"x-user": "u 1", "authorization": "Bearer  tok", "x-api-key": "other", "x-cost": " 7 "}
	req := &request{
		path:          "/p/a?k=v%201&k=second&e=%zz",
		header:        func(n string) string { return hs[n] },
		sourceAddress: func() string { return "[2001:db8:1:2:3::4%eth0]:5555" },
	}
	for _, tc := range []struct{ keyBy, want string }{
		{"global", "global"},
		{"path", "/p/a"},
		{"ip", "2001:db8:1:2::/64"},
		{"header:x-user", "u 1"},
		{"query:k", "v 1"},
		{"api_key", apiKeyDigest("tok")},
	} {
		r := &rule{KeyBy: tc.keyBy}
		if got, err := r.key(req); err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.keyBy, got, err, tc.want)
		}
	}
	for _, keyBy := range []string{"header:x-none", "query:e", "query:none"} {
		if _, err := (&rule{KeyBy: keyBy}).key(req); err == nil {
			t.Errorf("%s: no error", keyBy)
		}
	}
	if c, err := (&rule{CostHeader: "x-cost", Cost: 1}).cost(req); err != nil || c != 7 {
		t.Errorf("cost %d, %v", c, err)
	}
	hs["x-cost"] = "-1"
	if _, err := (&rule{CostHeader: "x-cost"}).cost(req); err == nil {
		t.Error("cost -1 accepted")
	}
	if c, _ := (&rule{CostHeader: "x-none", Cost: 3}).cost(req); c != 3 {
		t.Errorf("default cost %d", c)
	}
}

// TestIPKeyMatchesHTTPLimit holds the filter's IP keys to httplimit's
// default ClientIPKey (as rl-wasm-host keys by IP).
func TestIPKeyMatchesHTTPLimit(t *testing.T) {
	kf, err := httplimit.ClientIPKey(httplimit.IPKeyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"192.0.2.7:1234", "[::ffff:192.0.2.7]:1", "[2001:db8::1]:80", "[fe80::1%eth0]:80", "[2001:db8:a:b:c:d:e:f]:9"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = addr
		want, err := kf(r)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ipKey(addr); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", addr, got, err, want)
		}
	}
	if _, err := ipKey(""); err == nil {
		t.Error("no address: no error")
	}
}
