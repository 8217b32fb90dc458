package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
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
	k := pipeline.IPKey{TrustedProxies: cfg.TrustedProxies, IPv4Prefix: v4, IPv6Prefix: v6}
	return func(r *http.Request) (string, error) {
		key, ok := k.Key(r.RemoteAddr, r.Header.Values("X-Forwarded-For"))
		if !ok {
			return "", ErrNoKey
		}
		return key, nil
	}, nil
}

// Header keys by the value of a request header, by the rule rl-wasm-host's
// key_by: header follows (pipeline.Key): the field must be given once, in
// one spelling ('-' and '_' alike: X_User is X-User to CGI-style
// upstreams), and not be listed in Connection; else the request has no key
// (ErrNoKey). Such a key is only as trustworthy as
// whatever sets the header: a client may send any value, and a fresh value
// is a fresh quota, so a header a client controls bounds nothing. Key by a
// header only when a component you trust in front of this one (an
// authenticating gateway) sets it and drops the client's own; else key by
// ClientIP or by an API key you verify.
func Header(name string) KeyFunc {
	return sourceKey(ruleconfig.KeyBy{Kind: ruleconfig.KeyHeader, Name: name})
}

// APIKey keys by an API key: the token of "Authorization: Bearer <key>",
// and nothing else. It used to fall back to X-API-Key, which let a client
// send its real key where the application reads it and a fresh decoy
// bearer with every request, a fresh quota each time: a key function reads
// exactly the one place the application authenticates. Use
// APIKeyHeader("X-API-Key") when that is X-API-Key. A request with two
// Authorization fields, or one its Connection field lists (a proxy would
// drop it before the application), has no key (ErrNoKey).
//
// The key is the token's digest, "sha256:" and 32 hex digits
// (pipeline.APIKeyDigest, as rl-wasm-host keeps it), never the token: it
// reaches the store (PostgreSQL's rows), Decision.Key and errors.
func APIKey() KeyFunc { return APIKeyHeader(ruleconfig.BearerHeader) }

// APIKeyHeader keys by an API key in the header field name: the token of
// "Bearer <key>" for Authorization, else the field's whole value, kept as
// its digest as APIKey's is. The field must be given once, in one spelling
// ('-' and '_' alike), and not be listed in Connection.
func APIKeyHeader(name string) KeyFunc {
	if strings.EqualFold(name, ruleconfig.BearerHeader) {
		name = ruleconfig.BearerHeader
	}
	return sourceKey(ruleconfig.KeyBy{Kind: ruleconfig.KeyAPIKey, Name: name})
}

// Query keys by a URL query parameter, given once. As with Header, the
// client chooses the value: use it only for a parameter whose value is
// checked elsewhere.
func Query(name string) KeyFunc {
	return sourceKey(ruleconfig.KeyBy{Kind: ruleconfig.KeyQuery, Name: name})
}

// sourceKey reads the key source by with pipeline.Key, the rule every front
// end follows; a request without a usable key is ErrNoKey, saying why.
func sourceKey(by ruleconfig.KeyBy) KeyFunc {
	return func(r *http.Request) (string, error) {
		req := &pipeline.Request{Query: r.URL.RawQuery, Header: r.Header}
		k, err := pipeline.Key(by, pipeline.IPKey{}, req, "")
		if err != nil {
			var ke *pipeline.KeyError
			if errors.As(err, &ke) {
				return "", fmt.Errorf("%w: %s", ErrNoKey, ke.Reason)
			}
			return "", ErrNoKey
		}
		return k, nil
	}
}
