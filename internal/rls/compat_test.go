package rls

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Fields of envoyproxy/ratelimit's format beyond its README's examples
// (those are in readme_test.go), decided as its code decides them.

// share_threshold: every value matching the wildcard spends one count, at
// the wildcard's level also when the limit is deeper; the other entries'
// values still count apart.
func TestShareThreshold(t *testing.T) {
	e := newEnv(t, `
domain: d
descriptors:
  - key: route
    value: "api/*"
    share_threshold: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: route
    value: "web/*/x"
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 1}
`, envOpts{})
	require.Equal(t, 1, e.admitted(t, 1, "d", d("route", "api/v1", "method", "GET")))
	require.Equal(t, 2, e.admitted(t, 3, "d", d("route", "api/v2", "method", "GET")), "api/v1 and api/v2 share 3")
	require.Equal(t, 3, e.admitted(t, 4, "d", d("route", "api/v1", "method", "POST")), "another method counts apart")
	// Two descriptors of one request sharing a count are one decision of
	// both costs.
	require.Zero(t, e.admitted(t, 1, "d", d("route", "api/a", "method", "PUT"), d("route", "api/b", "method", "PUT"),
		d("route", "api/c", "method", "PUT"), d("route", "api/d", "method", "PUT")))
	require.Equal(t, 3, e.admitted(t, 4, "d", d("route", "api/a", "method", "PUT")), "the denied request charged nothing")
	// The wildcard's own text is a value like any other: it shares too.
	require.Zero(t, e.admitted(t, 1, "d", d("route", "api/*", "method", "GET")))
	// Without share_threshold each matching value counts alone.
	require.Equal(t, 1, e.admitted(t, 2, "d", d("route", "web/1/x", "method", "GET")))
	require.Equal(t, 1, e.admitted(t, 2, "d", d("route", "web/2/x", "method", "GET")))
}

// An unlimited limit replaces the limits it names, as in
// envoyproxy/ratelimit, exempting the request from them, and is never
// replaced itself.
func TestUnlimitedReplaces(t *testing.T) {
	e := newEnv(t, `
domain: d
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}
  - key: vip
    rate_limit: {unlimited: true, replaces: [{name: per_user}], requests_per_unit: 5}
  - key: plan
    value: free
    rate_limit: {name: plan, unlimited: true}
  - key: plan
    value: paid
    rate_limit: {unit: minute, requests_per_unit: 1, replaces: [{name: plan}]}
`, envOpts{})
	require.Equal(t, 5, e.admitted(t, 5, "d", d("user", "u"), d("vip", "yes")))
	require.Equal(t, 1, e.admitted(t, 2, "d", d("user", "u")), "the exempted requests charged nothing")
	r := e.call(t, "d", d("plan", "free"), d("plan", "paid"))
	require.Equal(t, OK, r.OverallCode)
	require.Equal(t, uint32(4294967295), r.Statuses[0].LimitRemaining, "unlimited, not replaced")
}
