package main

import (
	"slices"
	"strings"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// A rule's overrides (ruleconfig.OverrideSpec) replace its limits for the
// keys they select, the most specific first (pipeline.Overrides), as in
// rl-wasm-host. Each is decided as the rule with the override's limits: the
// same name, slots, key source, cost, fail policy and fields, or, in
// global mode, the override's limits sent inline. A rule with global.rule
// has none (config.go refuses them): it names rl-wasm-host's rule, whose
// own overrides apply there, to the key sent as it is (globalKey).
//
// Shared data keeps a key's states in one record, in the order of the
// limits that decide it (state.go). An override whose limit names are the
// rule's, in the rule's order, decides on the key's record: its usage
// carries across when the override starts or stops applying, as in
// rl-wasm-host. An override of other names keeps the key's states in a
// record of its own, one per list of names: it starts fresh when it starts
// applying, and the rule's record is left as it was, to be decided on
// again when the override stops applying (or dropped at rest).
// rl-wasm-host keeps states per limit name, so the two differ only for an
// override sharing some names with its rule but not all (or in another
// order): there a shared name carries the usage, here it does not.

// ruleOverride is one of a rule's overrides, ready to decide.
type ruleOverride struct {
	label string
	// r is the rule with the override's limits, deciding the keys the
	// override selects.
	r *rule
	// record, if not "", is appended to a key to name its record under
	// the override: the override's limit names, when they are not the
	// rule's.
	record string
}

// addOverrides compiles the rule's validated overrides (after the rest of
// the rule: a derived rule copies it), reporting to c what cannot be.
func (ru *rule) addOverrides(c *ruleconfig.Checker, os []ruleconfig.OverrideSpec) {
	for _, o := range os {
		d := *ru
		d.base, d.overrides, d.Limits, d.LimitNames, d.Shadow, d.maxLog = ru, nil, nil, nil, nil, 0
		for _, l := range o.Limits {
			d.Limits = append(d.Limits, l.Limit)
			d.LimitNames = append(d.LimitNames, l.Name)
			d.Shadow = append(d.Shadow, l.Shadow)
			if l.Algorithm == core.SlidingLog {
				d.maxLog = max(d.maxLog, int(l.Limit.Limit))
			}
		}
		p, err := ruleconfig.Compile(o.Limits)
		if err != nil { // not reached: Check validated the override
			c.Fail("overrides", "%s: %v", o.Label(), err)
			continue
		}
		d.policy = p
		ov := &ruleOverride{label: o.Label(), r: &d}
		if !slices.Equal(d.LimitNames, ru.LimitNames) {
			ov.record = "\x00" + strings.Join(d.LimitNames, "\x00") // names hold no NUL (ruleconfig.CheckName)
		}
		ru.overrides = append(ru.overrides, ov)
	}
	ru.overrideIndex = pipeline.NewOverrides(os)
}

// forKey returns the rule deciding key, ru or one of its overrides', and
// the name of the key's record of states.
func (ru *rule) forKey(key string) (*rule, string) {
	if len(ru.overrides) == 0 {
		return ru, key
	}
	i := ru.overrideIndex.Match(key)
	if i < 0 {
		return ru, key
	}
	ov := ru.overrides[i]
	return ov.r, key + ov.record
}

// root is the configured rule r derives from: r itself, or the rule whose
// override it decides.
func (r *rule) root() *rule {
	if r.base != nil {
		return r.base
	}
	return r
}
