package service

import (
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

// OverrideSpec is one of a rule's overrides, validated: the keys it
// selects (an exact key or a key prefix, a network under key_by: ip) and
// the limits that replace the rule's for them.
type OverrideSpec = ruleconfig.OverrideSpec

// override is an OverrideSpec ready to decide.
type override struct {
	spec   *OverrideSpec
	label  string
	policy *rl.Policy
	m      *ruleMetrics // the rule's counters, its own limit names
}

// buildOverrides compiles the rule's overrides into its engine rule
// (engine.Rule.Overrides and OverridePolicies), each with its label and
// counters.
func (s *Service) buildOverrides(ru *rule) error {
	specs := ru.spec.Overrides
	if len(specs) == 0 {
		return nil
	}
	for i := range specs {
		o := &specs[i]
		// As the rule's own limits: one step, the engine's (a shadow
		// limit the store cannot decide is refused here too).
		p, err := s.eng.Compile("override "+o.Label(), o.Limits)
		if err != nil {
			return err
		}
		ru.overrides = append(ru.overrides, &override{spec: o, label: o.Label(), policy: p, m: s.metrics.forRule(ru.spec.Name, p.Limits())})
		ru.eng.OverridePolicies = append(ru.eng.OverridePolicies, p)
	}
	ru.eng.Overrides = pipeline.NewOverrides(specs)
	return nil
}

// overrideFor returns the override that applies to key, or nil (the
// engine's override step, engine.Rule.For).
func (ru *rule) overrideFor(key string) *override {
	if ru == nil {
		return nil
	}
	if _, i := ru.eng.For(key); i >= 0 {
		return ru.overrides[i]
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
func (t *target) use(ov *override) { t.policy, t.m, t.override = ov.policy, ov.m, ov }

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
			j.Limits = append(j.Limits, namedLimitSpec(l))
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
	if ru == nil || len(ru.overrides) == 0 {
		return nil
	}
	i, why := ru.eng.Overrides.Explain(key, ru.spec.Overrides)
	if !others && i >= 0 && len(why) > 1 {
		why = why[:1] // the first is why the chosen one applies (pipeline.Overrides.Explain)
	}
	ex := &ExplainOverrideJSON{Why: why}
	if i >= 0 {
		ex.Override = ru.overrides[i].label
	}
	return ex
}
