package pipeline

import (
	"net/netip"
	"strings"

	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// HostError is a Host (or :authority) that is not a valid host[:port]; the
// front ends answer 400 and never forward it.
type HostError struct {
	// Host is the value, clipped to 64 bytes.
	Host   string
	Reason string
}

func (e *HostError) Error() string {
	return "invalid Host " + quote(e.Host) + ": " + e.Reason
}

// CanonicalHost returns the host of a Host header or :authority in the form
// rules' hosts are compared in: lower case, without the port, the IPv6
// brackets or one trailing dot, an IPv6 address in netip's canonical form
// ("[2001:DB8::0001]:80" is "2001:db8::1"). "" is "" (no host).
//
// It accepts exactly host[:port] (RFC 9110 §7.2): a DNS name of letters,
// digits, "-" and "_" in dot-separated labels of 1 to 63 bytes (253 in
// all), an IPv4 address, or an IPv6 address in brackets without a zone;
// the port 1 to 5 digits, at most 65535. Anything else ("a:80:80",
// "a,evil", "a%00", "a b", a bare IPv6 address, an empty port) is a
// *HostError: it would match no host rule, and an upstream that believes
// X-Forwarded-Host would take it for something else.
func CanonicalHost(h string) (string, error) {
	if h == "" {
		return "", nil
	}
	bad := func(reason string) (string, error) {
		return "", &HostError{Host: ruleconfig.Clip(h, 64), Reason: reason}
	}
	host, port := h, ""
	if h[0] == '[' {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return bad("an IPv6 address without its closing \"]\"")
		}
		a, err := netip.ParseAddr(h[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return bad("not an IPv6 address in brackets")
		}
		rest := h[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return bad("text after the IPv6 address")
			}
			if !validPort(rest[1:]) {
				return bad("the port is not 1 to 5 digits up to 65535")
			}
		}
		return a.String(), nil
	}
	if i := strings.IndexByte(h, ':'); i >= 0 {
		host, port = h[:i], h[i+1:]
		if !validPort(port) {
			return bad("the port is not 1 to 5 digits up to 65535 (or there are two)")
		}
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > 253 {
		return bad("want a host name of 1 to 253 bytes")
	}
	label := 0
	for i := 0; i < len(host); i++ {
		c := host[i]
		switch {
		case c == '.':
			if label == 0 {
				return bad("an empty label")
			}
			label = 0
			continue
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		case 'A' <= c && c <= 'Z':
		default:
			return bad("a byte that is not a letter, digit, \"-\", \"_\" or \".\"")
		}
		if label++; label > 63 {
			return bad("a label longer than 63 bytes")
		}
	}
	if label == 0 {
		return bad("an empty label")
	}
	return lowerASCII(host), nil
}

func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n <= 65535
}

// RuleHost is a rule's host (ruleconfig.CheckHost accepted it) in the form
// CanonicalHost gives a request's, a "*." prefix kept.
func RuleHost(h string) string {
	wild := strings.HasPrefix(h, "*.")
	if wild {
		h = h[2:]
	}
	h = ruleconfig.CanonicalIPv6(lowerASCII(strings.TrimSuffix(h, ".")))
	if wild {
		return "*." + h
	}
	return h
}

// quote quotes s for a message.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			b.WriteString(`\x`)
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
