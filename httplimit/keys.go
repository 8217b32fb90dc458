package httplimit

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// KeyFunc returns the rate-limit key of a request. An error means the
// request carries no usable key; the middleware answers 400 (or serves it
// unlimited with Config.AllowMissingKey).
type KeyFunc func(r *http.Request) (string, error)

// ErrNoKey is returned by the KeyFuncs of this package when the request
// lacks what they look for.
var ErrNoKey = errors.New("httplimit: request carries no rate-limit key")

// ClientIP keys by the client's network: its IPv4 address, or the /64 of
// its IPv6 address (one host usually holds a whole /64, so keying IPv6 per
// address would let a client take a fresh key for every request). It is
// ClientIPKey with the default prefixes; see there for how the client is
// found.
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	k, _ := ClientIPKey(IPKeyConfig{TrustedProxies: trusted}) // the defaults are valid
	return k
}

// IPKeyConfig configures ClientIPKey.
type IPKeyConfig struct {
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// IPv4Prefix is the prefix length IPv4 clients are keyed by, 1 to 32;
	// 0 means 32 (one key per address).
	IPv4Prefix int
	// IPv6Prefix is the prefix length IPv6 clients are keyed by, 1 to 128;
	// 0 means 64 (one key per /64, what a single host or subscriber
	// usually holds).
	IPv6Prefix int
}

// Default prefix lengths of IPKeyConfig.
const (
	DefaultIPv4Prefix = 32
	DefaultIPv6Prefix = 64
)

// ClientIPKey keys by the client's network. The client is the peer
// (RemoteAddr) unless the peer is a trusted proxy: then X-Forwarded-For is
// read from the right, skipping trusted proxies, and the first untrusted
// address is the client. With no trusted proxies X-Forwarded-For is
// ignored, since any client can forge it. IPv4-mapped IPv6 addresses
// (::ffff:192.0.2.1) are IPv4, and IPv6 zones ("%eth0") are dropped.
//
// The key is the address when the prefix is its full length
// ("192.0.2.1"), else the masked prefix ("2001:db8:1:2::/64"). It fails
// with an error for a prefix length out of range.
func ClientIPKey(cfg IPKeyConfig) (KeyFunc, error) {
	v4, v6 := cfg.IPv4Prefix, cfg.IPv6Prefix
	if v4 == 0 {
		v4 = DefaultIPv4Prefix
	}
	if v6 == 0 {
		v6 = DefaultIPv6Prefix
	}
	if v4 < 1 || v4 > 32 {
		return nil, fmt.Errorf("httplimit: IPv4 prefix length %d is outside [1, 32]", cfg.IPv4Prefix)
	}
	if v6 < 1 || v6 > 128 {
		return nil, fmt.Errorf("httplimit: IPv6 prefix length %d is outside [1, 128]", cfg.IPv6Prefix)
	}
	trusted := cfg.TrustedProxies
	return func(r *http.Request) (string, error) {
		ip, err := clientIP(r, trusted)
		if err != nil {
			return "", err
		}
		bits := v6
		if ip.Is4() {
			bits = v4
		}
		if bits == ip.BitLen() {
			return ip.String(), nil
		}
		p, err := ip.Prefix(bits)
		if err != nil { // not reached: bits is in range and the zone is gone
			return "", ErrNoKey
		}
		return p.String(), nil
	}, nil
}

func clientIP(r *http.Request, trusted []netip.Prefix) (netip.Addr, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, ErrNoKey
	}
	peer = peer.Unmap().WithZone("")
	if !isTrusted(peer, trusted) {
		return peer, nil
	}
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				return peer, nil // a malformed hop: trust nothing beyond it
			}
			a = a.Unmap().WithZone("")
			if !isTrusted(a, trusted) {
				return a, nil
			}
			peer = a
		}
	}
	return peer, nil
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Header keys by the value of a request header. Such a key is only as
// trustworthy as whatever sets the header: a client may send any value, and
// a fresh value is a fresh quota, so a header a client controls bounds
// nothing. Key by a header only when a component you trust in front of this
// one (an authenticating gateway) sets it and drops the client's own; else
// key by ClientIP or by an API key you verify.
func Header(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", ErrNoKey
	}
}

// APIKey keys by an API key: the token of "Authorization: Bearer <key>", or
// else the X-API-Key header.
func APIKey() KeyFunc {
	return func(r *http.Request) (string, error) {
		if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			return strings.TrimSpace(a[7:]), nil
		}
		if v := r.Header.Get("X-API-Key"); v != "" {
			return v, nil
		}
		return "", ErrNoKey
	}
}

// Query keys by a URL query parameter. As with Header, the client chooses
// the value: use it only for a parameter whose value is checked elsewhere.
func Query(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if v := r.URL.Query().Get(name); v != "" {
			return v, nil
		}
		return "", ErrNoKey
	}
}
