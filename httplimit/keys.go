package httplimit

import (
	"errors"
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

// ClientIP keys by the client's IP address. The address is the peer's
// (RemoteAddr) unless the peer is a trusted proxy: then X-Forwarded-For is
// read from the right, skipping trusted proxies, and the first untrusted
// address is the client. With no trusted proxies X-Forwarded-For is ignored,
// since any client can forge it.
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	return func(r *http.Request) (string, error) {
		ip, err := clientIP(r, trusted)
		if err != nil {
			return "", err
		}
		return ip.String(), nil
	}
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
	peer = peer.Unmap()
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
			a = a.Unmap()
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

// Header keys by the value of a request header.
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

// Query keys by a URL query parameter.
func Query(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if v := r.URL.Query().Get(name); v != "" {
			return v, nil
		}
		return "", ErrNoKey
	}
}
