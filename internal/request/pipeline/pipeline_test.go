package pipeline

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// TestCanonicalHost: the forms a host rule matches, and (issue 19, 5) the
// malformed hosts that slipped past host rules and reached the upstream as
// X-Forwarded-Host.
func TestCanonicalHost(t *testing.T) {
	for in, want := range map[string]string{
		"api.example.com":          "api.example.com",
		"API.Example.COM":          "api.example.com",
		"api.example.com:8443":     "api.example.com",
		"api.example.com.":         "api.example.com",
		"Api.Example.Com.:443":     "api.example.com",
		"[2001:DB8::1]:8080":       "2001:db8::1",
		"[2001:DB8:0::0001]:80":    "2001:db8::1",
		"[::FFFF:C000:0201]":       "::ffff:192.0.2.1",
		"[::1]":                    "::1",
		"192.0.2.1:80":             "192.0.2.1",
		"":                         "",
		"localhost":                "localhost",
		"my_host:1":                "my_host",
		"xn--bcher-kva.example:80": "xn--bcher-kva.example",
	} {
		got, err := CanonicalHost(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{
		"api.example.com:80:80", "api.example.com,evil", "api.example.com%00", "api.example.com\x00",
		"api.example.com ", "a b", "api.example.com:", "api.example.com:65536", "api.example.com:123456",
		"api.example.com:-1", "api.example.com..", ".api.example.com", "2001:db8::1", "[fe80::1%eth0]:80",
		"[fe80::1%25eth0]", "[2001:db8::1", "[2001:db8::1]x", "[192.0.2.1]", "user@api.example.com",
		"api.example.com/x", "api.example.com\\", "*.example.com", "ex\xc3\xa4mple.com",
		strings.Repeat("a", 64) + ".com", strings.Repeat("a.", 127) + "ab",
	} {
		_, err := CanonicalHost(in)
		var he *HostError
		require.True(t, errors.As(err, &he), "%q: %v", in, err)
	}
	require.Equal(t, "*.example.org", RuleHost("*.Example.ORG."))
	require.Equal(t, "2001:db8::1", RuleHost("2001:DB8::0001"))
}

// TestMatchMethod (issue 19, 4): HEAD is limited as GET, and a method's
// case is no way around its rule.
func TestMatchMethod(t *testing.T) {
	for _, c := range []struct {
		methods []string
		m       string
		want    bool
	}{
		{nil, "ANY", true},
		{[]string{"GET"}, "GET", true},
		{[]string{"GET"}, "HEAD", true},
		{[]string{"GET"}, "head", true},
		{[]string{"GET"}, "get", true},
		{[]string{"GET"}, "Get", true},
		{[]string{"GET"}, "POST", false},
		{[]string{"POST"}, "post", true},
		{[]string{"POST"}, "HEAD", false},
		{[]string{"HEAD"}, "GET", false},
		{[]string{"HEAD"}, "HEAD", true},
	} {
		require.Equal(t, c.want, MatchMethod(c.methods, c.m), "%v %s", c.methods, c.m)
	}
	// Every method a listed one Limits matches it, in any case; it
	// matches no other rule's list.
	for listed := range alsoLimits {
		for _, m := range Limits(listed) {
			require.True(t, MatchMethod([]string{listed}, m), "%s limits %s", listed, m)
			require.True(t, MatchMethod([]string{listed}, strings.ToLower(m)), "%s limits %s", listed, m)
			require.False(t, MatchMethod([]string{"PATCH"}, m), "PATCH does not limit %s", m)
		}
	}
	require.Equal(t, []string{"POST"}, Limits("POST"))
}

// TestParseCost (issue 19, 1): every spelling of zero is refused, as is
// anything but one run of digits in [min, MaxCost].
func TestParseCost(t *testing.T) {
	for _, v := range []string{"0", "00", "-0", "+0", " 0 ", " 0", "0 ", "-1", "+1", " 1", "1 ", "1.0", "1e0", "0x1",
		"", "lots", "99999999999999999999", "9223372036854775807", "1_000"} {
		_, err := ParseCost([]string{v}, 1, 1)
		var ce *CostError
		require.True(t, errors.As(err, &ce), "%q: %v", v, err)
	}
	_, err := ParseCost([]string{"1", "2"}, 1, 1)
	require.Error(t, err, "given twice")
	n, err := ParseCost(nil, 3, 1)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	n, err = ParseCost([]string{"007"}, 1, 1)
	require.NoError(t, err)
	require.EqualValues(t, 7, n)
	_, err = ParseCost([]string{"2"}, 5, 5)
	require.Error(t, err, "below min_cost")
	_, err = ParseCost([]string{"1099511627777"}, 1, 1)
	require.Error(t, err, "above MaxCost")
}

// TestParseResponseCost: an upstream's actual cost is one run of digits,
// however large (saturated at the largest int64: a cost, never refused for
// its size, SettleDelta clamps it); none leaves the estimate, anything
// else settles nothing.
func TestParseResponseCost(t *testing.T) {
	for _, c := range []struct {
		values []string
		want   int64
		ok     bool
	}{
		{nil, 0, false},
		{[]string{"7"}, 7, true},
		{[]string{"0"}, 0, true}, // 0 is a cost: SettleDelta raises it to min_cost
		{[]string{"00"}, 0, true},
		{[]string{"1099511627776"}, core.MaxCost, true},
		{[]string{"1099511627777"}, core.MaxCost + 1, true},
		{[]string{"9223372036854775807"}, math.MaxInt64, true},
		{[]string{"9223372036854775808"}, math.MaxInt64, true},
		{[]string{"99999999999999999999999999999"}, math.MaxInt64, true},
	} {
		n, ok, err := ParseResponseCost(c.values)
		require.NoError(t, err, "%q", c.values)
		require.Equal(t, c.ok, ok, "%q", c.values)
		require.Equal(t, c.want, n, "%q", c.values)
	}
	for _, vs := range [][]string{{"-1"}, {"+1"}, {" 1"}, {"1.5"}, {"1e3"}, {""}, {"lots"},
		{"99999999999999999999x"}, {"1", "1"}} {
		n, ok, err := ParseResponseCost(vs)
		var ce *ResponseCostError
		require.True(t, errors.As(err, &ce), "%q: %v", vs, err)
		require.False(t, ok)
		require.Zero(t, n)
	}
}

// TestSettleDelta: the one rule every front end settles by. The actual
// cost is floored at min_cost (a request is never free: a refund is at
// most estimate − min_cost) and clamped at MaxCost (a larger cost is
// charged as MaxCost: refused, it would leave the estimate and be the
// cheapest of all).
func TestSettleDelta(t *testing.T) {
	for _, c := range []struct {
		estimate, actual, min, want int64
	}{
		{1, 5, 1, 4},
		{5, 2, 1, -3},
		{3, 0, 1, -2}, // refunded down to min_cost only
		{1, 0, 1, 0},  // check 1, settle "0": still 1
		{5, 0, 2, -3}, // min_cost 2
		{1, 0, 0, -1}, // httplimit's default Min 0: 0 is a cost
		{2, core.MaxCost, 1, core.MaxCost - 2},
		{2, core.MaxCost + 1, 1, core.MaxCost - 2}, // clamped, not refused
		{2, math.MaxInt64, 1, core.MaxCost - 2},    // a saturated response cost
		{core.MaxCost, 0, 1, 1 - core.MaxCost},     // within a settle's range
		{1, core.MaxCost + 7, 1, core.MaxCost - 1}, // within a settle's range
		{core.MaxCost, core.MaxCost, core.MaxCost, 0},
	} {
		got := SettleDelta(c.estimate, c.actual, c.min)
		require.Equal(t, c.want, got, "estimate %d actual %d min %d", c.estimate, c.actual, c.min)
		require.True(t, got >= -core.MaxCost && got <= core.MaxCost)
		require.GreaterOrEqual(t, got, c.min-c.estimate, "a refund beyond estimate - min_cost")
	}
}

// TestSettleResults: one list of settle results, the label values of every
// front end's settle counters.
func TestSettleResults(t *testing.T) {
	var names []string
	for i, r := range SettleResults() {
		require.Equal(t, SettleResult(i), r)
		names = append(names, r.String())
	}
	require.Equal(t, []string{"settled", "invalid", "failed"}, names)
}

// TestCheckCost: the one range of a cost, whatever carried it (a header, a
// descriptor's hits_addend).
func TestCheckCost(t *testing.T) {
	require.NoError(t, CheckCost(0, 0))
	require.NoError(t, CheckCost(core.MaxCost, 1))
	for _, c := range [][2]int64{{0, 1}, {-1, 0}, {core.MaxCost + 1, 0}, {math.MaxInt64, 1}, {4, 5}} {
		var ce *CostError
		require.True(t, errors.As(CheckCost(c[0], c[1]), &ce), "%d (min %d)", c[0], c[1])
	}
}

func headers(kv ...string) Headers {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func keyBy(t *testing.T, s string) ruleconfig.KeyBy {
	t.Helper()
	kb, err := ruleconfig.ParseKeyBy(s, true)
	require.NoError(t, err)
	return kb
}

// TestKey: each key source reads exactly one place (issue 19, 3): a decoy
// in another place, a second value or a Connection-listed field is never a
// fresh key.
func TestKey(t *testing.T) {
	r := &Request{
		Query:  "k=v%201&e=%zz&two=1&two=2",
		Header: headers("X-User", "u 1", "Authorization", "Bearer  tok", "X-Api-Key", "other"),
		Peer:   "[2001:db8:1:2:3::4%eth0]:5555",
	}
	for _, c := range []struct{ keyBy, want string }{
		{"global", "global"},
		{"path", "/p/a"},
		{"ip", "2001:db8:1:2::/64"},
		{"header:X-User", "u 1"},
		{"query:k", "v 1"},
		{"api_key", APIKeyDigest("tok")},
		{"api_key:x-api-key", APIKeyDigest("other")},
	} {
		got, err := Key(keyBy(t, c.keyBy), IPKey{}, r, "/p/a")
		require.NoError(t, err, c.keyBy)
		require.Equal(t, c.want, got, c.keyBy)
	}
	for _, kb := range []string{"header:x-none", "query:e", "query:none", "query:two"} {
		_, err := Key(keyBy(t, kb), IPKey{}, r, "/p/a")
		var ke *KeyError
		require.True(t, errors.As(err, &ke), "%s: %v", kb, err)
	}
	// The decoy of issue 19: the real key in X-API-Key, a fresh bearer
	// each time. api_key reads Authorization only, so the bearer is the
	// key, and api_key:x-api-key reads X-API-Key only, so it is.
	real := &Request{Header: headers("X-Api-Key", "real")}
	_, err := Key(keyBy(t, "api_key"), IPKey{}, real, "/")
	require.Error(t, err, "api_key must not fall back to X-API-Key")
	k1, _ := Key(keyBy(t, "api_key:x-api-key"), IPKey{}, &Request{Header: headers("X-Api-Key", "real", "Authorization", "Bearer a")}, "/")
	k2, _ := Key(keyBy(t, "api_key:x-api-key"), IPKey{}, &Request{Header: headers("X-Api-Key", "real", "Authorization", "Bearer b")}, "/")
	require.Equal(t, k1, k2, "a fresh bearer re-keyed the request")
	// Two values, or a field the client has a proxy drop.
	for _, h := range []Headers{
		headers("Authorization", "Bearer a", "Authorization", "Bearer b"),
		headers("Authorization", "Bearer a", "Connection", "keep-alive, Authorization"),
		headers("Authorization", "Basic abc"),
		headers("Authorization", "Bearer "),
	} {
		_, err := Key(keyBy(t, "api_key"), IPKey{}, &Request{Header: h}, "/")
		require.Error(t, err)
	}
}

func TestIPKey(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:1234": "192.0.2.7", "[::ffff:192.0.2.7]:1": "192.0.2.7", "[2001:db8::1]:80": "2001:db8::/64",
		"[fe80::1%eth0]:80": "fe80::/64", "192.0.2.8": "192.0.2.8",
	} {
		got, ok := IPKey{}.Key(addr, nil)
		require.True(t, ok, addr)
		require.Equal(t, want, got, addr)
	}
	_, ok := IPKey{}.Key("", nil)
	require.False(t, ok)
}

func TestMatcher(t *testing.T) {
	m, err := NewMatcher("/v1/pay", "*.Example.com", []string{"GET"})
	require.NoError(t, err)
	for _, c := range []struct {
		method, host, path string
		want               bool
	}{
		{"GET", "a.example.com", "/v1/pay", true},
		{"HEAD", "a.example.com", "/v1/pay/x", true},
		{"get", "a.example.com", "/V1/PAY", true},
		{"GET", "example.com", "/v1/pay", false},
		{"GET", "a.example.com", "/v1/payments", false},
		{"POST", "a.example.com", "/v1/pay", false},
	} {
		tg, _, err := Prepare(&Request{Method: c.method, Host: c.host, Path: c.path})
		require.NoError(t, err)
		require.Equal(t, c.want, m.Matches(&tg), "%+v", c)
	}
}

// Explain agrees with Matches and says which part decided.
func TestMatcherExplain(t *testing.T) {
	m, err := NewMatcher("/v1/pay", "*.Example.com", []string{"GET"})
	require.NoError(t, err)
	for _, c := range []struct {
		method, host, path string
		last               string
	}{
		{"GET", "a.example.com", "/v1/pay", `method "GET" is one of GET`},
		{"HEAD", "a.example.com", "/v1/pay/x", `method HEAD is limited as GET, one of GET`},
		{"get", "a.example.com", "/V1/PAY", `method "GET" is one of GET`},
		{"GET", "example.com", "/v1/pay", `host "example.com" is not a subdomain of "example.com"`},
		{"GET", "a.example.com", "/v1/payments", `path "/v1/payments" is not endpoint "/v1/pay" nor below it`},
		{"POST", "a.example.com", "/v1/pay", `method "POST" is not one of GET`},
	} {
		tg, _, err := Prepare(&Request{Method: c.method, Host: c.host, Path: c.path})
		require.NoError(t, err)
		ok, why := m.Explain(&tg)
		require.Equal(t, m.Matches(&tg), ok, "%+v", c)
		require.Equal(t, c.last, why[len(why)-1], "%+v", c)
	}
	any, err := NewMatcher("/", "", nil)
	require.NoError(t, err)
	ok, why := any.Explain(&Target{Method: "PUT", Host: "x", Path: "/a"})
	require.True(t, ok)
	require.Equal(t, []string{`path "/a" is below endpoint "/"`, "the rule matches every host", "the rule matches every method"}, why)
}
