package ruleconfig

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Override is one of a rule's "overrides" as written: the keys it applies
// to, one exact key or a key prefix, and the limits that replace the
// rule's for them, as a list or in the rule's shorthand:
//
//	overrides:
//	  - {key: "sha256:0123…", limits: [{name: burst, strategy: token, limit: 100, window: 1s}]}
//	  - {key_prefix: "tenant-a:", strategy: fixed, limit: 5000, window: 1h}
//
// Under key_by: ip a key_prefix is a CIDR network ("10.0.0.0/8"), never
// text (ipOverride).
type Override struct {
	Fields
	// The one key the override applies to (an API key as `sha256:` and its digest's first 32 hex digits).
	Key String `json:"key"`
	// The keys starting with it; under `key_by: ip` a CIDR network such as `10.0.0.0/8`. One of `key` and
	// `key_prefix` is required.
	KeyPrefix String `json:"key_prefix"`
	LimitFields
	// Instead of one limit's fields: the override's limits; give them the rule's limit names to carry a key's usage.
	Limits List[Limit] `json:"limits"`
}

// OverrideKind is how an override selects keys.
type OverrideKind uint8

// The kinds of override. OverrideKinds lists them, most specific first.
const (
	// OverrideKey applies to one key, equal to its value.
	OverrideKey OverrideKind = iota + 1
	// OverrideKeyPrefix applies to every key starting with its value
	// (the value itself included); under key_by: ip, to every key whose
	// network its CIDR prefix contains (OverrideSpec.Net).
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
	// Net is the network of a key_prefix under key_by: ip (Value is its
	// canonical CIDR form, "10.0.0.0/8"): it applies to the keys whose
	// network it contains, compared as networks, never as text. The zero
	// Prefix for every other override.
	Net netip.Prefix
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

// checkOverrides validates a rule's overrides under its key source kb (and,
// for key_by: ip, the front end's prefix lengths in opt); a problem makes
// the rule's check fail. derived is false for a rule of the decision API
// only that gives no key_by: its keys are its callers' text, whatever the
// default key source, and so are its overrides'. alone is the name of
// an override's lone unnamed limit: the rule's (LoneLimitName).
func checkOverrides(c *Checker, kb KeyBy, derived bool, opt Options, l List[Override], alone string) []OverrideSpec {
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
				msg := ""
				if kb.Kind == KeyIP && derived {
					s.Value, s.Net, msg = ipOverride(s.Kind, val, opt.IPv4Prefix, opt.IPv6Prefix)
				} else {
					msg = checkOverrideValue(kb, s.Kind, val)
				}
				if msg != "" {
					c.Fail(field, "%s", msg)
				} else if j, dup := seen[s.Label()]; dup {
					c.Fail(field, "%q is also the %s of overrides[%d]", Clip(s.Value, 64), s.Kind, j)
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
				s.Limits, _ = CheckLimits(c, f+".limits", o.Limits.Items, alone)
			}
		} else if !o.LimitFields.Given() {
			c.Fail(f+".limits", "missing: an override replaces the rule's limits for its keys (give limits, or strategy/limit/window/rate)")
		} else if lim, ok := o.LimitFields.check(c, f+"."); ok {
			s.Limits = []NamedLimit{{Name: alone, Limit: lim}}
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

// ipOverride checks the key or key_prefix v of an override of a rule keyed
// by ip, whose keys are the client's IPv4 network of v4 bits and IPv6
// network of v6 bits (0: 32 and 64; pipeline.IPKey), written as the address
// when the bits are its whole length ("192.0.2.1") and as the masked prefix
// otherwise ("2001:db8:1:2::/64"). It returns the value as keys are written
// and, for a key_prefix, its network; or what is wrong.
//
// A key is one client's key in that form. A key_prefix is a CIDR prefix,
// matched by containment: text would be compared byte for byte, and
// "192.168.1" selects 192.168.100.7 too while "2001:db8:0:" selects no
// IPv6 key at all (keys are written compressed: 2001:db8::/64). A prefix
// longer than the keys' (a /96 when clients are keyed by /64) contains no
// key and is refused.
func ipOverride(kind OverrideKind, v string, v4, v6 int) (string, netip.Prefix, string) {
	if v4 == 0 {
		v4 = 32
	}
	if v6 == 0 {
		v6 = 64
	}
	p, err := netip.ParsePrefix(v)
	addr := false
	if err != nil {
		a, aerr := netip.ParseAddr(v)
		if aerr != nil || a.Zone() != "" {
			if kind == OverrideKeyPrefix {
				return "", netip.Prefix{}, fmt.Sprintf("%q is not a CIDR prefix: key_by: ip matches networks, not text (as text, \"192.168.1\" would select 192.168.100.7 too, and an IPv6 prefix such as \"2001:db8:0:\" no key, which is written compressed: 2001:db8::/64); write a CIDR prefix such as %s",
					Clip(v, 64), ipSuggestion(v))
			}
			return "", netip.Prefix{}, fmt.Sprintf("%q is not an IP address: key_by: ip keys each client by its address (IPv4) or its network (IPv6 /%d)", Clip(v, 64), v6)
		}
		p, addr = netip.PrefixFrom(a, a.BitLen()), true
	}
	family, field, bits := "IPv4", "ipv4_prefix", v4
	if p.Addr().Is6() {
		family, field, bits = "IPv6", "ipv6_prefix", v6
	}
	// form writes the network n as a key of this family is written.
	form := func(n netip.Prefix) string {
		if n.Bits() == n.Addr().BitLen() {
			return n.Addr().String()
		}
		return n.String()
	}
	switch {
	case p.Addr().Is4In6():
		u := netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		return "", netip.Prefix{}, fmt.Sprintf("%q is an IPv4-mapped IPv6 address: clients reaching the front end this way are keyed by their IPv4 address; write %q", v, u.Masked().String())
	case p != p.Masked():
		return "", netip.Prefix{}, fmt.Sprintf("%q has bits set past its length: write the network %q", v, p.Masked().String())
	case kind == OverrideKeyPrefix && addr:
		return "", netip.Prefix{}, fmt.Sprintf("%q is an address, not a CIDR prefix (key_by: ip matches networks, not text): write %q, or give the client as key", v, netip.PrefixFrom(p.Addr(), bits).Masked().String())
	case kind == OverrideKeyPrefix && p.Bits() > bits:
		return "", netip.Prefix{}, fmt.Sprintf("%s clients are keyed by their /%d (%s), so each key is a whole /%d and a /%d contains none: use a prefix of /%d or shorter (%q)",
			family, bits, field, bits, p.Bits(), bits, netip.PrefixFrom(p.Addr(), bits).Masked().String())
	case kind == OverrideKeyPrefix:
		return p.String(), p, ""
	case p.Bits() < bits:
		return "", netip.Prefix{}, fmt.Sprintf("%q is a network of many clients, and %s clients are keyed by their /%d (%s): give it as key_prefix", v, family, bits, field)
	case p.Bits() > bits:
		n, _ := p.Addr().Prefix(bits)
		return "", netip.Prefix{}, fmt.Sprintf("%s clients are keyed by their /%d (%s), so no key is %q: write key %q (its /%d), or a key_prefix", family, bits, field, v, form(n), bits)
	}
	return form(p), netip.Prefix{}, ""
}

// ipSuggestion is a CIDR prefix to suggest for a text prefix v: the one its
// whole leading IPv4 octets spell ("192.168.1" or "192.168.1.": 192.168.1.0/24),
// else examples.
func ipSuggestion(v string) string {
	parts := strings.Split(strings.TrimSuffix(v, "."), ".")
	if len(parts) >= 1 && len(parts) <= 3 {
		var a [4]byte
		ok := true
		for i, s := range parts {
			n, err := strconv.ParseUint(s, 10, 8)
			if err != nil || s == "" || len(s) > 1 && s[0] == '0' {
				ok = false
				break
			}
			a[i] = byte(n)
		}
		if ok {
			return strconv.Quote(netip.PrefixFrom(netip.AddrFrom4(a), 8*len(parts)).String())
		}
	}
	return `"10.0.0.0/8" or "2001:db8::/32"`
}
