package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"

	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// Request is what the pipeline reads of a request. A front end's adapter
// fills it from its own form: a *http.Request, proxy-wasm's header pairs.
type Request struct {
	// Method, as sent.
	Method string
	// Host is the Host header or :authority, as sent.
	Host string
	// Path is the escaped path without its query.
	Path string
	// Query is the raw query, without "?" ("" if none).
	Query string
	// Header gives every value of a header field, in order (nil for
	// none): a net/http Header as it is (which takes no allocation), or
	// a HeaderFunc.
	Header Headers
	// Peer is the client's address as the front end knows it, "ip:port"
	// or "ip": the TCP peer (net/http's RemoteAddr), or Envoy's
	// source.address, which the connection manager has already resolved
	// through X-Forwarded-For by its own trust settings.
	Peer string
}

// Headers reads a request's header fields: Values returns every value of
// the field name, in order; name is in lower case, and any case must
// work. net/http's Header is one.
type Headers interface {
	Values(name string) []string
}

// HeaderFunc is a function that reads header fields as Headers.Values
// does, as a Headers (a front end's own form: proxy-wasm's header pairs).
type HeaderFunc func(name string) []string

// Values returns f(name).
func (f HeaderFunc) Values(name string) []string { return f(name) }

// KeyError is a request without a usable key under its rule's key source:
// absent, given twice, or hidden from the upstream. Front ends answer 400.
type KeyError struct {
	By     ruleconfig.KeyBy
	Reason string
}

func (e *KeyError) Error() string {
	return "no rate-limit key (" + e.By.String() + "): " + e.Reason
}

// IPKey keys clients by their network. Its zero value keys by the peer,
// IPv4 per address and IPv6 per /64.
type IPKey struct {
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// IPv4Prefix and IPv6Prefix are the prefix lengths clients are keyed
	// by; 0 means 32 and 64.
	IPv4Prefix, IPv6Prefix int
}

// Check reports a prefix length out of range.
func (c IPKey) Check() error {
	if c.IPv4Prefix < 0 || c.IPv4Prefix > 32 {
		return fmt.Errorf("IPv4 prefix length %d is outside [1, 32]", c.IPv4Prefix)
	}
	if c.IPv6Prefix < 0 || c.IPv6Prefix > 128 {
		return fmt.Errorf("IPv6 prefix length %d is outside [1, 128]", c.IPv6Prefix)
	}
	return nil
}

// Key returns the key of a client at peer ("ip:port" or "ip") whose
// request carried the X-Forwarded-For values xff. The client is the peer
// unless the peer is a trusted proxy: then X-Forwarded-For is read from the
// right, skipping trusted proxies, and the first untrusted address is the
// client (a malformed hop ends the walk). IPv4-mapped IPv6 addresses are
// IPv4 and zones are dropped. The key is the address when the prefix is its
// full length ("192.0.2.1"), else the masked prefix ("2001:db8:1:2::/64").
// ok is false when peer is not an address.
func (c IPKey) Key(peer string, xff []string) (key string, ok bool) {
	ip, ok := c.client(peer, xff)
	if !ok {
		return "", false
	}
	bits := c.IPv6Prefix
	if bits == 0 {
		bits = 64
	}
	if ip.Is4() {
		if bits = c.IPv4Prefix; bits == 0 {
			bits = 32
		}
	}
	if bits == ip.BitLen() {
		return ip.String(), true
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		return "", false
	}
	return p.String(), true
}

func (c IPKey) client(peer string, xff []string) (netip.Addr, bool) {
	a, ok := parseAddr(peer)
	if !ok {
		return netip.Addr{}, false
	}
	if !c.trusted(a) {
		return a, true
	}
	for i := len(xff) - 1; i >= 0; i-- {
		parts := strings.Split(xff[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			h, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				return a, true // a malformed hop: trust nothing beyond it
			}
			h = h.Unmap().WithZone("")
			if !c.trusted(h) {
				return h, true
			}
			a = h
		}
	}
	return a, true
}

func (c IPKey) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseAddr parses "ip:port", "[v6]:port" or "ip".
func parseAddr(s string) (netip.Addr, bool) {
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a = ap.Addr()
	} else if a, err = netip.ParseAddr(s); err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// Key returns r's key under the key source by, before the rule's name is
// added: the client's network (ip), a digest of the API key (api_key), the
// header's or query parameter's value, the matched path (path: match is
// MatchPath's form) or "global".
//
// A key source reads exactly one place. It is a *KeyError (400) when that
// place is absent or empty, given more than once (a decoy beside the real
// value: which one an upstream reads is its own business), or, for a
// header, listed in the request's Connection field (a proxy drops such a
// field before the upstream: a decoy credential the upstream never sees).
// A header is one field in every spelling that differs only in '-' and
// '_' (SameField): CGI-style upstreams (PHP, WSGI, Rack) read X-API-Key and
// X_API_Key both as HTTP_X_API_KEY, so a value in each is a field given
// twice. Nothing falls back to another place.
func Key(by ruleconfig.KeyBy, ip IPKey, r *Request, match string) (string, error) {
	fail := func(reason string) (string, error) { return "", &KeyError{By: by, Reason: reason} }
	switch by.Kind {
	case ruleconfig.KeyGlobal:
		return "global", nil
	case ruleconfig.KeyPath:
		if match == "" {
			return fail(by.Hint())
		}
		return match, nil
	case ruleconfig.KeyIP:
		k, ok := ip.Key(r.Peer, r.header("x-forwarded-for"))
		if !ok {
			return fail(by.Hint())
		}
		return k, nil
	case ruleconfig.KeyAPIKey, ruleconfig.KeyHeader:
		v, reason := r.one(by.Name)
		switch reason {
		case "":
		case "absent":
			return fail(by.Hint())
		default:
			return fail(reason + ": " + by.Hint())
		}
		if by.Kind == ruleconfig.KeyHeader {
			return v, nil
		}
		if by.Name == ruleconfig.BearerHeader {
			scheme, tok, _ := strings.Cut(v, " ")
			if !strings.EqualFold(scheme, "Bearer") {
				return fail("not a bearer token: " + by.Hint())
			}
			v = tok
		}
		if v = strings.TrimSpace(v); v == "" {
			return fail("empty: " + by.Hint())
		}
		return APIKeyDigest(v), nil
	case ruleconfig.KeyQuery:
		v, n, ok := queryValue(r.Query, by.Name)
		switch {
		case !ok:
			return fail("malformed query: " + by.Hint())
		case n > 1:
			return fail("given more than once: " + by.Hint())
		case v == "":
			return fail(by.Hint())
		}
		return v, nil
	}
	return fail("no key source")
}

func (r *Request) header(name string) []string {
	if r.Header == nil {
		return nil
	}
	return r.Header.Values(name)
}

// one returns the one non-empty value of header name, in any of its
// spellings (FieldSpellings), or why there is none.
func (r *Request) one(name string) (string, string) {
	names := FieldSpellings(name)
	if names == nil {
		return "", fmt.Sprintf("the field's name has more than %d '-' or '_'", ruleconfig.MaxFieldSeparators)
	}
	var vs []string
	spelled := 0
	for _, n := range names {
		if v := r.header(n); len(v) > 0 {
			vs = append(vs, v...)
			spelled++
		}
	}
	switch {
	case len(vs) == 0 || len(vs) == 1 && vs[0] == "":
		return "", "absent"
	case spelled > 1:
		return "", "given in two spellings ('-' and '_' are one to CGI-style upstreams)"
	case len(vs) > 1:
		return "", "given more than once"
	}
	for _, c := range r.header("connection") {
		for _, f := range strings.Split(c, ",") {
			if SameField(strings.TrimSpace(f), name) {
				return "", "listed in Connection (the upstream would not see it)"
			}
		}
	}
	return vs[0], ""
}

// SameField reports whether two header field names are one field to some
// upstream: equal ignoring ASCII case and treating '-' and '_' alike (PHP,
// WSGI and Rack turn both into '_': X-API-Key and X_API_Key are
// HTTP_X_API_KEY).
func SameField(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := foldField(a[i]), foldField(b[i])
		if x != y {
			return false
		}
	}
	return true
}

func foldField(c byte) byte {
	switch {
	case c == '_':
		return '-'
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	}
	return c
}

// FieldSpellings returns every spelling of a header field name that
// SameField takes for it, name itself first: each '-' and '_' either way,
// 2^n names for n of them (case is left to Request.Header, which ignores
// it). nil when n is above ruleconfig.MaxFieldSeparators.
func FieldSpellings(name string) []string {
	var seps []int
	for i := 0; i < len(name); i++ {
		if name[i] == '-' || name[i] == '_' {
			seps = append(seps, i)
		}
	}
	if len(seps) > ruleconfig.MaxFieldSeparators {
		return nil
	}
	out := make([]string, 0, 1<<len(seps))
	b := []byte(name)
	for m := 0; m < 1<<len(seps); m++ {
		for j, i := range seps {
			if m&(1<<j) == 0 {
				b[i] = name[i]
			} else if name[i] == '-' {
				b[i] = '_'
			} else {
				b[i] = '-'
			}
		}
		out = append(out, string(b))
	}
	return out
}

// MaxStoredKey is the longest key rl-wasm-host's stores take, in bytes,
// counted as they keep it, "<base>:<key>" (rl.DefaultMaxKeyLength, which
// rl-wasm-host's limiters use).
const MaxStoredKey = 256

// StoredKeyProblem says why rl-wasm-host would refuse key under the base
// key base (a rule's name, or a namespace such as "inline"), or is "": a
// key must be 1 to MaxStoredKey bytes with "<base>:" counted, printable
// ASCII without spaces, as rl.Limiter.CheckKey and the decision API check
// it. A front end that hands a key to rl-wasm-host by a rule's name (the
// filter's global.rule) refuses such a key itself (400), as rl-wasm-host's
// proxy does.
func StoredKeyProblem(base, key string) string {
	if key == "" {
		return "empty"
	}
	if n := len(base) + 1 + len(key); n > MaxStoredKey {
		return fmt.Sprintf("%d bytes (%d with the rule's name %q), longer than %d", len(key), n, base, MaxStoredKey)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return fmt.Sprintf("byte %#02x at %d is not printable ASCII (or is a space)", c, i)
		}
	}
	return ""
}

// APIKeyDigest is the key under which rules with key_by: api_key keep an
// API key's state: "sha256:" and the first 32 hex digits (128 bits) of its
// SHA-256, so secrets never reach a store (or PostgreSQL's rows and logs,
// or the filter's shared data) and tokens of any length make valid keys.
// Send it as "key" to decide or reset the same key through the decision
// API.
func APIKeyDigest(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// queryValue returns the value of parameter name in a raw query
// (percent-decoded, "+" a space), how many times it is given, and false if
// an occurrence is malformed. Parameters are separated by "&" only (not
// ";", as net/url since Go 1.17).
func queryValue(q, name string) (v string, n int, ok bool) {
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, val, _ := strings.Cut(kv, "=")
		k, kok := unescapeQuery(k)
		if !kok {
			continue // not this parameter, as far as anyone can tell
		}
		if k != name {
			continue
		}
		dv, vok := unescapeQuery(val)
		if !vok {
			return "", n, false
		}
		if n++; n == 1 {
			v = dv
		}
	}
	return v, n, true
}

// unescapeQuery decodes a query component: %XX and "+" for a space.
func unescapeQuery(s string) (string, bool) {
	if !strings.ContainsAny(s, "%+") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '+':
			b.WriteByte(' ')
		case '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return "", false
			}
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
