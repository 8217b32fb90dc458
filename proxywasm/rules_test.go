package main

import (
	"testing"

	"github.com/rlcore/rl/internal/request/pipeline"
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
		r, err := cfg.match(newRequest([][2]string{{":method", tc.method}, {":authority", tc.authority}, {":path", tc.path}}, ""))
		if err != nil || r == nil || r.Name != tc.want {
			t.Errorf("%s %s %s: %v %v, want %s", tc.method, tc.authority, tc.path, r, err, tc.want)
		}
	}
	none := mustConfig(t, `[{"name":"a","endpoint":"/a","strategy":"fixed","limit":1,"window":"1s"}]`)
	if r, err := none.match(newRequest(get("/b"), "")); r != nil || err != nil {
		t.Errorf("/b matched %v, %v", r, err)
	}
	if _, err := none.match(newRequest(get("/a%2Fb"), "")); err != pipeline.ErrPathSlash {
		t.Errorf("/a%%2Fb: %v", err)
	}
}

// TestKeys: the filter reads proxy-wasm's header pairs into the pipeline
// (internal/request/pipeline, which tests every key source): names in any case,
// every value of a field, the query split from :path.
func TestKeys(t *testing.T) {
	cfg := mustConfig(t, `[
		{"name":"h","endpoint":"/h","strategy":"fixed","limit":1,"window":"1s","key_by":"header:X-User"},
		{"name":"q","endpoint":"/q","strategy":"fixed","limit":1,"window":"1s","key_by":"query:k"},
		{"name":"p","endpoint":"/p","strategy":"fixed","limit":1,"window":"1s","key_by":"path"},
		{"name":"a","endpoint":"/a","strategy":"fixed","limit":1,"window":"1s","key_by":"api_key","cost_header":"X-Cost"},
		{"name":"i","endpoint":"/i","strategy":"fixed","limit":1,"window":"1s"}]`)
	for _, tc := range []struct {
		path string
		hs   [][2]string
		want string
	}{
		{"/h", [][2]string{{"x-user", "u 1"}}, "u 1"},
		{"/q?k=v%201", nil, "v 1"},
		{"/P/./x;y?z", nil, "/p/x"},
		{"/a", [][2]string{{"authorization", "Bearer  tok"}, {"x-api-key", "other"}}, pipeline.APIKeyDigest("tok")},
		{"/i", nil, "2001:db8:1:2::/64"},
	} {
		req := newRequest(append(get(tc.path), tc.hs...), "[2001:db8:1:2:3::4%eth0]:5555")
		r, err := cfg.match(req)
		if err != nil || r == nil {
			t.Fatalf("%s: %v %v", tc.path, r, err)
		}
		if got, err := r.key(req); err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
	// One place, once: a second value is refused, not a fresh key.
	req := newRequest(get("/h", [2]string{"x-user", "a"}, [2]string{"X-User", "b"}), "")
	r, _ := cfg.match(req)
	if _, err := r.key(req); err == nil {
		t.Error("two X-User values: no error")
	}
	for _, v := range []string{"0", "00", "-0", "+0", " 0 "} {
		req := newRequest(get("/a", [2]string{"x-cost", v}), "")
		r, _ := cfg.match(req)
		if _, err := r.cost(req); err == nil {
			t.Errorf("cost %q accepted", v)
		}
	}
}
