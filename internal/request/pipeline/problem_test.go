package pipeline

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAcceptsJSON(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                                   false,
		"*/*":                                false, // curl's default
		"application/json":                   true,
		"application/problem+json":           true,
		"Application/JSON; charset=utf-8":    true,
		"application/*":                      true,
		"text/plain":                         false,
		"text/*, application/json;q=0.5":     false,
		"text/plain;q=0.5, application/json": true,
		"application/json;q=0":               false,
		"application/json;q=0, */*":          false,
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8": false, // a browser
		"application/json, text/plain, */*":                               true,  // axios
		"application/json;q=0.8, application/problem+json":                true,
		"application/json;q=bogus":                                        true,
		"image/png, application/json":                                     true,
	} {
		require.Equal(t, want, AcceptsJSON([]string{accept}), "%q", accept)
	}
	require.True(t, AcceptsJSON([]string{"text/html", "application/json"}), "several fields")
	require.True(t, ProblemJSON.Wants(nil))
	require.False(t, ProblemText.Wants([]string{"application/json"}))
	require.True(t, ProblemAuto.Wants([]string{"application/json"}))
	for i, n := range ProblemModes() {
		m, ok := ParseProblemMode(n)
		require.True(t, ok)
		require.Equal(t, ProblemMode(i), m)
		require.Equal(t, n, m.String())
	}
	_, ok := ParseProblemMode("xml")
	require.False(t, ok)
}

// The bodies, member by member: the draft's types and titles, the status,
// the denying limits in violated-policies (the deciding one first), none
// for a 503.
func TestProblems(t *testing.T) {
	v := Verdict{Deciding: 2, Limits: []LimitState{{Name: "a", Allowed: true}, {Name: "b"}, {Name: "c"}}}
	p := QuotaExceeded(&v)
	require.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
		"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,
		"detail":"Rate limit exceeded: retry after the Retry-After field's seconds","violated-policies":["c","b"]}`, string(p.JSON()))
	v.Limits[2].Never = true
	p = QuotaExceeded(&v)
	require.Contains(t, p.Detail, "the request's cost exceeds the limit")
	p = ReducedCapacity("Rate limiter overloaded; retry later\n")
	require.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
		"title":"Request cannot be satisfied due to temporary server capacity constraints","status":503,
		"detail":"Rate limiter overloaded; retry later"}`, string(p.JSON()))
	var m map[string]any
	require.NoError(t, json.Unmarshal(p.JSON(), &m))
	require.NotContains(t, m, "violated-policies")
}
