// Package frontends is the front-end conformance table: requests with the
// decision every front end must reach for them, run against the service's
// proxy and decision API and the Envoy rate limit service (this package's
// tests) and the proxy-wasm filter through its test host
// (proxywasm/internal/pwhost), deciding on its shared data and in global
// mode, by a callout to a real rl-wasm-host whose rule is the case's. It is what keeps the front ends from
// drifting apart, as tests/vectors does for the decision function: a
// request rule lives once, in internal/request/pipeline, and this table holds
// every front end to it.
//
// A case is one rule and a list of steps taken in order on one fresh
// state. Case IDs are permanent: a case is never renumbered or reused.
// A front end that cannot express a step (a method or host on the decision
// API, a text cost on gRPC, whose hits_addend is an integer) skips it; a
// skipped step must not change the state (it is refused everywhere else).
// A case with a response cost (Step.ResponseCost) is not run over gRPC,
// whose protocol has no settle.
package frontends

import (
	"fmt"
	"slices"
	"strings"
)

// Front names a front end.
type Front string

// The front ends.
const (
	Proxy  Front = "proxy"  // rl-wasm-host's reverse proxy
	API    Front = "api"    // the decision API, POST /v1/ratelimit/check
	GRPC   Front = "grpc"   // the Envoy RateLimitService
	Filter Front = "filter" // rl-filter.wasm, deciding on its shared data
	// FilterGlobal is rl-filter.wasm in global mode: its rule names
	// rl-wasm-host's rule (global.rule), which holds the case's rule,
	// overrides included, and decides the key the filter sends.
	FilterGlobal Front = "filter-global"
)

// Fronts lists every front end.
func Fronts() []Front { return []Front{Proxy, API, GRPC, Filter, FilterGlobal} }

// Want is the decision a step must reach.
type Want uint8

// Decisions.
const (
	// Admit: decided and admitted (200, OK).
	Admit Want = iota + 1
	// Deny: decided and denied (429, OVER_LIMIT).
	Deny
	// Refuse: the request is refused as malformed (400,
	// INVALID_ARGUMENT), nothing decided.
	Refuse
	// Block: not admitted, denied or refused (each front end its way,
	// never forwarded). Over gRPC only OVER_LIMIT blocks: Envoy's rate
	// limit filter lets a request through when the call fails
	// (failure_mode_deny: false, its default), INVALID_ARGUMENT included.
	Block
)

func (w Want) String() string {
	return [...]string{"?", "admit", "deny", "refuse", "block"}[w]
}

// Rule is the case's one rule: "r", a fixed window of Limit per hour, keyed
// by the header X-User (the decision API's "key", the descriptor entry
// "user" over gRPC), its cost read from X-Cost (the API's "cost", the
// descriptor's hits_addend), and the actual cost of an admitted request
// from the upstream's X-Cost-Actual (response_cost_header; the decision
// API's settle).
type Rule struct {
	Endpoint string   // default "/"
	Host     string   // default none
	Methods  []string // default none
	Limit    int64
	// KeyBy is the rule's key_by, default "header:X-User"; "ip" keys by
	// the steps' Peer.
	KeyBy string
	// Shadow, if not 0, adds the shadow limit "candidate", a fixed window
	// of Shadow per hour, beside the enforced one (the service's and the
	// filter's shadow: true, the gRPC service's shadow_limits); with
	// Limit 0 it is the rule's only limit (over gRPC, the descriptor's
	// limit in shadow_mode). It never denies, is in no rate-limit field,
	// and every front end counts its would-denies (Case.WouldDeny).
	Shadow int64

	// Overrides replace Limit for some keys: the rule's "overrides" in
	// the service and the filter; over gRPC, descriptors of the key
	// "user" with the override's key as their value, or its prefix and
	// "*" (envoyproxy/ratelimit's wildcard), listed longest first.
	Overrides []Override
}

// Override is one of a rule's overrides: a fixed window of Limit per hour
// for one key (Key) or every key starting with KeyPrefix.
type Override struct {
	Key, KeyPrefix string
	Limit          int64
}

// OverridesJSON is the rule's "overrides" field in the configuration of
// the service and the filter (nil for none), in the case's order.
func (r Rule) OverridesJSON() []any {
	var out []any
	for _, o := range r.Overrides {
		m := map[string]any{"strategy": "fixed", "limit": o.Limit, "window": "1h"}
		if o.Key != "" {
			m["key"] = o.Key
		} else {
			m["key_prefix"] = o.KeyPrefix
		}
		out = append(out, m)
	}
	return out
}

// Descriptors is the rule as envoyproxy/ratelimit's descriptors of one
// domain (YAML, the list under "descriptors:"): the key "user" alone with
// the rule's limit, and one descriptor of that key per override, its key
// as the value or its prefix followed by the wildcard "*". Wildcards are
// listed longest first: at one level the first that matches decides (and
// rl refuses one that an earlier one would always hide).
func (r Rule) Descriptors() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - key: user\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", r.Limit)
	os := slices.Clone(r.Overrides)
	slices.SortStableFunc(os, func(a, b Override) int { return len(b.KeyPrefix) - len(a.KeyPrefix) })
	for _, o := range os {
		v := o.Key
		if v == "" {
			v = o.KeyPrefix + "*"
		}
		fmt.Fprintf(&b, "  - key: user\n    value: %q\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", v, o.Limit)
	}
	return b.String()
}

// Step is one request and the decision it must reach.
type Step struct {
	Method string // default GET
	Host   string // default "api.example.com"
	Path   string // default "/"
	// Key is the key source's value ("" sends none).
	Key string
	// Peer is the client's address, for key_by: ip: the proxy's
	// X-Forwarded-For from a trusted proxy, the filter's source.address,
	// and over the decision API the key pipeline.IPKey makes of it.
	Peer string
	// Cost is the cost as sent ("" sends none).
	Cost string
	// Header are more request header fields (proxy and filter).
	Header [][2]string
	Want   Want
	// Only, if set, are the front ends that can express the step.
	Only []Front
	// Forwarded, if set, is the path and query an admitted step reaches
	// the upstream with (proxy and filter).
	Forwarded string
	// Dropped are header fields an admitted step must not reach the
	// upstream with, in any case and any spelling of '-' and '_' (proxy
	// and filter).
	Dropped []string
	// ResponseCost, if set, is the actual cost the upstream reports for
	// an admitted step, as written, in X-Cost-Actual: a header, or a
	// trailer after the body when Trailer is set. The proxy and the
	// filter settle it against the step's cost once the response is done,
	// never letting the client see the field; over the decision API the
	// runner settles the step's cost as the estimate and the value as the
	// actual cost when it is one ParseResponseCost accepts (nothing
	// otherwise). Every front end settles them by pipeline.SettleDelta
	// (actual at least min_cost 1, at most MaxCost). The next step sees
	// the settle.
	ResponseCost string
	Trailer      bool
}

// On reports whether the case runs on front end f: all of them, except
// the gRPC service for a case with a response cost (its protocol has no
// settle) or keyed by ip (descriptor values are text there, as in
// envoyproxy/ratelimit: Envoy's masked_remote_address action sends the
// network to match exactly instead).
func (c *Case) On(f Front) bool {
	return f != GRPC || !c.Settles() && c.Rule.KeyBy != "ip"
}

// Settles reports whether the case has a step with a response cost.
func (c *Case) Settles() bool {
	return slices.ContainsFunc(c.Steps, func(s Step) bool { return s.ResponseCost != "" })
}

// CheckForwarded says what is wrong with the request an admitted step
// reached the upstream with (target: its path and query; names: its
// header field names), "" if nothing.
func (s Step) CheckForwarded(target string, names []string) string {
	if s.Forwarded != "" && target != s.Forwarded {
		return "forwarded " + target + ", want " + s.Forwarded
	}
	fold := func(n string) string { return strings.ToLower(strings.ReplaceAll(n, "_", "-")) }
	for _, d := range s.Dropped {
		for _, n := range names {
			if fold(n) == fold(d) {
				return "forwarded " + n + " (" + d + " must be dropped)"
			}
		}
	}
	return ""
}

// Case is a rule and its steps.
type Case struct {
	ID   int
	Name string
	Rule Rule
	// Steps run in order on one state.
	Steps []Step
	// WouldDeny is how many admitted requests the rule's shadow limit
	// would have denied: what each front end counts after the steps.
	WouldDeny int
}

// http is the front ends that read HTTP requests.
var http = []Front{Proxy, Filter, FilterGlobal}

// notGRPC is the front ends whose cost is text.
var notGRPC = []Front{Proxy, API, Filter, FilterGlobal}

// byRuleName is the front ends that hand a key to rl-wasm-host's stores
// under the rule's name, which hold keys of at most 256 bytes with
// "<rule>:" counted, printable ASCII without spaces (pipeline.
// StoredKeyProblem); notByRuleName keep a digest of any other key (the
// filter's shared data, the gRPC service's descriptor keys).
var (
	byRuleName    = []Front{Proxy, API, FilterGlobal}
	notByRuleName = []Front{Filter, GRPC}
)

// peers returns n admitted steps of the client at peer.
func peers(peer string, n int) []Step {
	var s []Step
	for range n {
		s = append(s, Step{Peer: peer, Want: Admit})
	}
	return s
}

// exhaust returns n admitted steps of key.
func exhaust(key string, n int) []Step {
	var s []Step
	for range n {
		s = append(s, Step{Key: key, Want: Admit})
	}
	return s
}

func steps(groups ...[]Step) []Step {
	var out []Step
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// Cases is the table.
var Cases = []Case{
	{ID: 1, Name: "limit then deny", Rule: Rule{Limit: 2},
		Steps: steps(exhaust("alice", 2), []Step{{Key: "alice", Want: Deny}, {Key: "bob", Want: Admit}})},
	{ID: 2, Name: "cost 0 in any spelling on an exhausted key is never admitted (issue 19, 1 and 2)", Rule: Rule{Limit: 1},
		Steps: steps(exhaust("a", 1), []Step{
			{Key: "a", Cost: "0", Want: Block},
			{Key: "a", Cost: "00", Want: Block, Only: notGRPC},
			{Key: "a", Cost: "-0", Want: Block, Only: notGRPC},
			{Key: "a", Cost: "+0", Want: Block, Only: notGRPC},
			{Key: "a", Cost: " 0 ", Want: Block, Only: notGRPC},
		})},
	{ID: 3, Name: "a cost of 0 is refused on a fresh key too, except over gRPC where it is a check", Rule: Rule{Limit: 5},
		Steps: []Step{{Key: "b", Cost: "0", Want: Refuse, Only: notGRPC}, {Key: "b", Cost: "5", Want: Admit}, {Key: "b", Want: Deny}}},
	{ID: 4, Name: "costs that are not one run of digits are refused", Rule: Rule{Limit: 5},
		Steps: []Step{
			{Key: "c", Cost: "1.0", Want: Refuse, Only: notGRPC},
			{Key: "c", Cost: "1e0", Want: Refuse, Only: notGRPC},
			{Key: "c", Cost: "lots", Want: Refuse, Only: notGRPC},
			{Key: "c", Cost: "2", Want: Admit},
		}},
	{ID: 5, Name: "methods: [GET] limits HEAD and get (issue 19, 4)", Rule: Rule{Limit: 1, Methods: []string{"GET"}},
		Steps: []Step{
			{Key: "m", Want: Admit, Only: http},
			{Key: "m", Method: "HEAD", Want: Deny, Only: http},
			{Key: "m", Method: "get", Want: Deny, Only: http},
			{Key: "m", Method: "POST", Want: Admit, Only: http}, // no rule: unlimited
		}},
	{ID: 6, Name: "a malformed Host is refused, never forwarded (issue 19, 5)", Rule: Rule{Limit: 1, Host: "api.example.com"},
		Steps: []Step{
			{Key: "h", Want: Admit, Only: http},
			{Key: "h", Host: "API.Example.com.:443", Want: Deny, Only: http},
			{Key: "h", Host: "api.example.com:80:80", Want: Refuse, Only: http},
			{Key: "h", Host: "api.example.com,evil", Want: Refuse, Only: http},
			{Key: "h", Host: "api.example.com%00", Want: Refuse, Only: http},
		}},
	{ID: 7, Name: "a decoy bearer beside the real X-API-Key is no fresh key (issue 19, 3)", Rule: Rule{Limit: 2, KeyBy: "api_key:X-API-Key"},
		Steps: []Step{
			{Header: [][2]string{{"X-API-Key", "real"}, {"Authorization", "Bearer d1"}}, Want: Admit, Only: http},
			{Header: [][2]string{{"X-API-Key", "real"}, {"Authorization", "Bearer d2"}}, Want: Admit, Only: http},
			{Header: [][2]string{{"X-API-Key", "real"}, {"Authorization", "Bearer d3"}}, Want: Deny, Only: http},
			{Header: [][2]string{{"Authorization", "Bearer real"}}, Want: Refuse, Only: http},
		}},
	{ID: 8, Name: "a key field given twice, or listed in Connection, is refused", Rule: Rule{Limit: 5, KeyBy: "api_key"},
		Steps: []Step{
			{Header: [][2]string{{"Authorization", "Bearer a"}, {"Authorization", "Bearer b"}}, Want: Refuse, Only: http},
			{Header: [][2]string{{"Authorization", "Bearer a"}, {"Connection", "Authorization"}}, Want: Refuse, Only: []Front{Filter, FilterGlobal}},
			{Header: [][2]string{{"Authorization", "Bearer a"}}, Want: Admit, Only: http},
		}},
	{ID: 9, Name: "path spellings are one rule", Rule: Rule{Limit: 1, Endpoint: "/v1/pay"},
		Steps: []Step{
			{Key: "p", Path: "/v1/pay", Want: Admit, Only: http},
			{Key: "p", Path: "/V1/PAY", Want: Deny, Only: http},
			{Key: "p", Path: "//v1/./x/../pay", Want: Deny, Only: http},
			{Key: "p", Path: "/v1/%70ay", Want: Deny, Only: http},
			{Key: "p", Path: "/v1/pay;x", Want: Deny, Only: http},
			{Key: "p", Path: "/v1%2Fpay", Want: Refuse, Only: http},
			{Key: "p", Path: "/v1/payments", Want: Admit, Only: http}, // no rule
		}},
	{ID: 10, Name: "a missing key is refused", Rule: Rule{Limit: 1},
		Steps: []Step{{Want: Refuse, Only: notGRPC}}},
	{ID: 11, Name: "a cost above 2^40 is never admitted, and over gRPC is OVER_LIMIT, not an error Envoy would admit", Rule: Rule{Limit: 1},
		Steps: steps(exhaust("big", 1), []Step{
			{Key: "big", Cost: "1099511627777", Want: Block},
			{Key: "big2", Cost: "1099511627777", Want: Block},
			{Key: "big2", Cost: "18446744073709551615", Want: Block},
			{Key: "big2", Want: Admit},
		})},
	{ID: 12, Name: "X_API_Key and X-API-Key are one field (HTTP_X_API_KEY to CGI upstreams): both at once is refused", Rule: Rule{Limit: 1, KeyBy: "api_key:X-API-Key"},
		Steps: []Step{
			{Header: [][2]string{{"X_API_Key", "real"}}, Want: Admit, Only: http},
			{Header: [][2]string{{"X_API_Key", "real"}, {"X-API-Key", "decoy1"}}, Want: Refuse, Only: http},
			{Header: [][2]string{{"X-API_Key", "decoy2"}, {"x_api_key", "real"}}, Want: Refuse, Only: http},
			{Header: [][2]string{{"X-API-Key", "real"}}, Want: Deny, Only: http},
		}},
	{ID: 13, Name: "the upstream gets the path that was matched: canonical, without path-override fields", Rule: Rule{Limit: 1, Endpoint: "/admin"},
		Steps: []Step{
			{Key: "o", Path: "/public", Header: [][2]string{{"X-Original-URL", "/admin"}, {"X-Rewrite-URL", "/admin"}}, Want: Admit, Only: http,
				Forwarded: "/public", Dropped: []string{"X-Original-URL", "X-Rewrite-URL"}},
			{Key: "o", Path: "/public?a=1", Header: [][2]string{{"X_Original_URL", "/admin"}, {"x-rewrite_url", "/admin"}}, Want: Admit, Only: http,
				Forwarded: "/public?a=1", Dropped: []string{"X-Original-URL", "X-Rewrite-URL"}},
			{Key: "o", Path: "/x/../Admin//a;p?q=%2e", Want: Admit, Only: http, Forwarded: "/Admin/a;p?q=%2e"},
			{Key: "o", Path: "/%61dmin", Want: Deny, Only: http},
			{Key: "o", Path: "/pub%6cic/./b", Want: Admit, Only: http, Forwarded: "/public/b"},
		}},
	{ID: 14, Name: "per-key overrides, most specific first: an exact key, then the longest prefix (issue 22, item 4)",
		Rule: Rule{Limit: 1, Overrides: []Override{{KeyPrefix: "t-", Limit: 2}, {KeyPrefix: "t-a:", Limit: 3}, {Key: "t-a:vip", Limit: 4}}},
		Steps: steps(
			exhaust("t-a:vip", 4), []Step{{Key: "t-a:vip", Want: Deny}},
			exhaust("t-a:x", 3), []Step{{Key: "t-a:x", Want: Deny}},
			exhaust("t-a:", 3), []Step{{Key: "t-a:", Want: Deny}},
			exhaust("t-a", 2), []Step{{Key: "t-a", Want: Deny}},
			exhaust("u", 1), []Step{{Key: "u", Want: Deny}},
		)},
	{ID: 15, Name: "a shadow limit never denies; it counts the admitted requests it would deny (issue 22)", Rule: Rule{Limit: 3, Shadow: 1},
		Steps: steps(exhaust("s", 3), []Step{{Key: "s", Want: Deny}, {Key: "t", Want: Admit}}), WouldDeny: 2},
	{ID: 16, Name: "a shadow limit is charged only a cost it admits (issue 22)", Rule: Rule{Limit: 5, Shadow: 2},
		Steps: []Step{
			{Key: "c", Cost: "3", Want: Admit}, // above the shadow limit: a would-deny, not charged
			{Key: "c", Cost: "2", Want: Admit}, // charged: the shadow limit is exhausted
			{Key: "c", Cost: "1", Want: Deny},  // denied by the enforced limit: nothing charged, no would-deny
			{Key: "d", Cost: "2", Want: Admit},
			{Key: "d", Cost: "1", Want: Admit}, // a would-deny
		}, WouldDeny: 2},
	{ID: 17, Name: "a rule of only a shadow limit admits everything (issue 22)", Rule: Rule{Shadow: 1},
		Steps: exhaust("o", 4), WouldDeny: 3},
	{ID: 18, Name: "a cost settled at the response: a debt denies, a refund gives back, an invalid cost settles nothing (issue 22, item 3)",
		Rule: Rule{Limit: 5},
		Steps: []Step{
			{Key: "s", ResponseCost: "4", Want: Admit}, // 4 used
			{Key: "s", Want: Admit},
			{Key: "s", Want: Deny},
			{Key: "r", Cost: "5", ResponseCost: "2", Trailer: true, Want: Admit}, // 2 used
			{Key: "r", Cost: "3", Want: Admit},
			{Key: "r", Want: Deny},
			{Key: "d", ResponseCost: "9", Trailer: true, Want: Admit}, // in debt: 9 used of 5
			{Key: "d", Want: Deny},
			{Key: "z", Cost: "3", ResponseCost: "0", Want: Admit}, // settled as min_cost: 1 used
			{Key: "z", Cost: "4", Want: Admit},
			{Key: "z", Want: Deny},
			{Key: "i", Cost: "2", ResponseCost: "-1", Want: Admit}, // invalid: the estimate stands
			{Key: "i", Cost: "3", Want: Admit},
			{Key: "i", Want: Deny},
			{Key: "t", Cost: "2", ResponseCost: "1099511627777", Trailer: true, Want: Admit},
			{Key: "t", Cost: "4", Want: Deny},
		}},
	{ID: 19, Name: "a key rl-wasm-host's stores cannot hold under the rule's name is refused wherever it would be kept so (review of issue 22)",
		Rule: Rule{Limit: 1},
		Steps: []Step{
			{Key: strings.Repeat("k", 254), Want: Admit}, // "r:" and it: 256 bytes
			{Key: strings.Repeat("k", 254), Want: Deny},
			{Key: strings.Repeat("k", 255), Want: Refuse, Only: byRuleName},
			{Key: "a b", Want: Refuse, Only: byRuleName},
			// Known difference: kept as a digest, decided (overrides are
			// matched on the key itself first).
			{Key: strings.Repeat("k", 255), Want: Admit, Only: notByRuleName},
			{Key: "a b", Want: Admit, Only: notByRuleName},
		}},
	{ID: 20, Name: "key_by: ip overrides are networks, matched by containment, an IPv6 client by its /64 (review of issue 22)",
		Rule: Rule{Limit: 1, KeyBy: "ip", Overrides: []Override{{KeyPrefix: "192.168.1.0/24", Limit: 2}, {KeyPrefix: "2001:db8::/32", Limit: 3},
			{Key: "2001:db8:0:7::/64", Limit: 4}}},
		Steps: steps(
			peers("192.168.1.7", 2), []Step{{Peer: "192.168.1.7", Want: Deny}},
			peers("192.168.100.7", 1), []Step{{Peer: "192.168.100.7", Want: Deny}}, // "192.168.1" as text selected it
			peers("2001:db8:0:1::1", 3), []Step{{Peer: "2001:db8:0:1::2", Want: Deny}}, // one /64
			peers("2001:db8:0:7:ffff::1", 4), []Step{{Peer: "2001:db8:0:7::1", Want: Deny}},
			peers("2001:db9::1", 1), []Step{{Peer: "2001:db9::1", Want: Deny}},
		)},
	{ID: 21, Name: "a response cost above MaxCost is a debt of MaxCost, never free; a client's own response-cost field never reaches the upstream",
		Rule: Rule{Limit: 5},
		Steps: []Step{
			{Key: "t", Cost: "2", ResponseCost: "1099511627777", Trailer: true, Want: Admit}, // settled as MaxCost
			{Key: "t", Want: Deny}, // refusing the settle would leave 2 of 5 used
			{Key: "u", ResponseCost: "99999999999999999999", Want: Admit}, // beyond int64: a cost all the same
			{Key: "u", Want: Deny},
			{Key: "c", Header: [][2]string{{"X-Cost-Actual", "1"}, {"x_cost_actual", "1"}}, Dropped: []string{"X-Cost-Actual"}, Want: Admit},
		}},
}
