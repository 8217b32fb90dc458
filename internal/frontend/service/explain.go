package service

import (
	"encoding/base64"
	"net/http"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/httpflow"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// ExplainJSON says how a request reached its rule, key, cost and limits:
// the decision API's "explain" (with every limit's evaluation) and
// rl-wasm-host -explain (a proxied request, nothing decided).
type ExplainJSON struct {
	// Request is the proxied request as it is matched (-explain only).
	Request *ExplainRequestJSON `json:"request,omitempty"`
	// Candidates are the proxy's rules in the order they are tried, most
	// specific first, each with whether and why it matches; the first
	// that matches is the request's (-explain only).
	Candidates []ExplainCandidateJSON `json:"candidates,omitempty"`
	// Rule is the rule that decides, and why it is the one; null when
	// none matches (the proxy forwards the request unlimited).
	Rule *ExplainRuleJSON `json:"rule"`
	// Key is the key as the rule derives it.
	Key *ExplainKeyJSON `json:"key,omitempty"`
	// Override says which of the rule's overrides decides the key and
	// why, or that none does (a rule with overrides only); Limits are
	// then the override's.
	Override *ExplainOverrideJSON `json:"override,omitempty"`
	// Cost is the request's cost and where it came from.
	Cost *ExplainCostJSON `json:"cost,omitempty"`
	// Limits are every limit of the rule, in its order, each with its
	// evaluation when one was decided.
	Limits []ExplainLimitJSON `json:"limits"`
	// Fields are the rate-limit header fields of the answer, in the order
	// sent (a decision only).
	Fields [][2]string `json:"fields,omitempty"`
	// Decision says what was done: "admitted, cost taken", "denied,
	// nothing taken", "peeked, nothing taken", or, for -explain, why
	// nothing was ("not decided: explain takes no decision").
	Decision string `json:"decision"`
}

// ExplainRequestJSON is a request as the proxy matches it.
type ExplainRequestJSON struct {
	Method string `json:"method"`
	Host   string `json:"host"`
	Path   string `json:"path"`
	Query  string `json:"query,omitempty"`
	// CanonicalPath is the path as it is matched and forwarded.
	CanonicalPath string `json:"canonical_path,omitempty"`
	// MatchHost and MatchPath are the forms rules are compared with.
	MatchHost string `json:"match_host,omitempty"`
	MatchPath string `json:"match_path,omitempty"`
	// Error is why the request cannot be matched (the proxy answers
	// 400).
	Error string `json:"error,omitempty"`
}

// ExplainCandidateJSON is one rule the proxy tries.
type ExplainCandidateJSON struct {
	Rule    string   `json:"rule"`
	Matches bool     `json:"matches"`
	Why     []string `json:"why"`
}

// ExplainRuleJSON is the deciding rule.
type ExplainRuleJSON struct {
	Name string   `json:"name"`
	Why  []string `json:"why"`
	// Config is the rule as configured, in canonical form (absent for
	// inline limits).
	Config *RuleJSON `json:"config,omitempty"`
}

// ExplainKeyJSON is a request's key.
type ExplainKeyJSON struct {
	// Source is where it is read: the rule's key_by for a proxied
	// request, "request" for the decision API's "key".
	Source string `json:"source"`
	// Key is the key as derived: an API key only as its digest, never
	// the secret.
	Key string `json:"key,omitempty"`
	// Stored is the key as the store keeps it, "<rule>:<key>".
	Stored string `json:"stored,omitempty"`
	// PartitionKey is the "pk" of the RateLimit fields (a rule with
	// partition_key), a keyed hash of Key.
	PartitionKey string `json:"partition_key,omitempty"`
	// Error is why there is no usable key (the proxy answers 400).
	Error string `json:"error,omitempty"`
}

// ExplainCostJSON is a request's cost.
type ExplainCostJSON struct {
	Cost   int64  `json:"cost"`
	Source string `json:"source"`
	// Error is why the cost is refused (400).
	Error string `json:"error,omitempty"`
}

// ExplainLimitJSON is one limit and, for a decision, its evaluation.
type ExplainLimitJSON struct {
	LimitSpecJSON
	// Mode is how the limit takes part: "enforced" (it can deny) or
	// "shadow" (decided in the same step, never denies).
	Mode string `json:"mode"`
	// Outcome says what a shadow limit did, in words (a decision only):
	// "admits: charged", "would deny: not charged (the request was
	// admitted; ...)", "peeked: would admit (the request was denied by an
	// enforced limit; nothing charged)", ...
	Outcome string `json:"outcome,omitempty"`
	// Deciding marks the limit the answer's X-RateLimit-* fields and
	// Retry-After describe.
	Deciding bool `json:"deciding,omitempty"`
	// Result is its evaluation (a decision only).
	Result *LimitJSON `json:"result,omitempty"`
}

// ExplainRequest explains how the proxy would answer r under the rules in
// force, deciding nothing: the rules it tries and why each does or does
// not match, the rule's key and cost as derived from r, and its limits.
func (s *Service) ExplainRequest(r *pipeline.Request) ExplainJSON {
	rs := s.rules.Load()
	ex := ExplainJSON{Request: &ExplainRequestJSON{Method: r.Method, Host: r.Host, Path: r.Path, Query: r.Query},
		Limits: []ExplainLimitJSON{}}
	if rs.upstream == nil {
		ex.Decision = "not decided: the proxy is off (no upstream in the configuration) and answers 404"
		return ex
	}
	t, canonical, err := pipeline.Prepare(r)
	if err != nil {
		ex.Request.Error = err.Error()
		ex.Decision = "not decided: the proxy answers 400 (" + err.Error() + ")"
		return ex
	}
	ex.Request.CanonicalPath, ex.Request.MatchHost, ex.Request.MatchPath = canonical, t.Host, t.Path
	var ru *rule
	for _, c := range rs.proxied {
		ok, why := c.match.Explain(&t)
		if ok && ru != nil {
			why = append(why, "not chosen: rule "+quoteName(ru.spec.Name)+" is more specific (or earlier in the file) and matches first")
		}
		ex.Candidates = append(ex.Candidates, ExplainCandidateJSON{Rule: c.spec.Name, Matches: ok, Why: why})
		if ok && ru == nil {
			ru = c
		}
	}
	if ru == nil {
		ex.Decision = "not decided: no rule matches; the proxy forwards the request unlimited"
		return ex
	}
	_, why := ru.match.Explain(&t)
	ex.Rule = &ExplainRuleJSON{Name: ru.spec.Name, Why: why, Config: describeRule(ru)}
	key, err := ru.eng.Reading.Key(r, t.Path)
	if err == nil {
		err = ru.lim.CheckKey(key)
	}
	ex.Key = &ExplainKeyJSON{Source: ru.spec.KeyBy.String()}
	if err != nil {
		ex.Key.Error = err.Error()
	} else {
		ex.Key.Key, ex.Key.Stored, ex.Key.PartitionKey = key, ru.spec.Name+":"+key, partitionKey(ru.fields, key)
	}
	ex.Cost = &ExplainCostJSON{Cost: ru.spec.Cost, Source: "the rule's cost"}
	if h := ru.spec.CostHeader; h != "" {
		if vs := r.Header.Values(h); len(vs) > 0 {
			ex.Cost.Source = "the " + h + " header"
			if ex.Cost.Cost, err = ru.eng.Reading.ReadCost(r); err != nil {
				ex.Cost.Error = err.Error()
			}
		} else {
			ex.Cost.Source = "the rule's cost (no " + h + " header)"
		}
	}
	policy := ru.policy
	if ex.Key.Error == "" {
		ex.Override = explainOverride(ru, key, true)
		if ov := ru.overrideFor(key); ov != nil {
			policy = ov.policy
		}
	}
	ex.Limits = explainLimits(policy, nil, -1)
	switch {
	case ex.Key.Error != "" || ex.Cost.Error != "":
		ex.Decision = "not decided: the proxy answers 400"
	default:
		ex.Decision = "not decided: explain takes no decision (the decision API's \"explain\": true does)"
	}
	return ex
}

// explainDecision explains a decision of the API on t: the rule named by
// the request (or its inline limits), the key as given, the cost, every
// limit's evaluation and the fields sent, read back from h.
//
// It shows a caller only what its role may read elsewhere. An admin, who
// may read GET /v1/ratelimit/rules, sees the whole rule, its overrides
// included, and every override that also matches the key. A check or
// settle token sees the rule without its overrides, the limits that
// decided this key and the label of the override that did (as the
// decision's "override" says), never another override's key, prefix or
// API-key digest.
func explainDecision(t *target, ru *rule, req *DecisionRequest, cost int64, peek bool, res rl.Result, out engine.Outcome,
	each []rl.LimitResult, h http.Header, role Role) *ExplainJSON {
	ex := &ExplainJSON{Rule: &ExplainRuleJSON{Name: t.er.Name}}
	whole := role == RoleAdmin
	if ru != nil {
		ex.Rule.Why = []string{"named by the request's \"rule\""}
		ex.Rule.Config = describeRule(ru)
		if !whole {
			ex.Rule.Config.Overrides = nil
		}
	} else {
		ex.Rule.Why = []string{"the request's inline \"limits\" (an admin's)"}
	}
	ex.Key = &ExplainKeyJSON{Source: "request", Key: req.Key, Stored: t.er.Name + ":" + req.Key, PartitionKey: partitionKey(t.fields, req.Key)}
	ex.Override = explainOverride(ru, req.Key, whole)
	ex.Cost = &ExplainCostJSON{Cost: cost, Source: "the request's \"cost\""}
	if req.Cost == nil {
		ex.Cost.Source = "the rule's cost (the request gave none)"
	}
	deciding := -1
	if out == engine.Allowed || out == engine.Denied {
		deciding = res.Index
	}
	ex.Limits = explainLimits(t.policy, each, deciding)
	for i := range ex.Limits {
		if e := &ex.Limits[i]; e.Result != nil && e.Mode == "shadow" {
			e.Outcome = shadowOutcome(e.Result.Allowed, peek, res.Allowed)
		}
	}
	for _, f := range []string{pipeline.FieldPolicy, pipeline.FieldRateLimit, pipeline.FieldLimit, pipeline.FieldRemaining,
		pipeline.FieldReset, pipeline.FieldRetryAfter} {
		if v := h.Get(f); v != "" {
			ex.Fields = append(ex.Fields, [2]string{f, v})
		}
	}
	switch {
	case out == engine.FailOpen:
		ex.Decision = "admitted without a decision: the store failed and the rule fails open"
	case peek && res.Allowed:
		ex.Decision = "peeked, nothing taken: a check would be admitted"
	case peek:
		ex.Decision = "peeked, nothing taken: a check would be denied"
	case res.Allowed && t.policy.Shadowed():
		ex.Decision = "admitted, cost taken from every enforced limit and from each shadow limit that admits it"
	case res.Allowed:
		ex.Decision = "admitted, cost taken from every limit"
	default:
		ex.Decision = "denied, nothing taken from any limit"
	}
	return ex
}

// explainLimits lists p's limits with their results each (nil: none) and
// the deciding one (-1: none).
func explainLimits(p *rl.Policy, each []rl.LimitResult, deciding int) []ExplainLimitJSON {
	out := []ExplainLimitJSON{}
	for i, l := range p.Limits() {
		e := ExplainLimitJSON{LimitSpecJSON: limitSpec(l), Mode: "enforced", Deciding: i == deciding}
		if l.Shadow {
			e.Mode = "shadow"
		}
		if i < len(each) && each[i].Name != "" {
			j := limitJSON(&each[i])
			e.Result = &j
		}
		out = append(out, e)
	}
	return out
}

// shadowOutcome says what a shadow limit that admits or not did in a
// decision (a peek or not) that the enforced limits admitted or not.
func shadowOutcome(admits, peek, admitted bool) string {
	switch {
	case peek && admits:
		return "peeked: would admit"
	case peek:
		return "peeked: would deny"
	case !admitted && admits:
		return "peeked: would admit (the request was denied by an enforced limit; nothing charged)"
	case !admitted:
		return "peeked: would deny (the request was denied by an enforced limit; nothing charged)"
	case admits:
		return "admits: charged"
	}
	return "would deny: not charged (the request was admitted; counted in rl_shadow_denials_total)"
}

// partitionKey is the pk the fields f send for key, as written there; ""
// for none.
func partitionKey(f httpflow.Fields, key string) string {
	if f.PartitionKey == nil {
		return ""
	}
	return ":" + base64.StdEncoding.EncodeToString(f.PartitionKey(key)) + ":"
}

// describeRule is ru as GET /v1/ratelimit/rules shows it.
func describeRule(ru *rule) *RuleJSON {
	spec := &ru.spec
	rj := &RuleJSON{Name: spec.Name, Endpoint: spec.Endpoint, Host: spec.Host, Methods: spec.Methods, KeyBy: spec.KeyBy.String(),
		Cost: spec.Cost, MinCost: spec.MinCost, CostHeader: spec.CostHeader, ResponseCostHeader: spec.ResponseCostHeader,
		FailOpen: spec.FailOpen, Shape: spec.Shape,
		RateLimitFields: ratelimitFields(spec.Closest), QuotaUnit: spec.QuotaUnit, PartitionKey: spec.PartitionKey}
	for _, l := range ru.policy.Limits() {
		rj.Limits = append(rj.Limits, limitSpec(l))
	}
	rj.Overrides = describeOverrides(spec.Overrides)
	return rj
}

// limitSpec is l in canonical form.
func limitSpec(l rl.Limit) LimitSpecJSON {
	return LimitSpecJSON{Name: l.Name, Strategy: l.Algorithm.String(), Limit: l.Limit, Window: rl.FormatWindow(l.Window), Rate: l.Rate, Shadow: l.Shadow}
}

// namedLimitSpec is l, a configured limit, in canonical form (limitSpec's).
func namedLimitSpec(l ruleconfig.NamedLimit) LimitSpecJSON {
	return LimitSpecJSON{Name: l.Name, Strategy: l.Algorithm.String(), Limit: l.Limit.Limit, Window: core.FormatWindow(l.Window), Rate: l.Rate, Shadow: l.Shadow}
}

// ratelimitFields is the ratelimit_fields value of closest.
func ratelimitFields(closest bool) string {
	if closest {
		return "closest"
	}
	return "all"
}

// quoteName quotes a rule's name for a sentence.
func quoteName(s string) string { return `"` + s + `"` }
