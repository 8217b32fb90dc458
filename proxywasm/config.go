package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
	rlstore "github.com/rlcore/rl/store"
)

// Defaults and bounds of the plugin configuration.
const (
	defaultSlots       = 16384
	maxSlots           = 1 << 20
	defaultKeysPerSlot = 4
	maxKeysPerSlot     = 64
	maxLimits          = core.MaxLimits // limits per rule, as rl.MaxLimits and the WASM ABI
	defaultTimeoutMS   = 100
	maxTimeoutMS       = 60_000
	defaultCheckPath   = "/v1/ratelimit/check"
	defaultSettlePath  = "/v1/ratelimit/settle"
)

// config is a validated plugin configuration.
type config struct {
	// Rules in configuration order.
	Rules []*rule
	// Slots is the number of shared-data entries (slots) per rule, and
	// KeysPerSlot how many keys one slot holds: a rule keeps the state of
	// at most Slots × KeysPerSlot live keys.
	Slots       int
	KeysPerSlot int
	// PartitionKeySecret keys the partition keys of the rules with
	// partition_key: true (pipeline.PartitionKey); a secret, never logged.
	PartitionKeySecret []byte
	// ProblemDetails chooses the body of the filter's 429s and 503s
	// ("problem_details": auto, json or text; default auto).
	ProblemDetails pipeline.ProblemMode
	// proxied are the rules that match requests, most specific first.
	proxied []*rule
}

// rule is one validated rule.
type rule struct {
	Name     string
	Endpoint string // path prefix; "/" matches every path
	Host     string // "", "api.example.com" or "*.example.com", lower case
	Methods  []string
	// match selects the rule's requests (Endpoint, Host and Methods in
	// the forms requests are matched in).
	match pipeline.Matcher
	// Limits and their names, decided together, all or nothing, except
	// the shadow limits (Shadow), which never deny.
	Limits     []core.Limit
	LimitNames []string
	Shadow     []bool
	// policy is the limits compiled (shadow flags included), once: a
	// decision on shared data is policy.Decide.
	policy *rlstore.Policy
	// Reading is how the rule reads a request's key and cost, the
	// engine's step every front end runs (engine.Reading: KeyBy, where
	// the key is read, pipeline.Key; Cost, MinCost and CostHeader,
	// pipeline.ParseCost); the filter keys by the peer Envoy resolved.
	engine.Reading
	// ResponseCostHeader, if set, names the upstream's response field
	// (header or trailer; lower case, as proxy-wasm gives names)
	// carrying an admitted request's actual cost, settled against the
	// cost taken (settle.go) and removed from the response.
	ResponseCostHeader string
	// FailOpen admits requests when no decision can be had (shared data
	// failed or full, the global service failed or timed out).
	FailOpen bool
	// Global, if set, sends decisions to rl-wasm-host instead of deciding
	// on shared data.
	Global *globalSpec
	// maxLog is the largest sliding-log limit among Limits (0 if none): the
	// log capacity a decision needs.
	maxLog int
	// fields are the rule's choices for its RateLimit fields (only the
	// closest limit, the quota unit); PartitionKey adds a partition key,
	// keyed by config.PartitionKeySecret.
	fields       pipeline.Fields
	PartitionKey bool
	// overrides replace Limits for the keys they select (override.go),
	// overrideIndex finds a key's.
	overrides     []*ruleOverride
	overrideIndex pipeline.Overrides
	// base is the rule this one is an override of (nil: a configured
	// rule).
	base *rule
}

// globalSpec is a rule's global mode: an HTTP callout to rl-wasm-host's
// decision API.
type globalSpec struct {
	Cluster   string // Envoy cluster running rl-wasm-host
	Authority string // :authority of the callout; default the cluster name
	Path      string // default /v1/ratelimit/check
	// SettlePath is where a rule with response_cost_header sends its
	// settles; default /v1/ratelimit/settle.
	SettlePath string
	TimeoutMS  uint32 // default 100
	// Rule names a rule of rl-wasm-host's configuration; "" sends this
	// rule's limits inline.
	Rule string
	// Token, if set, is sent as "Authorization: Bearer <token>" (one of
	// rl-wasm-host's api_tokens). A secret: never logged.
	Token string
}

// String describes g without its token.
func (g globalSpec) String() string {
	t := ""
	if g.Token != "" {
		t = " token=<redacted>"
	}
	return fmt.Sprintf("{cluster=%s authority=%s path=%s settle_path=%s timeout=%dms rule=%s%s}", g.Cluster, g.Authority, g.Path, g.SettlePath, g.TimeoutMS, g.Rule, t)
}

// Problem is one mistake in the configuration: the rule, the field's path
// and what is wrong.
type Problem = ruleconfig.Problem

// ConfigError lists every mistake found in the plugin configuration.
type ConfigError struct {
	Problems []Problem
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rl-filter configuration: %d problem", len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	for _, p := range e.Problems {
		b.WriteString("; ")
		b.WriteString(p.String())
	}
	return b.String()
}

// parseConfig validates a JSON plugin configuration. Every mistake is
// reported in one *ConfigError naming the rule and the field.
func parseConfig(data []byte) (*config, error) {
	var f fileJSON
	if ps := ruleconfig.Decode(data, &f); len(ps) > 0 {
		return nil, &ConfigError{Problems: ps}
	}
	cfg, ps := f.Validate()
	if len(ps) > 0 {
		return nil, &ConfigError{Problems: ps}
	}
	cfg.sortRules()
	return cfg, nil
}

// fileJSON is the plugin configuration as written. Its fields' comments
// are the filter's configuration reference
// (docs/reference/filter-configuration.md, configPage): write them for
// users.
type fileJSON struct {
	ruleconfig.Fields
	// rl-wasm-host's rules ([configuration.md](configuration.md)), with `global` below, and `key_by: path`
	// besides; the configuration may also be a bare list of rules. Required.
	Rules ruleconfig.List[ruleJSON] `json:"rules"`
	// Shared-data slots per local rule, 1 to 1048576. Default: `16384`.
	Slots ruleconfig.Int `json:"slots"`
	// Key states a slot holds, 1 to 64: a local rule holds at most `slots × keys_per_slot` keys. Default: `4`.
	KeysPerSlot ruleconfig.Int `json:"keys_per_slot"`
	// The secret of `partition_key` rules; use rl-wasm-host's, so a client sees one `pk` everywhere. Default: none.
	PKSecret ruleconfig.String `json:"partition_key_secret"`
	// The body of the filter's 429 and 503: `auto` (problem details when the client accepts JSON), `json` or
	// `text`. Default: `auto`.
	Problems ruleconfig.String `json:"problem_details"`
}

// ruleJSON is a rule as written: the shared fields and the filter's own.
type ruleJSON struct {
	ruleconfig.Rule
	// Decide through rl-wasm-host's decision API, so that every Envoy shares one limit, instead of on this Envoy's
	// shared data. Default: none, local.
	Global globalJSON `json:"global"`
}

// globalJSON is a rule's global mode as written.
type globalJSON struct {
	ruleconfig.Fields
	// The Envoy cluster of rl-wasm-host's decision API. Required.
	Cluster ruleconfig.String `json:"cluster"`
	// The call's authority. Default: the cluster's name.
	Authority ruleconfig.String `json:"authority"`
	// The check call's path. Default: `/v1/ratelimit/check`.
	Path ruleconfig.String `json:"path"`
	// The settle call's path, for a rule with `response_cost_header`. Default: `/v1/ratelimit/settle`.
	SettlePath ruleconfig.String `json:"settle_path"`
	// The call's timeout. Default: `100ms`.
	Timeout ruleconfig.String `json:"timeout"`
	// A rule of rl-wasm-host's configuration, which decides with its own limits and overrides. Without it, the
	// rule's limits are sent inline (an `admin` token's right). Default: none.
	Rule ruleconfig.String `json:"rule"`
	// Sent as `Authorization: Bearer`: a `check` token (a `settle` token for a rule with `response_cost_header`).
	// Envoy's `/config_dump` shows it: never give Envoy an `admin` token. Default: none.
	Token ruleconfig.String `json:"token"`
}

// Validate checks the configuration and returns it (its rules not yet
// sorted), or every problem it has.
func (f *fileJSON) Validate() (*config, []Problem) {
	cfg := &config{Slots: defaultSlots, KeysPerSlot: defaultKeysPerSlot}
	c := &ruleconfig.Checker{}
	if !c.Object("", "an object with \"rules\" (or a list of rules)", &f.Fields) {
		return nil, c.Problems
	}
	if n, ok := c.Int("keys_per_slot", f.KeysPerSlot); ok {
		if n < 1 || n > maxKeysPerSlot {
			c.Fail("keys_per_slot", "%d is outside [1, %d]", n, maxKeysPerSlot)
		} else {
			cfg.KeysPerSlot = int(n)
		}
	}
	if n, ok := c.Int("slots", f.Slots); ok {
		if n < 1 || n > maxSlots {
			c.Fail("slots", "%d is outside [1, %d]", n, maxSlots)
		} else {
			cfg.Slots = int(n)
		}
	}
	switch {
	case !f.Rules.Set:
		c.Fail("rules", "missing")
	case !c.Want("rules", "a list of rules", f.Rules.Got):
	case len(f.Rules.Items) == 0:
		c.Fail("rules", "no rules")
	}
	if v, ok := c.String("problem_details", f.Problems); ok {
		if m, ok := pipeline.ParseProblemMode(v); ok {
			cfg.ProblemDetails = m
		} else {
			c.Fail("problem_details", "%q: want %s", ruleconfig.Clip(v, 32), strings.Join(pipeline.ProblemModes(), ", "))
		}
	}
	if t := f.PKSecret; t.Set {
		switch {
		case t.Got != "":
			c.Fail("partition_key_secret", "want a string") // never echo a secret
		case len(t.V) < pipeline.MinPartitionKeySecret:
			c.Fail("partition_key_secret", "%d bytes; want at least %d (the value is not shown)", len(t.V), pipeline.MinPartitionKeySecret)
		default:
			cfg.PartitionKeySecret = []byte(t.V)
		}
	}
	cfg.Rules = ruleconfig.CheckRules(c, f.Rules.Items, func(r *ruleJSON) (*rule, string, bool) {
		ru, ok := r.check(c)
		if ru.PartitionKey && !f.PKSecret.Set {
			c.Fail("partition_key", "needs a secret to key the hash: set partition_key_secret (at least %d random bytes)", pipeline.MinPartitionKeySecret)
			ok = false
		}
		return ru, ru.Name, ok
	})
	checkGlobalKeys(c, cfg.Rules)
	return cfg, c.Problems
}

// checkGlobalKeys refuses two rules that name one rl-wasm-host rule
// (global.rule) but derive their keys differently: both send the key
// itself, so a key of one would be a key of the other (a client's header
// set to a victim's address would spend that address's budget).
func checkGlobalKeys(c *ruleconfig.Checker, rules []*rule) {
	first := map[string]int{}
	for j, r := range rules {
		if r == nil || r.Global == nil || r.Global.Rule == "" {
			continue
		}
		i, seen := first[r.Global.Rule]
		if !seen {
			first[r.Global.Rule] = j
			continue
		}
		if a, b := rules[i].KeyBy.String(), r.KeyBy.String(); !strings.EqualFold(a, b) {
			c.Fail(fmt.Sprintf("rules[%d].global.rule", j), "rl-wasm-host's rule %q is also named by rules[%d] (%s), whose keys come from key_by %s, not %s: "+
				"their keys would be one another's; name another rl-wasm-host rule, or derive both keys alike", r.Global.Rule, i, rules[i].Name, a, b)
		}
	}
}

// check validates the rule: the shared fields, then the filter's.
func (r *ruleJSON) check(c *ruleconfig.Checker) (*rule, bool) {
	before := len(c.Problems)
	if i := slices.Index(r.Unknown, "shape"); i >= 0 {
		c.Fail("shape", "not supported by the filter (a proxy-wasm filter cannot hold a request for a delay)")
		r.Unknown = slices.Delete(r.Unknown, i, i+1)
	}
	s, _ := r.Check(c, ruleconfig.Options{Proxied: true, PathKey: true})
	ru := &rule{
		Name: s.Name, Endpoint: s.Endpoint, Host: s.Host, Methods: s.Methods,
		Reading:            engine.Reading{KeyBy: s.KeyBy, Cost: s.Cost, MinCost: s.MinCost, CostHeader: s.CostHeader},
		FailOpen:           s.FailOpen,
		ResponseCostHeader: strings.ToLower(s.ResponseCostHeader),
		fields:             pipeline.Fields{Closest: s.Closest, QuotaUnit: s.QuotaUnit}, PartitionKey: s.PartitionKey,
	}
	for _, l := range s.Limits {
		ru.Limits = append(ru.Limits, l.Limit)
		ru.LimitNames = append(ru.LimitNames, l.Name)
		ru.Shadow = append(ru.Shadow, l.Shadow)
		if l.Algorithm == core.SlidingLog {
			ru.maxLog = max(ru.maxLog, int(l.Limit.Limit))
		}
	}
	if len(s.Limits) > 0 && len(c.Problems) == before {
		p, err := ruleconfig.Compile(s.Limits)
		if err != nil { // not reached: Check validated the limits
			c.Fail("limits", "%v", err)
		}
		ru.policy = p
	}
	if strings.HasPrefix(s.Endpoint, "/") && !strings.ContainsAny(s.Endpoint, "?#") {
		if m, err := pipeline.NewMatcher(s.Endpoint, s.Host, s.Methods); err != nil {
			c.Fail("endpoint", "%q: %v", ruleconfig.Clip(s.Endpoint, 64), err)
		} else {
			ru.match = m
		}
	}
	if r.Global.Set {
		ru.Global = r.Global.check(c)
		if ru.Global != nil && ru.Global.Rule != "" && len(r.Overrides.Items) > 0 {
			c.Fail("overrides", "a rule with global.rule is decided by rl-wasm-host's rule %q, which matches its own overrides against the key the filter sends "+
				"(the key as key_by derives it): put these overrides in that rule of rl-wasm-host's configuration, or leave out global.rule to send the limits (and overrides) inline",
				ru.Global.Rule)
		}
	}
	ru.addOverrides(c, s.Overrides)
	return ru, len(c.Problems) == before
}

// check validates a rule's global mode.
func (gj *globalJSON) check(c *ruleconfig.Checker) *globalSpec {
	if !c.Object("global", "an object {\"cluster\": ..., \"timeout\": ...}", &gj.Fields) {
		return nil
	}
	g := &globalSpec{Path: defaultCheckPath, SettlePath: defaultSettlePath, TimeoutMS: defaultTimeoutMS}
	if !gj.Cluster.Set {
		c.Fail("global.cluster", "missing: name the Envoy cluster that runs rl-wasm-host")
	} else if s, ok := c.String("global.cluster", gj.Cluster); ok {
		if s == "" || len(s) > 255 || strings.ContainsAny(s, " \t\r\n") {
			c.Fail("global.cluster", "%q is not a cluster name", ruleconfig.Clip(s, 64))
		}
		g.Cluster = s
	}
	g.Authority = g.Cluster
	if s, ok := c.String("global.authority", gj.Authority); ok {
		if s == "" || len(s) > 255 || strings.ContainsAny(s, " \t\r\n/") {
			c.Fail("global.authority", "%q is not a host name", ruleconfig.Clip(s, 64))
		}
		g.Authority = s
	}
	if s, ok := c.String("global.path", gj.Path); ok {
		if !strings.HasPrefix(s, "/") || strings.ContainsAny(s, " \t\r\n") {
			c.Fail("global.path", "want a path starting with \"/\", got %q", ruleconfig.Clip(s, 64))
		}
		g.Path = s
	}
	if s, ok := c.String("global.settle_path", gj.SettlePath); ok {
		if !strings.HasPrefix(s, "/") || strings.ContainsAny(s, " \t\r\n") {
			c.Fail("global.settle_path", "want a path starting with \"/\", got %q", ruleconfig.Clip(s, 64))
		}
		g.SettlePath = s
	}
	if s, ok := c.String("global.timeout", gj.Timeout); ok {
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			c.Fail("global.timeout", "%q: want a duration such as \"50ms\" or \"1s\"", ruleconfig.Clip(s, 32))
		case d < time.Millisecond || d > maxTimeoutMS*time.Millisecond:
			c.Fail("global.timeout", "%s is outside [1ms, %s]", d, maxTimeoutMS*time.Millisecond)
		default:
			g.TimeoutMS = uint32(d / time.Millisecond)
		}
	}
	if t := gj.Token; t.Set {
		s := t.V
		switch {
		case t.Got != "":
			c.Fail("global.token", "want a string") // never echo a token
		case len(s) == 0 || len(s) > 4096 || strings.IndexFunc(s, func(c rune) bool { return c <= 0x20 || c >= 0x7f }) >= 0:
			c.Fail("global.token", "want 1 to 4096 bytes of printable ASCII without spaces (the value is not shown)")
		default:
			g.Token = s
		}
	}
	if s, ok := c.String("global.rule", gj.Rule); ok {
		if err := ruleconfig.CheckName(s); err != nil {
			c.Fail("global.rule", "%v", err)
		}
		g.Rule = s
	}
	return g
}
