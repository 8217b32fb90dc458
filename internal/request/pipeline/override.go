package pipeline

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// Overrides finds the override of a rule (ruleconfig.OverrideSpec) that
// applies to a key, most specific first: the override of exactly that
// key, else the one whose key_prefix is the longest that the key starts
// with (a prefix matches the key equal to it too), else none. The order of
// the configuration does not matter: a rule's overrides never tie (no kind
// and value is given twice). Its zero value has no overrides.
//
// The key_prefix of a rule keyed by ip is a network (OverrideSpec.Net),
// matched as one: it applies to a key whose network it contains, an
// address ("10.1.2.3") or a network no longer than the prefix
// ("2001:db8:1:2::/64", IPKey's form of an IPv6 client), the longest
// such prefix first. Text is never compared there: "192.168.1" would
// select 192.168.100.7 too.
//
// A lookup is one map read for the exact keys and one per distinct prefix
// length, longest first, with no allocation.
type Overrides struct {
	exact  map[string]int
	prefix map[string]int
	// lengths are the distinct prefix lengths, longest first.
	lengths []int
	// nets are the networks of key_by: ip, by their masked prefix, and
	// netBits their distinct lengths, longest first.
	nets    map[netip.Prefix]int
	netBits []int
	n       int
}

// NewOverrides indexes os, validated overrides of one rule.
func NewOverrides(os []ruleconfig.OverrideSpec) Overrides {
	o := Overrides{n: len(os)}
	for i := range os {
		switch v := os[i].Value; {
		case os[i].Kind == ruleconfig.OverrideKey:
			if o.exact == nil {
				o.exact = map[string]int{}
			}
			o.exact[v] = i
		case os[i].Kind == ruleconfig.OverrideKeyPrefix && os[i].Net.IsValid():
			if o.nets == nil {
				o.nets = map[netip.Prefix]int{}
			}
			p := os[i].Net.Masked()
			o.nets[p] = i
			if !slices.Contains(o.netBits, p.Bits()) {
				o.netBits = append(o.netBits, p.Bits())
			}
		case os[i].Kind == ruleconfig.OverrideKeyPrefix:
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
	slices.SortFunc(o.netBits, func(a, b int) int { return b - a })
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
	if len(o.netBits) > 0 {
		if k, ok := keyNet(key); ok {
			for _, n := range o.netBits {
				if n > k.Bits() {
					continue // a longer prefix cannot contain the key's network
				}
				if p, err := k.Addr().Prefix(n); err == nil {
					if i, ok := o.nets[p]; ok {
						return i
					}
				}
			}
		}
	}
	return -1
}

// keyNet reads a key of key_by: ip as the network it stands for: an
// address is its whole length, a prefix ("2001:db8:1:2::/64") itself
// (masked). IPv4-mapped addresses are IPv4 and zones are dropped, as
// IPKey writes keys. ok is false for a key that is neither (a decision-API
// client may send any key): no network contains it.
func keyNet(key string) (netip.Prefix, bool) {
	if strings.IndexByte(key, '/') < 0 {
		a, err := netip.ParseAddr(key)
		if err != nil {
			return netip.Prefix{}, false
		}
		a = a.Unmap().WithZone("")
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	p, err := netip.ParsePrefix(key)
	if err != nil {
		return netip.Prefix{}, false
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, false
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), true
}

// prefixOf reports whether the key_prefix os applies to key: its network
// contains the key's, or, for text, the key starts with it.
func prefixOf(os *ruleconfig.OverrideSpec, key string) bool {
	if os.Kind != ruleconfig.OverrideKeyPrefix {
		return false
	}
	if !os.Net.IsValid() {
		return strings.HasPrefix(key, os.Value)
	}
	k, ok := keyNet(key)
	return ok && os.Net.Bits() <= k.Bits() && os.Net.Contains(k.Addr())
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
	switch {
	case os[i].Kind == ruleconfig.OverrideKey:
		why = append(why, "the key is the override's key (an exact key comes before every prefix)")
	case os[i].Net.IsValid():
		why = append(why, "the key's network is within the override's key_prefix "+strconv.Quote(os[i].Value)+", and no override names the key itself")
	default:
		why = append(why, "the key starts with the override's key_prefix "+strconv.Quote(os[i].Value)+", and no override names the key itself")
	}
	for j := range os {
		if j == i || !prefixOf(&os[j], key) {
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
