package service

import (
	"bytes"
	"encoding/hex"
	"encoding/json"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/util/redact"
)

// NormalizedJSON is a configuration in canonical form: every default
// written out, strategies, key sources, windows and prefixes in their
// canonical spelling, each limit named. It is itself a configuration file
// (JSON) that loads to the same configuration, except that an upstream
// URL's password is shown redacted. rl-wasm-host -check-config prints it.
type NormalizedJSON struct {
	Upstream              string          `json:"upstream,omitempty"`
	TrustedProxies        []string        `json:"trusted_proxies"`
	IPv4Prefix            int             `json:"ipv4_prefix"`
	IPv6Prefix            int             `json:"ipv6_prefix"`
	UpstreamTimeout       string          `json:"upstream_timeout"`
	InlineLimits          bool            `json:"inline_limits"`
	MaxInlineLimits       int             `json:"max_inline_limits"`
	ProblemDetails        string          `json:"problem_details"`
	PartitionKeySecretEnv string          `json:"partition_key_secret_env,omitempty"`
	APITokens             []TokenSpecJSON `json:"api_tokens,omitempty"`
	Rules                 []RuleJSON      `json:"rules"`
}

// TokenSpecJSON is one of api_tokens in canonical form (the token's
// digest, never a token).
type TokenSpecJSON struct {
	Name   string `json:"name"`
	Role   string `json:"role"`
	SHA256 string `json:"sha256"`
}

// Normalized returns c in canonical form.
func (c *Config) Normalized() (NormalizedJSON, error) {
	n := NormalizedJSON{Upstream: redact.String(c.Upstream), TrustedProxies: []string{}, IPv4Prefix: 32, IPv6Prefix: 64,
		UpstreamTimeout: rl.FormatWindow(DefaultUpstreamTimeout), InlineLimits: c.InlineLimits,
		MaxInlineLimits: c.MaxInlineLimits, ProblemDetails: c.ProblemDetails.String(),
		PartitionKeySecretEnv: c.PartitionKeySecretEnv, Rules: []RuleJSON{}}
	for _, p := range c.TrustedProxies {
		n.TrustedProxies = append(n.TrustedProxies, p.String())
	}
	if c.IPv4Prefix != 0 {
		n.IPv4Prefix = c.IPv4Prefix
	}
	if c.IPv6Prefix != 0 {
		n.IPv6Prefix = c.IPv6Prefix
	}
	if c.UpstreamTimeout != 0 {
		n.UpstreamTimeout = rl.FormatWindow(c.UpstreamTimeout)
	}
	for _, t := range c.APITokens {
		n.APITokens = append(n.APITokens, TokenSpecJSON{Name: t.Name, Role: t.Role.String(), SHA256: hex.EncodeToString(t.SHA256[:])})
	}
	for i := range c.Rules {
		p, err := engine.Policy(c.Rules[i].Limits)
		if err != nil { // not reached: the configuration was validated
			return NormalizedJSON{}, err
		}
		n.Rules = append(n.Rules, *describeRule(&rule{spec: c.Rules[i], policy: p}))
	}
	return n, nil
}

// MarshalNormalized is c's canonical form as indented JSON.
func (c *Config) MarshalNormalized() ([]byte, error) {
	n, err := c.Normalized()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
