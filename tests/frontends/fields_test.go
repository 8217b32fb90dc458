package frontends_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/frontend/rls"
	"github.com/rlcore/rl/internal/frontend/service"
	"github.com/rlcore/rl/tests/frontends"
)

// fieldNames are the rate-limit fields every front end writes.
var fieldNames = []string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After"}

var sfName = regexp.MustCompile(`"[^"]*"`)

// fieldsOf is the fields of one answer, the policies' names left out (the
// gRPC service names a limit by its descriptor, "user", where a rule's one
// unnamed limit is named after the rule, "r": TestFieldsAgree pins that).
func fieldsOf(get func(string) string) string {
	var b strings.Builder
	for _, n := range fieldNames {
		b.WriteString(n + ": " + sfName.ReplaceAllString(get(n), `"*"`) + "\n")
	}
	return b.String()
}

// TestFieldsAgree: the proxy, the decision API and the gRPC service answer
// the same decisions with the same rate-limit fields (one code writes
// them, internal/request/pipeline): case 1 of the table, a limit of 2 an hour,
// admitted twice and denied.
func TestFieldsAgree(t *testing.T) {
	c := frontends.Cases[0]
	require.Equal(t, 1, c.ID)
	answers := map[frontends.Front][]string{}
	policies := map[frontends.Front]string{} // RateLimit-Policy, names and all

	svc := newService(t, c)
	srv := httptest.NewServer(svc.ProxyHandler())
	t.Cleanup(srv.Close)
	api := httptest.NewServer(newService(t, c).APIHandler())
	t.Cleanup(api.Close)
	d, err := rls.ParseDomain("d.yaml", []byte("domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"))
	require.NoError(t, err)
	grpc, err := rls.New(newService(t, c), &rls.Config{Path: "d.yaml", Domains: map[string]*rls.Domain{"d": d}}, rls.Options{Trusted: true})
	require.NoError(t, err)

	for _, s := range c.Steps[:3] {
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		req.Header.Set("X-User", s.Key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		answers[frontends.Proxy] = append(answers[frontends.Proxy], resp.Status+"\n"+fieldsOf(resp.Header.Get))
		policies[frontends.Proxy] = resp.Header.Get("RateLimit-Policy")

		resp, err = http.Post(api.URL+service.APIPrefix+"check", "application/json", strings.NewReader(`{"rule":"r","key":"`+s.Key+`"}`))
		require.NoError(t, err)
		resp.Body.Close()
		answers[frontends.API] = append(answers[frontends.API], resp.Status+"\n"+fieldsOf(resp.Header.Get))
		policies[frontends.API] = resp.Header.Get("RateLimit-Policy")

		r, err := grpc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: s.Key}}}}})
		require.NoError(t, err)
		h := http.Header{}
		for _, kv := range r.ResponseHeadersToAdd {
			h.Add(kv.Key, kv.Value)
		}
		status := "200 OK"
		if r.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			status = "429 Too Many Requests"
		}
		answers[frontends.GRPC] = append(answers[frontends.GRPC], status+"\n"+fieldsOf(h.Get))
	}
	require.Equal(t, answers[frontends.Proxy], answers[frontends.API], "proxy and decision API")
	// A rule's one unnamed limit is named after the rule, not "default":
	// a client of two rules sees two policies by name.
	for _, f := range []frontends.Front{frontends.Proxy, frontends.API} {
		require.Equal(t, `"r";q=2;w=3600`, policies[f], f)
	}
	require.Equal(t, answers[frontends.Proxy], answers[frontends.GRPC], "proxy and gRPC service")
	// t0 is 800 s into an hour: the window ends in 2800 s.
	require.Equal(t, "429 Too Many Requests\nRatelimit-Policy: \"*\";q=2;w=3600\nRatelimit: \"*\";r=0;t=2800\n"+
		"X-Ratelimit-Limit: 2\nX-Ratelimit-Remaining: 0\nX-Ratelimit-Reset: 2800\nRetry-After: 2800\n", answers[frontends.Proxy][2])
}
