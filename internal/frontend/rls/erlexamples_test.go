package rls

import (
	"path/filepath"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/stretchr/testify/require"
)

// Every configuration of testdata/envoyproxy-ratelimit loads, and none
// uses an rl extension: each is portable both ways.
func TestERLExamplesLoad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(erlDir, "*.yaml"))
	require.NoError(t, err)
	require.Len(t, files, 18)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, err := LoadConfig(f)
			require.NoError(t, err)
			require.Len(t, cfg.Domains, 1)
			for _, d := range cfg.Domains {
				require.Empty(t, d.Extensions)
			}
		})
	}
}

// envoyRoute is the descriptors Envoy's example proxy
// (examples/envoy/proxy.yaml) sends for a request to one of its routes:
// one descriptor per rate_limits entry, of request_headers actions whose
// descriptor key is the header's name, when every header is present.
func envoyRoute(headers map[string]string, entries ...[]string) []*commonv3.RateLimitDescriptor {
	var out []*commonv3.RateLimitDescriptor
next:
	for _, names := range entries {
		var kv []string
		for _, n := range names {
			v, ok := headers[n]
			if !ok {
				continue next
			}
			kv = append(kv, n, v)
		}
		out = append(out, d(kv...))
	}
	return out
}

// The routes of examples/envoy/proxy.yaml that integration-test/scripts
// call.
var (
	twoHeader  = [][]string{{"foo", "bar"}, {"foo", "baz"}}
	fourHeader = [][]string{{"foo", "bar"}, {"source_cluster", "destination_cluster"}}
	fiveHeader = [][]string{{"foo", "bar"}, {"source_cluster", "destination_cluster"}, {"category"}}
	unspec     = [][]string{{"unspec"}}
)

// h builds a header map from name, value pairs.
func h(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// examples/ratelimit/config/example.yaml decides as envoyproxy/ratelimit's
// integration tests (integration-test/scripts/*.sh) expect, each script a
// subtest, each step a request (allowed or limited), all in one minute.
func TestERLExampleYAML(t *testing.T) {
	type step struct {
		headers map[string]string
		route   [][]string
		ok      bool
	}
	run := func(t *testing.T, e *env, steps []step) {
		t.Helper()
		for i, s := range steps {
			got := e.call(t, "rl", envoyRoute(s.headers, s.route...)...).OverallCode == OK
			require.Equal(t, s.ok, got, "step %d: %v", i+1, s.headers)
		}
	}
	repeat := func(n int, s step) []step {
		out := make([]step, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	t.Run("simple-get.sh", func(t *testing.T) {
		run(t, erlEnv(t, "example.yaml", envOpts{}), []step{{h("foo", "test", "baz", "shady"), twoHeader, true}})
	})
	t.Run("trigger-ratelimit.sh", func(t *testing.T) {
		// (foo, *), (baz, not-so-shady): 3 a minute.
		s := step{h("foo", "pelle", "baz", "not-so-shady"), twoHeader, true}
		steps := append(repeat(3, s), step{s.headers, twoHeader, false}, step{s.headers, twoHeader, false})
		run(t, erlEnv(t, "example.yaml", envOpts{}), steps)
	})
	t.Run("trigger-shadow-mode-key.sh", func(t *testing.T) {
		// (foo, *), (baz, shady): 3 a minute in shadow_mode: never limited.
		e := erlEnv(t, "example.yaml", envOpts{})
		run(t, e, repeat(6, step{h("foo", "pelle", "baz", "shady"), twoHeader, true}))
		require.Equal(t, float64(3), counter(t, e, "rl", "foo.baz_shady", labelShadowDenied))
	})
	t.Run("value-included-in-stats-key-when-unspecified.sh", func(t *testing.T) {
		// (unspec, *): 2 a minute, detailed_metric. The metric is the
		// configuration's "unspec", not "unspec_unspecified_value".
		e := erlEnv(t, "example.yaml", envOpts{})
		s := step{h("unspec", "unspecified_value"), unspec, true}
		run(t, e, append(repeat(2, s), step{s.headers, unspec, false}))
		require.Equal(t, float64(1), counter(t, e, "rl", "unspec", "denied"))
	})
	t.Run("replaces.sh", func(t *testing.T) {
		run(t, erlEnv(t, "example.yaml", envOpts{}), []step{
			// (foo, *), (bar, banned): name banned_limit, 0 a minute.
			{h("foo", "bkthomps", "bar", "banned"), twoHeader, false},
			{h("foo", "bkthomps", "bar", "banned", "source_cluster", "proxy", "destination_cluster", "mock"), fourHeader, false},
			// (source_cluster, proxy), (destination_cluster, override)
			// replaces banned_limit: 2 a minute.
			{h("foo", "bkthomps", "bar", "banned", "source_cluster", "proxy", "destination_cluster", "override"), fourHeader, true},
			{h("foo", "bkthomps", "bar", "banned", "source_cluster", "proxy", "destination_cluster", "override"), fourHeader, true},
			{h("foo", "bkthomps", "bar", "banned", "source_cluster", "proxy", "destination_cluster", "override"), fourHeader, false},
			// (foo, *), (bar, bkthomps): name bkthomps, 1 a minute;
			// (source_cluster, proxy), (destination_cluster, bkthomps)
			// replaces it: 2 a minute, and leaves it untouched.
			{h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "bkthomps"), fourHeader, true},
			{h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "bkthomps"), fourHeader, true},
			{h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "bkthomps"), fourHeader, false},
			{h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "not_bkthomps"), fourHeader, true},
			{h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "not_bkthomps"), fourHeader, false},
			{h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "bkthomps"), fourHeader, false},
			// (category, account) replaces bkthomps and fake_name: 4 a
			// minute.
			{h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "fake", "category", "account"), fiveHeader, true},
			{h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "fake", "category", "account"), fiveHeader, true},
			{h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "fake", "category", "account"), fiveHeader, true},
			{h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "fake", "category", "account"), fiveHeader, true},
			{h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "fake", "category", "account"), fiveHeader, false},
			{h("foo", "foo_2", "bar", "bkthomps"), twoHeader, true},
			{h("foo", "foo_2", "bar", "bkthomps"), twoHeader, false},
			// (foo, *), (bar, *): 3 a minute; (destination_cluster,
			// fake): name fake_name, 2 a minute, not replaced here.
			{h("foo", "foo_3", "bar", "bar_3", "source_cluster", "proxy", "destination_cluster", "fake"), fourHeader, true},
			{h("foo", "foo_3", "bar", "bar_3", "source_cluster", "proxy", "destination_cluster", "fake"), fourHeader, true},
			{h("foo", "foo_3", "bar", "bar_3", "source_cluster", "proxy", "destination_cluster", "fake"), fourHeader, false},
			{h("foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "fake", "category", "account"), fiveHeader, false},
		})
	})
	t.Run("quota.sh", func(t *testing.T) {
		// (service, service_1): 1 a minute, (service, service_2): 2, both
		// quota_mode: a request passes while either has room.
		e := erlEnv(t, "example.yaml", envOpts{})
		quota := func() bool {
			return e.call(t, "rl", d("service", "service_1"), d("service", "service_2")).OverallCode == OK
		}
		require.Equal(t, []bool{true, true, false}, []bool{quota(), quota(), quota()})
		e.now.Add(60_000_000)
		require.True(t, quota(), "the quotas are back a minute later")
	})
	t.Run("multiservice-tokenquota.sh", func(t *testing.T) {
		// On the request path Envoy checks both quotas (hits_addend 0)
		// and routes by the response's metadata to a service with room;
		// on the response path it charges the one that served. A check
		// here is a peek of one unit, OVER_LIMIT at the limit, where
		// envoyproxy/ratelimit adds 0 and answers OK until the count is
		// above it: there service_1 serves 2 and service_2 3 a minute,
		// here 1 and 2, their limits.
		e := erlEnv(t, "example.yaml", envOpts{opts: Options{Trusted: true, ResponseMetadata: true}})
		serve := func() string {
			r := e.call(t, "rl", withCheck(d("service", "service_1")), withCheck(d("service", "service_2")))
			if r.OverallCode != OK {
				return ""
			}
			name := r.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["service_with_quota"].GetStructValue().GetFields()["name"].GetStringValue()
			e.call(t, "rl", d("service", name))
			return name
		}
		require.Equal(t, []string{"service_1", "service_2", "service_2", ""}, []string{serve(), serve(), serve(), serve()})
		e.now.Add(60_000_000)
		require.Equal(t, "service_1", serve(), "the quotas are back a minute later")
	})
	// The rest of the file, which no script calls: (foo, *) alone 2 a
	// minute; (foo, *), (baz, *) 1 a second; (foo, *), (bay, *) and
	// (qux, *) unlimited.
	t.Run("the rest", func(t *testing.T) {
		e := erlEnv(t, "example.yaml", envOpts{})
		require.Equal(t, 2, e.admitted(t, 3, "rl", d("foo", "x")))
		require.Equal(t, 1, e.admitted(t, 2, "rl", d("foo", "x", "baz", "other")))
		e.now.Add(1_000_000)
		require.Equal(t, 1, e.admitted(t, 2, "rl", d("foo", "x", "baz", "other")))
		require.Equal(t, 100, e.admitted(t, 100, "rl", d("foo", "x", "bay", "y"), d("qux", "z")))
	})
}
