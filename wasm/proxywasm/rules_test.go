package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
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
		{"name":"dir","endpoint":"/static/","strategy":"fixed","limit":1,"window":"1s"},
		{"name":"v6","endpoint":"/v6","host":"2001:DB8::0001","strategy":"fixed","limit":1,"window":"1s"},
		{"name":"v6b","endpoint":"/v6b","host":"2001:db8::1","strategy":"fixed","limit":1,"window":"1s"}]`)
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
		// Any spelling of an IPv6 address matches any other.
		{"GET", "[2001:db8::1]:443", "/v6", "v6"},
		{"GET", "[2001:0DB8:0:0::1]", "/v6", "v6"},
		{"GET", "[2001:DB8::0001]:80", "/v6b", "v6b"},
		{"GET", "[2001:db8::2]", "/v6", "all"},
	} {
		r, err := cfg.match(&request{method: tc.method, authority: tc.authority, path: tc.path})
		if err != nil || r == nil || r.Name != tc.want {
			t.Errorf("%s %s %s: %v %v, want %s", tc.method, tc.authority, tc.path, r, err, tc.want)
		}
	}
	none := mustConfig(t, `[{"name":"a","endpoint":"/a","strategy":"fixed","limit":1,"window":"1s"}]`)
	if r, err := none.match(&request{method: "GET", path: "/b"}); r != nil || err != nil {
		t.Errorf("/b matched %v, %v", r, err)
	}
	if _, err := none.match(&request{method: "GET", path: "/a%2Fb"}); err != errPathSlash {
		t.Errorf("/a%%2Fb: %v", err)
	}
}

// TestMatchPath: no spelling of a path goes around its rule (the forms
// rl-wasm-host's proxy matches), and what cannot be cleaned is refused.
func TestMatchPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/", "/"},
		{"/v1/pay?x=/admin", "/v1/pay"},
		{"/V1/PAY", "/v1/pay"},
		{"/v1/%70ay", "/v1/pay"},
		{"//v1///pay", "/v1/pay"},
		{"/x/../v1/./pay", "/v1/pay"},
		{"/x/%2e%2e/v1/pay", "/v1/pay"},
		{"/x/..;p=1/v1/pay", "/v1/pay"},
		{"/v1/pay;jsessionid=1/refund", "/v1/pay/refund"},
		{"/static/", "/static/"},
		{"/a/.", "/a/"},
		{"/a/b/..", "/a/"},
		{"/caf\xc3\xa9", "/caf%c3%a9"},
		{"/%3b%41", "/%3ba"},
		{"/a b", "/a%20b"},
	} {
		in := tc.in
		if got, err := matchPath(in); err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"", errPathRelative},
		{"v1", errPathRelative},
		{"/a%2fb", errPathSlash},
		{"/a%5Cb", errPathSlash},
		{"/a\\b", errPathSlash},
		{"/a%00", errPathControl},
		{"/a\x01", errPathControl},
		{"/a%2541", errPathDouble},
		{"/a%25%34%31", errPathDouble},
		{"/..", errPathEscape},
		{"/a/../../b", errPathEscape},
		{"/a%4", errPathBadEncoding},
		{"/a%zz", errPathBadEncoding},
	} {
		in := tc.in
		if got, err := matchPath(in); err != tc.want {
			t.Errorf("%q: %q, %v; want %v", in, got, err, tc.want)
		}
	}
}

func FuzzMatchPath(f *testing.F) {
	for _, s := range []string{"/", "/v1/pay", "/x/%2e%2e/a;b/./c//d", "/%41%2F", "/a/b/../..", "/caf\xc3\xa9?q"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		m, err := matchPath(p)
		if err != nil {
			return
		}
		// The fast path agrees with the full one.
		if plainPath(p) {
			if m != p {
				t.Fatalf("plain %q → %q", p, m)
			}
		}
		// Canonical: its own form, rooted, no dot or empty segments.
		if again, err := matchPath(m); err != nil || again != m {
			t.Fatalf("%q → %q → %q, %v", p, m, again, err)
		}
		if !strings.HasPrefix(m, "/") || strings.Contains(m, "//") || strings.Contains(m, "/./") || strings.Contains(m, "/../") ||
			strings.HasSuffix(m, "/..") || strings.HasSuffix(m, "/.") || strings.ContainsAny(m, ";?#\\") || m != strings.ToLower(m) {
			t.Fatalf("%q → %q", p, m)
		}
	})
}

func TestKeys(t *testing.T) {
	hs := map[string]string{"x-user": "u 1", "authorization": "Bearer  tok", "x-api-key": "other", "x-cost": " 7 "}
	req := &request{
		path:          "/P/a?k=v%201&k=second&e=%zz",
		canonical:     "/p/a", // as match sets it
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
