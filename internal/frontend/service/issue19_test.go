package service

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/memstore"
)

// Issue 19, 6: a full memory store is load, not an outage. After a flood
// of unique keys fills it, a fail_open rule refuses a new key (503 with
// Retry-After) instead of admitting every request of it.
func TestFullStoreIsLoadNotOutage(t *testing.T) {
	up := newUpstream(t)
	var mem *memstore.Store
	e := newEnv(t, "upstream: "+up.srv.URL+`
rules:
  - {name: open, endpoint: /, strategy: fixed, limit: 2, window: 1h, key_by: "header:X-User", fail_open: true}
`, func(o *Options) {
		mem = memstore.New(&memstore.Config{Shards: 1, MaxKeys: 200, SweepInterval: -1, Clock: o.Clock})
		o.Store = mem
	})
	t.Cleanup(func() { mem.Close() })
	for i := range 250 {
		e.do(t, "GET", "/", "", "X-User", fmt.Sprint("junk", i))
	}
	admitted := 0
	for range 30 {
		r := e.do(t, "GET", "/", "", "X-User", "victim")
		switch r.code {
		case 200:
			admitted++
		case 503:
			require.Equal(t, "1", r.h.Get("Retry-After"))
		default:
			require.Equal(t, 429, r.code)
		}
	}
	require.LessOrEqual(t, admitted, 2, "a full store admitted a new key")
	// A key whose state is at rest makes room: the store drops it first.
	e.now.Add(2 * 3600 * 1_000_000)
	require.Equal(t, 200, e.do(t, "GET", "/", "", "X-User", "victim").code)
}

// Issue 19, 9: a key's length is checked on the key the store sees,
// "<rule>:<key>", so a key that fits the Go check but not a store's is 400,
// not a store failure (PostgreSQL's 256 bytes) or a silent pass.
func TestKeyLengthOnStoredKey(t *testing.T) {
	up := newUpstream(t)
	e := newEnv(t, "upstream: "+up.srv.URL+`
rules:
  - {name: webhooks, endpoint: /w, strategy: fixed, limit: 5, window: 1m, key_by: "header:X-User"}
`, nil)
	k := strings.Repeat("k", 250) // 259 bytes as "webhooks:" + k
	r := e.do(t, "GET", "/w", "", "X-User", k)
	require.Equal(t, 400, r.code, "%s", r.body)
	r = e.post(t, "check", `{"rule":"webhooks","key":"`+k+`"}`)
	require.Equal(t, 400, r.code, "%s", r.body)
	require.Equal(t, "invalid_key", r.errorJSON(t).Code)
	require.Equal(t, 200, e.post(t, "check", `{"rule":"webhooks","key":"`+k[:247]+`"}`).code, "256 bytes as stored")
}

// Issue 19, 10: an upstream's query secrets stay out of /rules, and a
// check token cannot read /metrics (an admin's).
func TestSmallLeaks(t *testing.T) {
	e := newEnv(t, tokenConfig("http://127.0.0.1:1/base?access_token=s3cretvalue&v=1"), nil)
	srv := httptest.NewServer(e.svc.Handler())
	t.Cleanup(srv.Close)
	e.srv = srv
	r := e.do(t, "GET", APIPrefix+"rules", "", "Authorization", "Bearer "+tokAdmin)
	require.Equal(t, 200, r.code, "%s", r.body)
	require.NotContains(t, string(r.body), "s3cretvalue")
	require.Contains(t, string(r.body), "access_token=xxxxx")
	require.Equal(t, 403, e.do(t, "GET", "/metrics", "", "Authorization", "Bearer "+tokCheck).code, "a check token read /metrics")
	require.Equal(t, 200, e.do(t, "GET", "/metrics", "", "Authorization", "Bearer "+tokAdmin).code)
}

// Issue 19, 7: a reload that would make a running listener unsafe (here:
// removing api_tokens under a check that needs them, as rl-wasm-host's
// non-loopback API listener registers) is refused; the old configuration
// stays, the failure is counted.
func TestReloadRefusedWhenUnsafe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(tokenConfig("demo")), 0o600))
	e := newEnv(t, tokenConfig("demo"), nil)
	e.svc.AddReloadCheck(func(c *Config) error {
		if len(c.APITokens) == 0 {
			return errors.New("the API listens on 0.0.0.0:8081 and needs api_tokens")
		}
		return nil
	})
	require.NoError(t, e.svc.Reload(path))
	require.NoError(t, os.WriteFile(path, []byte("rules: [{name: r, strategy: fixed, limit: 1, window: 1m}]\n"), 0o600))
	err := e.svc.Reload(path)
	require.ErrorContains(t, err, "needs api_tokens")
	require.Len(t, e.svc.Config().APITokens, 2, "the configuration in force is kept")
	m := string(e.do(t, "GET", "/metrics", "", "Authorization", "Bearer "+tokAdmin).body)
	require.Contains(t, m, `rl_config_reloads_total{result="failure"} 1`)
}
