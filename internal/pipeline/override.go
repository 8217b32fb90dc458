package pipeline

import (
	"slices"
	"strconv"
	"strings"

	"github.com/rlcore/rl/internal/ruleconfig"
)

// Overrides finds the override of a rule (ruleconfig.OverrideSpec) that
// applies to a key, most specific first: the override of exactly that
// key, else the one whose key_prefix is the longest that the key starts
// with (a prefix matches the key equal to it too), else none. The order of
// the configuration does not matter: a rule's overrides never tie (no kind
// and value is given twice). Its zero value has no overrides.
//
// A lookup is one map read for the exact keys and one per distinct prefix
// length, longest first, with no allocation.
type Overrides struct {
	exact  map[string]int
	prefix map[string]int
	// lengths are the distinct prefix lengths, longest first.
	lengths []int
	n       int
}

// NewOverrides indexes os, validated overrides of one rule.
func NewOverrides(os []ruleconfig.OverrideSpec) Overrides {
	o := Overrides{n: len(os)}
	for i := range os {
		switch v := os[i].Value; os[i].Kind {
		case ruleconfig.OverrideKey:
			if o.exact == nil {
				o.exact = map[string]int{}
			}
			o.exact[v] = i
		case ruleconfig.OverrideKeyPrefix:
			if o.prefix == nil {
				o.prefix = map[string]int{}
			}
			o.prefix[v] = i
			if !slices.Contains(o.lengths, len(v)) {
				o.lengths = append(o.lengths, len(v))
			}
		}
	}
	slices.SortFunc(o.lengths, func(a, b int) int { return b - a })
	return o
}

// Len is the number of overrides.
func (o *Overrides) Len() int { return o.n }

// Match returns the index of the override that applies to key, or -1.
func (o *Overrides) Match(key string) int {
	if i, ok := o.exact[key]; ok {
		return i
	}
	for _, n := range o.lengths {
		if n <= len(key) {
			if i, ok := o.prefix[key[:n]]; ok {
				return i
			}
		}
	}
	return -1
}

// Explain returns Match's answer for key and why, in words: which
// override applies and what it was preferred to, or why none does. Only
// the configuration's values are quoted, never the key.
func (o *Overrides) Explain(key string, os []ruleconfig.OverrideSpec) (int, []string) {
	i := o.Match(key)
	if i < 0 {
		return -1, []string{"no override of the rule applies to the key: the rule's limits decide"}
	}
	var why []string
	if os[i].Kind == ruleconfig.OverrideKey {
		why = append(why, "the key is the override's key (an exact key comes before every prefix)")
	} else {
		why = append(why, "the key starts with the override's key_prefix "+strconv.Quote(os[i].Value)+", and no override names the key itself")
	}
	for j := range os {
		if j == i || os[j].Kind != ruleconfig.OverrideKeyPrefix || !strings.HasPrefix(key, os[j].Value) {
			continue
		}
		if os[i].Kind == ruleconfig.OverrideKey {
			why = append(why, "not chosen: key_prefix "+strconv.Quote(os[j].Value)+" matches too, but an exact key comes first")
		} else {
			why = append(why, "not chosen: key_prefix "+strconv.Quote(os[j].Value)+" matches too, but is shorter (a longer prefix comes first)")
		}
	}
	return i, why
}
