package ruleconfig

import (
	"fmt"
	"strings"
)

// Override is one of a rule's "overrides" as written: the keys it applies
// to, one exact key or a key prefix, and the limits that replace the
// rule's for them, as a list or in the rule's shorthand:
//
//	overrides:
//	  - {key: "sha256:0123…", limits: [{name: burst, strategy: token, limit: 100, window: 1s}]}
//	  - {key_prefix: "tenant-a:", strategy: fixed, limit: 5000, window: 1h}
type Override struct {
	Fields
	Key       String `json:"key"`
	KeyPrefix String `json:"key_prefix"`
	LimitFields
	Limits List[Limit] `json:"limits"`
}

// OverrideKind is how an override selects keys.
type OverrideKind uint8

// The kinds of override. OverrideKinds lists them, most specific first.
const (
	// OverrideKey applies to one key, equal to its value.
	OverrideKey OverrideKind = iota + 1
	// OverrideKeyPrefix applies to every key starting with its value
	// (the value itself included).
	OverrideKeyPrefix
)

// OverrideKinds lists the kinds, most specific first: the one list of
// their names (the fields "key" and "key_prefix").
func OverrideKinds() []OverrideKind { return []OverrideKind{OverrideKey, OverrideKeyPrefix} }

// String is the kind's field name: "key" or "key_prefix".
func (k OverrideKind) String() string {
	switch k {
	case OverrideKey:
		return "key"
	case OverrideKeyPrefix:
		return "key_prefix"
	}
	return fmt.Sprintf("OverrideKind(%d)", uint8(k))
}

// OverrideSpec is a validated override.
type OverrideSpec struct {
	Kind OverrideKind
	// Value is the key, or the prefix, as written: the key as the rule
	// keeps it (before the rule's name is added; for key_by: api_key the
	// API key's digest, pipeline.APIKeyDigest, never the key itself).
	Value string
	// Limits replace the rule's for the keys it applies to, decided
	// together; the shorthand's one is named "default", as a rule's is.
	Limits []NamedLimit
}

// Label names the override in answers and explanations: its field and
// value, "key:sha256:0123…" or "key_prefix:tenant-a:". The value is the
// configuration's, never a request's beyond what it matched: a key's
// digest for key_by: api_key.
func (o *OverrideSpec) Label() string { return o.Kind.String() + ":" + o.Value }

// MaxOverrideValue is the longest key or key prefix an override may name:
// the longest key (rl.DefaultMaxKeyLength).
const MaxOverrideValue = 256

// apiKeyDigestLen is the length of an API key's digest as rules keep it:
// "sha256:" and 32 hex digits (pipeline.APIKeyDigest).
const apiKeyDigestLen = len("sha256:") + 32

// checkOverrides validates a rule's overrides under its key source kb; a
// problem makes the rule's check fail.
func checkOverrides(c *Checker, kb KeyBy, l List[Override]) []OverrideSpec {
	if !c.Want("overrides", "a list of overrides {key or key_prefix, limits}", l.Got) {
		return nil
	}
	if kb.Kind == KeyGlobal && len(l.Items) > 0 {
		c.Fail("overrides", "key_by: global has one key for every request: change the rule's limits instead")
		return nil
	}
	var out []OverrideSpec
	seen := map[string]int{}
	for i := range l.Items {
		o := &l.Items[i]
		f := fmt.Sprintf("overrides[%d]", i)
		if !c.Object(f, "an object {key or key_prefix, limits}", &o.Fields) {
			continue
		}
		before := len(c.Problems)
		var s OverrideSpec
		switch {
		case o.Key.Set && o.KeyPrefix.Set:
			c.Fail(f+".key_prefix", "give key or key_prefix, not both (an override applies to one key, or to the keys starting with a prefix)")
		case !o.Key.Set && !o.KeyPrefix.Set:
			c.Fail(f+".key", "missing: give key (one key) or key_prefix (every key starting with it)")
		default:
			s.Kind, s.Value = OverrideKey, o.Key.V
			field, v := f+".key", o.Key
			if o.KeyPrefix.Set {
				s.Kind, field, v = OverrideKeyPrefix, f+".key_prefix", o.KeyPrefix
			}
			if val, ok := c.String(field, v); ok {
				if s.Kind == OverrideKey && kb.Kind == KeyAPIKey {
					val = strings.ToLower(val) // a digest, as pipeline.APIKeyDigest writes it
				}
				s.Value = val
				if msg := checkOverrideValue(kb, s.Kind, val); msg != "" {
					c.Fail(field, "%s", msg)
				} else if j, dup := seen[s.Label()]; dup {
					c.Fail(field, "%q is also the %s of overrides[%d]", Clip(val, 64), s.Kind, j)
				} else {
					seen[s.Label()] = i
				}
			}
		}
		if o.Limits.Set {
			if o.LimitFields.Given() {
				c.Fail(f+".limits", "give either limits or strategy/limit/window/rate, not both")
			}
			if c.Want(f+".limits", "a list of limits", o.Limits.Got) {
				s.Limits, _ = CheckLimits(c, f+".limits", o.Limits.Items)
			}
		} else if !o.LimitFields.Given() {
			c.Fail(f+".limits", "missing: an override replaces the rule's limits for its keys (give limits, or strategy/limit/window/rate)")
		} else if lim, ok := o.LimitFields.check(c, f+"."); ok {
			s.Limits = []NamedLimit{{Name: "default", Limit: lim}}
		}
		if len(c.Problems) == before {
			out = append(out, s)
		}
	}
	return out
}

// checkOverrideValue describes what is wrong with an override's key or
// key prefix v under key source kb, or is "". Keys are what a rule's keys
// can be: 1 to 256 bytes of printable ASCII without spaces; under key_by:
// api_key, an exact key is the API key's digest (the configuration holds
// no secret, and the rule keeps no other form), and a prefix of a digest
// selects nothing meaningful.
func checkOverrideValue(kb KeyBy, kind OverrideKind, v string) string {
	if kb.Kind == KeyAPIKey {
		// Never v itself in a message: it may be the secret.
		if kind == OverrideKeyPrefix {
			return "key_by: api_key keeps each API key as its digest, and a prefix of a digest selects no set of keys: list the keys (key: their digests)"
		}
		if hex, ok := strings.CutPrefix(v, "sha256:"); !ok || len(v) != apiKeyDigestLen || strings.Trim(hex, "0123456789abcdefABCDEF") != "" {
			return "key_by: api_key keeps each API key as its digest, and so must an override (never the key itself, a secret): " +
				"\"sha256:\" and the first 32 hex digits of its SHA-256 (printf %s \"$KEY\" | sha256sum | cut -c1-32)"
		}
		return ""
	}
	if v == "" || len(v) > MaxOverrideValue {
		return fmt.Sprintf("want 1 to %d bytes, got %d", MaxOverrideValue, len(v))
	}
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < 0x21 || b > 0x7e {
			return fmt.Sprintf("%q: byte %d is not printable ASCII (or is a space): no key could match it", Clip(v, 64), i)
		}
	}
	return ""
}
