package main

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/ruleconfig"
)

// sortRules orders the rules most specific first: the longest endpoint, then
// an exact host over a wildcard host over none, then a rule with methods
// over one without, then configuration order (as rl-wasm-host's proxy).
func (c *config) sortRules() {
	c.proxied = slices.Clone(c.Rules)
	slices.SortStableFunc(c.proxied, func(a, b *rule) int {
		return cmp.Or(
			-cmp.Compare(len(a.Endpoint), len(b.Endpoint)),
			-cmp.Compare(specificity(a.Host), specificity(b.Host)),
			-cmp.Compare(min(1, len(a.Methods)), min(1, len(b.Methods))),
		)
	})
}

// specificity ranks host patterns: exact host 2, wildcard 1, any 0.
func specificity(host string) int {
	switch {
	case host == "":
		return 0
	case strings.HasPrefix(host, "*."):
		return 1
	}
	return 2
}

// request is what the filter reads of a request to match and key it.
type request struct {
	method, authority, path string // pseudo-headers; path with its query
	header                  func(name string) string
	sourceAddress           func() string // Envoy's source.address, "ip:port"
	// canonical is the path rules match, set by match.
	canonical string
}

// match returns the most specific rule matching req, or nil; an error for a
// path that cannot be matched safely (the filter answers 400).
func (c *config) match(req *request) (*rule, error) {
	path, err := matchPath(req.path)
	if err != nil {
		return nil, err
	}
	req.canonical = path
	host := hostOf(req.authority)
	for _, r := range c.proxied {
		if r.matches(req.method, host, path) {
			return r, nil
		}
	}
	return nil, nil
}

func (r *rule) matches(method, host, path string) bool {
	if !pathMatches(r.matchEndpoint, path) {
		return false
	}
	if h := r.Host; h != "" {
		if strings.HasPrefix(h, "*.") {
			if !strings.HasSuffix(host, h[1:]) {
				return false
			}
		} else if host != h {
			return false
		}
	}
	return len(r.Methods) == 0 || slices.Contains(r.Methods, method)
}

// pathMatches reports whether path is endpoint or below it: "/v1/pay"
// matches "/v1/pay" and "/v1/pay/refund" but not "/v1/payments"; an
// endpoint ending in "/" matches everything under it.
func pathMatches(endpoint, path string) bool {
	if !strings.HasPrefix(path, endpoint) {
		return false
	}
	return len(path) == len(endpoint) || endpoint[len(endpoint)-1] == '/' || path[len(endpoint)] == '/'
}

// hostOf is an :authority's host, lower case, without a port or a final
// dot, an IPv6 address in canonical form (ruleconfig.CanonicalIPv6, as a
// rule's host).
func hostOf(authority string) string {
	h := authority
	if strings.HasPrefix(h, "[") { // [v6]:port
		if i := strings.IndexByte(h, ']'); i > 0 {
			h = h[1:i]
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.Count(h, ":") == 1 {
		h = h[:i]
	}
	return ruleconfig.CanonicalIPv6(strings.ToLower(strings.TrimSuffix(h, ".")))
}

// errNoKey is a request without the rule's key; the filter answers 400.
type errNoKey struct{ want string }

func (e errNoKey) Error() string { return "no rate-limit key: send " + e.want }

// key returns the request's key under r (before the rule's name is added).
func (r *rule) key(req *request) (string, error) {
	switch {
	case r.KeyBy == "global":
		return "global", nil
	case r.KeyBy == "path":
		if req.canonical == "" {
			return "", errNoKey{"a path"}
		}
		return req.canonical, nil
	case r.KeyBy == "ip":
		return ipKey(req.sourceAddress())
	case r.KeyBy == "api_key":
		k := ""
		if auth := req.header("authorization"); len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
			k = strings.TrimSpace(auth[7:])
		}
		if k == "" {
			k = req.header("x-api-key")
		}
		if k == "" {
			return "", errNoKey{"an API key (Authorization: Bearer <key> or X-API-Key)"}
		}
		return apiKeyDigest(k), nil
	case strings.HasPrefix(r.KeyBy, "header:"):
		name := r.KeyBy[len("header:"):]
		if v := req.header(name); v != "" {
			return v, nil
		}
		return "", errNoKey{"the " + name + " header"}
	case strings.HasPrefix(r.KeyBy, "query:"):
		name := r.KeyBy[len("query:"):]
		if v := queryValue(req.path, name); v != "" {
			return v, nil
		}
		return "", errNoKey{"the " + name + " query parameter"}
	}
	return "", errors.New("rl-filter: unchecked key_by " + r.KeyBy)
}

// ipKey keys a client address ("ip:port" or "ip") as httplimit's default
// ClientIPKey does: an IPv4 client by its address, an IPv6 client by its
// /64 (what one host or subscriber usually holds, so rotating addresses
// within it gains nothing), an IPv4-mapped address as IPv4, zones dropped.
func ipKey(addr string) (string, error) {
	var ip netip.Addr
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		ip = ap.Addr()
	} else if ip, err = netip.ParseAddr(addr); err != nil {
		return "", errNoKey{"from an IP address (Envoy gave no source.address)"}
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.String(), nil
	}
	p, _ := ip.Prefix(64) // cannot fail: an IPv6 address without a zone
	return p.String(), nil
}

// apiKeyDigest is the key of an API key: "sha256:" and the first 32 hex
// digits of its SHA-256, as rl-wasm-host keeps it, so secrets never reach
// shared data or the decision API.
func apiKeyDigest(k string) string {
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// queryValue returns the first value of parameter name in path's query,
// percent-decoded ("" if absent or malformed).
func queryValue(path, name string) string {
	_, q, ok := strings.Cut(path, "?")
	if !ok {
		return ""
	}
	q, _, _ = strings.Cut(q, "#")
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(kv, "=")
		if k, ok := unescape(k); ok && k == name {
			v, ok := unescape(v)
			if !ok {
				return ""
			}
			return v
		}
	}
	return ""
}

// unescape decodes a query component: %XX and '+' for a space.
func unescape(s string) (string, bool) {
	if !strings.ContainsAny(s, "%+") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '+':
			b.WriteByte(' ')
		case '%':
			if i+2 >= len(s) {
				return "", false
			}
			n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return "", false
			}
			b.WriteByte(byte(n))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// errCost is a cost header that is not an integer in [0, core.MaxCost].
type errCost struct{ value string }

func (e errCost) Error() string {
	return fmt.Sprintf("cost %q is not an integer between 0 and %d", e.value, core.MaxCost)
}

// cost returns the cost of a request under r.
func (r *rule) cost(req *request) (int64, error) {
	if r.CostHeader == "" {
		return r.Cost, nil
	}
	v := req.header(r.CostHeader)
	if v == "" {
		return r.Cost, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 || n > core.MaxCost {
		return 0, errCost{ruleconfig.Clip(v, 32)}
	}
	return n, nil
}
