package pipeline

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// TestKeyFieldInTwoSpellings: a key source reads exactly one field,
// refusing a second value (a decoy), and "X_API_Key" is that field too:
// every CGI-style upstream (PHP, WSGI, Rack) reads X-API-Key and X_API_Key
// as HTTP_X_API_KEY, Envoy's headers_with_underscores_action allows it by
// default and the proxy forwards it. A client that sent a fresh X-API-Key
// each time beside its real key in X_API_Key got a fresh quota each time
// while the upstream might authenticate the real one: the decoy of issue
// 19, spelled with '_'. Both spellings present is 400; one alone, in any
// spelling, is the key.
func TestKeyFieldInTwoSpellings(t *testing.T) {
	kb := keyBy(t, "api_key:X-API-Key")
	seen := map[string]bool{}
	for i := range 3 {
		r := &Request{Header: headers("X-API-Key", fmt.Sprintf("decoy%d", i), "X_API_Key", "real")}
		k, err := Key(kb, IPKey{}, r, "/")
		if err == nil {
			seen[k] = true
		}
		require.ErrorContains(t, err, "two spellings")
	}
	require.Empty(t, seen, "a fresh key for one client whose X_API_Key (HTTP_X_API_KEY to a CGI upstream) stayed the same")

	for _, two := range [][]string{
		{"x-api-key", "a", "X-API_Key", "b"},
		{"X_API_KEY", "a", "x_api-key", "b"},
		{"X-Api-Key", "a", "X_API_Key", ""},
	} {
		_, err := Key(kb, IPKey{}, &Request{Header: headers(two...)}, "/")
		require.ErrorContains(t, err, "two spellings", "%q", two)
	}
	for _, one := range []string{"X-API-Key", "X_API_Key", "x-api_key"} {
		k, err := Key(kb, IPKey{}, &Request{Header: headers(one, "real")}, "/")
		require.NoError(t, err, one)
		require.Equal(t, APIKeyDigest("real"), k, one)
	}
	// A header key source (not an API key) is read the same way, and a
	// Connection field listing any spelling is a decoy too.
	_, err := Key(keyBy(t, "header:X-User"), IPKey{}, &Request{Header: headers("X-User", "a", "X_User", "b")}, "/")
	require.ErrorContains(t, err, "two spellings")
	_, err = Key(kb, IPKey{}, &Request{Header: headers("X-API-Key", "real", "Connection", "x_api_key")}, "/")
	require.ErrorContains(t, err, "Connection")
}

func TestFieldSpellings(t *testing.T) {
	require.Equal(t, []string{"X-API-Key", "X_API-Key", "X-API_Key", "X_API_Key"}, FieldSpellings("X-API-Key"))
	require.Equal(t, []string{"authorization"}, FieldSpellings("authorization"))
	require.Len(t, FieldSpellings(strings.Repeat("a-", ruleconfig.MaxFieldSeparators)+"a"), 1<<ruleconfig.MaxFieldSeparators)
	require.Nil(t, FieldSpellings(strings.Repeat("a-", ruleconfig.MaxFieldSeparators+1)+"a"))
	for _, s := range FieldSpellings("a-b_c") {
		require.True(t, SameField(s, "A-B-C"), s)
	}
	require.False(t, SameField("X-API-Key", "X-API-Kez"))
	require.False(t, SameField("X-API-Key", "X-APIKey"))
	_, err := ruleconfig.ParseKeyBy("header:"+strings.Repeat("a-", ruleconfig.MaxFieldSeparators+1)+"a", false)
	require.ErrorContains(t, err, "more than")
	_, err = ruleconfig.ParseKeyBy("query:"+strings.Repeat("a-", ruleconfig.MaxFieldSeparators+1)+"a", false)
	require.NoError(t, err, "a query parameter is read as written")
}

// TestIsPathOverride: the fields front ends drop before forwarding, in
// every spelling an upstream may read them in.
func TestIsPathOverride(t *testing.T) {
	for _, f := range PathOverrideFields() {
		for _, s := range FieldSpellings(f) {
			require.True(t, IsPathOverride(s), s)
			require.True(t, IsPathOverride(strings.ToLower(s)), s)
		}
	}
	for _, f := range []string{"X-Original-Host", "X-Forwarded-For", "X-Original-URLs", ""} {
		require.False(t, IsPathOverride(f), f)
	}
}

// TestDropsField: a front end forwards a request without path-override
// fields and without the matched rule's response_cost_header, in every
// spelling an upstream may read it in (case, '-' and '_'): a client's own
// X-Cost-Actual would reach an upstream that echoes request fields, or
// reads X_Cost_Actual as HTTP_X_COST_ACTUAL, and report the client's cost.
func TestDropsField(t *testing.T) {
	for _, s := range FieldSpellings("X-Cost-Actual") {
		require.True(t, DropsField(s, "X-Cost-Actual"), s)
		require.True(t, DropsField(strings.ToLower(s), "x-cost-actual"), s)
		require.True(t, DropsField(strings.ToUpper(s), "X_Cost-actual"), s)
		require.False(t, DropsField(s, ""), "no rule, or none with response_cost_header: %s", s)
	}
	for _, f := range PathOverrideFields() {
		require.True(t, DropsField(f, ""), f)
		require.True(t, DropsField(f, "X-Cost-Actual"), f)
	}
	for _, f := range []string{"X-Cost", "X-Cost-Actuals", "X-User", ""} {
		require.False(t, DropsField(f, "X-Cost-Actual"), f)
	}
}
