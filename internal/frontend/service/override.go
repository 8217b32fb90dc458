package service

import (
	"net/netip"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// Per-key overrides (a rule's "overrides"): limits that replace the rule's
// for the keys they select, an exact key or a key prefix, the most
// specific first (pipeline.Overrides). The key is the rule's key as the
// store keeps it before the rule's name: the decision API's "key", the
// proxy's key as key_by derives it (an API key as its digest).
//
// An override is a policy of its own, decided on the same key of the same
// rule ("<rule>:<key>") as the rule's limits would be, and the store keeps
// a key's state per limit name. So when an override starts or stops
// applying to a key (a reload adds or removes it, or changes its key or
// prefix), a limit of the same name carries the key's usage across, read
// under the new parameters as any changed limit is; a limit of another
// name starts fresh, and the state of a name no longer decided is left as
// it was, to come back into use if its limit does or to be dropped once
// at rest.

// OverrideSpec is one of a rule's overrides, validated.
type OverrideSpec struct {
	// Kind and Value select the keys: the one key equal to Value, or
	// every key starting with it.
	Kind  ruleconfig.OverrideKind
	Value string
	// Limits replace the rule's for those keys, decided together.
	Limits []rl.Limit
	// Net is a key_prefix's network under key_by: ip, matched by
	// containment (ruleconfig.OverrideSpec.Net); zero otherwise.
	Net netip.Prefix
}

// Label names the override in answers: "key:<key>" or
// "key_prefix:<prefix>" (ruleconfig.OverrideSpec.Label).
func (o *OverrideSpec) Label() string { return o.Kind.String() + ":" + o.Value }

// selects is what selects o's keys, as pipeline.Overrides reads it.
func (o *OverrideSpec) selects() ruleconfig.OverrideSpec {
	return ruleconfig.OverrideSpec{Kind: o.Kind, Value: o.Value, Net: o.Net}
}

// overrideSpecs converts validated overrides to the service's.
func overrideSpecs(os []ruleconfig.OverrideSpec) []OverrideSpec {
	var out []OverrideSpec
	for _, o := range os {
		out = append(out, OverrideSpec{Kind: o.Kind, Value: o.Value, Limits: rlLimits(o.Limits), Net: o.Net})
	}
	return out
}

// override is an OverrideSpec ready to decide.
type override struct {
	spec   *OverrideSpec
	label  string
	policy *rl.Policy
	m      *ruleMetrics // the rule's counters, its own limit names
}

// ruleOverrides are a rule's overrides and their index.
type ruleOverrides struct {
	list  []*override
	index pipeline.Overrides
	// widest is the policy of the most limits among the rule's and its
	// overrides': the proxy's middleware sizes the results it lists in
	// the RateLimit fields by it.
	widest *rl.Policy
}

// buildOverrides compiles the rule's overrides.
func (s *Service) buildOverrides(ru *rule) error {
	ru.widest = ru.policy
	specs := ru.spec.Overrides
	if len(specs) == 0 {
		return nil
	}
	cs := make([]ruleconfig.OverrideSpec, len(specs))
	for i := range specs {
		o := &specs[i]
		// As the rule's own limits: one step, the engine's (a shadow
		// limit the store cannot decide is refused here too).
		p, err := s.eng.Compile("override "+o.Label(), o.Limits)
		if err != nil {
			return err
		}
		ru.overrides.list = append(ru.overrides.list, &override{spec: o, label: o.Label(), policy: p, m: s.metrics.forRule(ru.spec.Name, p.Limits())})
		if p.Len() > ru.widest.Len() {
			ru.widest = p
		}
		cs[i] = o.selects()
	}
	ru.overrides.index = pipeline.NewOverrides(cs)
	return nil
}

// overrideFor returns the override that applies to key, or nil.
func (ru *rule) overrideFor(key string) *override {
	if ru == nil || len(ru.overrides.list) == 0 {
		return nil
	}
	if i := ru.overrides.index.Match(key); i >= 0 {
		return ru.overrides.list[i]
	}
	return nil
}

// forKey makes t decide key: under the override of its rule that applies
// to key, if any (its policy and its counters), else as it is.
func (t *target) forKey(key string) {
	if ov := t.rule.overrideFor(key); ov != nil {
		t.use(ov)
	}
}

// use makes t decide under ov, an override of its rule.
func (t *target) use(ov *override) { t.Policy, t.m, t.override = ov.policy, ov.m, ov }

// overrideLabel is the label of the override t decides under, "" for none.
func (t *target) overrideLabel() string {
	if t.override == nil {
		return ""
	}
	return t.override.label
}

// OverrideJSON is one of a rule's overrides in canonical form (GET
// /v1/ratelimit/rules, explain, rl-wasm-host -check-config).
type OverrideJSON struct {
	Key       string          `json:"key,omitempty"`
	KeyPrefix string          `json:"key_prefix,omitempty"`
	Limits    []LimitSpecJSON `json:"limits"`
}

// describeOverrides is os in canonical form; nil for none.
func describeOverrides(os []OverrideSpec) []OverrideJSON {
	var out []OverrideJSON
	for _, o := range os {
		j := OverrideJSON{Limits: []LimitSpecJSON{}}
		if o.Kind == ruleconfig.OverrideKey {
			j.Key = o.Value
		} else {
			j.KeyPrefix = o.Value
		}
		for _, l := range o.Limits {
			j.Limits = append(j.Limits, limitSpec(l))
		}
		out = append(out, j)
	}
	return out
}

// ExplainOverrideJSON says which of a rule's overrides decides a key, and
// why (present in explain for a rule with overrides).
type ExplainOverrideJSON struct {
	// Override is the label of the override that applies ("key:...",
	// "key_prefix:..."), "" when none does and the rule's limits decide.
	Override string   `json:"override"`
	Why      []string `json:"why"`
}

// explainOverride explains which override of ru applies to key; nil when
// ru has none. With others false, the reasons name no other override (the
// overrides that match the key too but are not chosen): only why the one
// that applies does.
func explainOverride(ru *rule, key string, others bool) *ExplainOverrideJSON {
	if ru == nil || len(ru.overrides.list) == 0 {
		return nil
	}
	cs := make([]ruleconfig.OverrideSpec, len(ru.overrides.list))
	for i, o := range ru.overrides.list {
		cs[i] = o.spec.selects()
	}
	i, why := ru.overrides.index.Explain(key, cs)
	if !others && i >= 0 && len(why) > 1 {
		why = why[:1] // the first is why the chosen one applies (pipeline.Overrides.Explain)
	}
	ex := &ExplainOverrideJSON{Why: why}
	if i >= 0 {
		ex.Override = ru.overrides.list[i].label
	}
	return ex
}
