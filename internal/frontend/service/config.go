package service

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// Config is a validated configuration file: the rules and the proxy's
// upstream. Load it with LoadConfig or ParseConfig; a Service builds its
// rule set from it.
type Config struct {
	// Path is the file it was read from ("" when parsed from bytes).
	Path string
	// Upstream is the proxy's upstream: an http(s) URL, "demo" for the
	// built-in demo upstream, or "" for no proxy.
	Upstream string
	// TrustedProxies are the peers whose X-Forwarded-For is believed when
	// a rule keys by client IP.
	TrustedProxies []netip.Prefix
	// InlineLimits lets decision-API requests carry their own limits
	// instead of naming a rule (an admin operation). Default true.
	InlineLimits bool
	// MaxInlineLimits bounds the limits one inline request may carry
	// (field "max_inline_limits", 1 to 16). Default 4.
	MaxInlineLimits int
	// APITokens, if any, are the bearer tokens the decision API accepts
	// (field "api_tokens"). With none, the API is served only on its own
	// loopback listener, where every caller is an admin.
	APITokens []APIToken
	// UpstreamTimeout bounds the wait for the upstream's response header
	// (field "upstream_timeout"); a proxied request still waiting then is
	// answered 504. 0 means DefaultUpstreamTimeout.
	UpstreamTimeout time.Duration
	// IPv4Prefix and IPv6Prefix are the prefix lengths key_by: ip keys
	// clients by (fields "ipv4_prefix", 1 to 32, and "ipv6_prefix", 1 to
	// 128). 0 means 32 and 64: one key per IPv4 address and per IPv6 /64.
	IPv4Prefix, IPv6Prefix int
	// PartitionKeySecret keys the partition keys of the rules with
	// partition_key: true (pipeline.PartitionKey): the value of the
	// environment variable that the field "partition_key_secret_env"
	// names, read when the configuration is loaded, at least 16 bytes.
	// Never logged or shown.
	PartitionKeySecret []byte
	// PartitionKeySecretEnv is the name of that variable ("" for none).
	PartitionKeySecretEnv string
	// ProblemDetails chooses the body of the proxy's 429s and 503s (field
	// "problem_details": auto, json or text; default auto): RFC 9457
	// problem details when the client accepts JSON, always, or never.
	ProblemDetails pipeline.ProblemMode
	// Rules in file order.
	Rules []RuleSpec
}

// RuleSpec is one validated rule of a Config.
type RuleSpec struct {
	// Name is the rule's name in the decision API, metrics and keys:
	// the "name" field, else the endpoint.
	Name string
	// Endpoint, Host and Methods match proxied requests; a rule with none
	// of them is for the decision API only. Endpoint is "/" when only Host
	// or Methods are given.
	Endpoint string
	Host     string
	Methods  []string
	// Limits are decided together, all or nothing: validated, named, as
	// the engine compiles them (engine.Engine.Compile).
	Limits []ruleconfig.NamedLimit
	// KeyBy is where the proxy reads a request's key: exactly one place
	// (pipeline.Key).
	KeyBy ruleconfig.KeyBy
	// Cost is the cost of a proxied request, or the default when
	// CostHeader is absent from it. At least MinCost.
	Cost int64
	// MinCost is the least a proxied request (or a decision-API check
	// naming the rule) may cost; at least 1, the default. A cost header
	// asking for less is answered 400: only an explicit peek on the
	// decision API reads a key without charging it.
	MinCost int64
	// CostHeader, if set, names a request header carrying the cost (lower
	// case).
	CostHeader string
	// ResponseCostHeader, if set, names the upstream's response header
	// field or trailer carrying a proxied request's actual cost: the
	// proxy settles the difference from the cost taken
	// (pipeline.SettleDelta: at least MinCost, at most 2^40) after the
	// response, removes the field from what the client receives, and
	// forwards the request without a client's own field of that name.
	ResponseCostHeader string
	// FailOpen admits requests when the store fails; otherwise they are
	// answered 503.
	FailOpen bool
	// Shape makes the proxy hold an admitted request for its LeakyBucket
	// delay before forwarding it.
	Shape bool
	// Closest, QuotaUnit and PartitionKey choose what the RateLimit fields
	// say (fields "ratelimit_fields", "quota_unit", "partition_key"; see
	// ruleconfig.Spec).
	Closest      bool
	QuotaUnit    string
	PartitionKey bool
	// Overrides replace Limits for the keys they select (field
	// "overrides"; see OverrideSpec), in file order.
	Overrides []OverrideSpec
	// Global, if set, makes Limits one global limit divided among the
	// replicas by an RLQS server (field "global"; see GlobalSpec).
	Global *GlobalSpec
}

// Role is what a decision-API caller may do.
type Role uint8

const (
	// RoleCheck may check, peek and batch configured rules, and settle
	// debts on them: a settle whose actual cost is at least its estimate
	// (after the rule's min_cost), which only ever adds usage, and of at
	// most the key's smallest enforced limit, the most one check can take.
	RoleCheck Role = iota + 1
	// RoleAdmin may also reset keys, read the rules, decide inline
	// limits and settle refunds.
	RoleAdmin
	// RoleSettle may do what RoleCheck may, and also settle refunds on
	// configured rules: a settle whose actual cost is below its estimate
	// gives units back, so its holder is trusted, as with a reset, to
	// report the estimate its check took (a gateway settling the costs it
	// charged, such as the proxy-wasm filter in global mode). Its
	// estimate and actual are bounded as a check token's are.
	RoleSettle
)

func (r Role) String() string {
	switch r {
	case RoleCheck:
		return "check"
	case RoleAdmin:
		return "admin"
	case RoleSettle:
		return "settle"
	}
	return "none"
}

// mayRefund reports whether the role may settle a refund.
func (r Role) mayRefund() bool { return r == RoleSettle || r == RoleAdmin }

// APIToken is one bearer token of the decision API, kept as the SHA-256 of
// the token so the configuration file holds no secret:
//
//	api_tokens:
//	  - {name: gateway, role: check, sha256: 9f86d08...}   # printf %s "$TOKEN" | sha256sum
type APIToken struct {
	// Name identifies the token in logs; never the token itself.
	Name string
	// Role is what its holder may do.
	Role Role
	// SHA256 is the digest of the token.
	SHA256 [32]byte
}

// Proxied reports whether the rule matches proxied requests.
func (r *RuleSpec) Proxied() bool { return r.Endpoint != "" }

// Problem is one mistake in a configuration file: the rule, the field's
// path and what is wrong.
type Problem = ruleconfig.Problem

// ConfigError lists every mistake found in a configuration file
// (ruleconfig.ConfigError, which the rate limit service's configuration
// reports too).
type ConfigError = ruleconfig.ConfigError

// LoadConfig reads and validates a configuration file, YAML (.yaml, .yml)
// or JSON (.json) by its extension. Every mistake is reported in one
// *ConfigError naming the file, the rule and the field.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var format string
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		format = "yaml"
	case ".json":
		format = "json"
	default:
		return nil, &ConfigError{File: path, Problems: []Problem{{Message: "unknown extension: want .yaml, .yml or .json"}}}
	}
	return ParseConfig(path, format, data)
}

// ParseConfig validates a configuration in format "yaml" or "json"; name is
// used in error messages and as Config.Path.
func ParseConfig(name, format string, data []byte) (*Config, error) {
	fail := func(msg string) error { return &ConfigError{File: name, Problems: []Problem{{Message: msg}}} }
	switch format {
	case "yaml":
		var doc any
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return nil, fail("YAML: " + strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if doc == nil {
			return nil, fail("empty file: want a mapping with \"rules\" (or a list of rules)")
		}
		var err error
		if data, err = ruleconfig.AppendJSON(nil, doc); err != nil {
			return nil, fail("YAML: " + err.Error())
		}
	case "json":
	default:
		return nil, fmt.Errorf("config: unknown format %q", format)
	}
	var f fileJSON
	if ps := ruleconfig.Decode(data, &f); len(ps) > 0 {
		return nil, &ConfigError{File: name, Problems: ps}
	}
	cfg, ps := f.Validate(name)
	if len(ps) > 0 {
		return nil, &ConfigError{File: name, Problems: ps}
	}
	return cfg, nil
}

// fileJSON is a configuration file as written. Its fields' comments are
// the configuration reference (docs/reference/configuration.md, written
// by go run ./tests/docs/docgen): write them for users.
type fileJSON struct {
	ruleconfig.Fields
	// The proxy's upstream: `http://host:port[/base]`, `https://...`, or `demo` (a built-in echo).
	// Default: none, the proxy answers 404.
	Upstream ruleconfig.String `json:"upstream"`
	// Addresses or CIDR prefixes whose `X-Forwarded-For` `key_by: ip` believes. Default: none.
	TrustedProxies ruleconfig.List[ruleconfig.String] `json:"trusted_proxies"`
	// Allow decision-API calls that carry their own limits (admins only). Default: `true`.
	InlineLimits ruleconfig.Bool `json:"inline_limits"`
	// The most limits one such call may carry, 1 to 16. Default: `4`.
	MaxInlineLimits ruleconfig.Int `json:"max_inline_limits"`
	// The bearer tokens the decision API accepts. Without any, the API is served on a loopback listener only,
	// where every caller is an admin; with some, every API call needs `Authorization: Bearer <token>`.
	APITokens ruleconfig.List[tokenJSON] `json:"api_tokens"`
	// The longest wait for the upstream's response header; then 504. Keep `-write-timeout` above it. Default: `30s`.
	UpstreamTimeout ruleconfig.String `json:"upstream_timeout"`
	// `key_by: ip` keys IPv4 clients by this prefix length, 1 to 32. Default: `32`, one key per address.
	IPv4Prefix ruleconfig.Int `json:"ipv4_prefix"`
	// `key_by: ip` keys IPv6 clients by this prefix length, 1 to 128. Default: `64`, one key per /64.
	IPv6Prefix ruleconfig.Int `json:"ipv6_prefix"`
	// The environment variable holding the secret of `partition_key` rules, 16 bytes or more, read at each load,
	// never shown. Default: none.
	PKSecretEnv ruleconfig.String `json:"partition_key_secret_env"`
	// The proxy's 429 and 503 bodies: `auto` (RFC 9457 problem details when the client accepts JSON), `json`
	// (always) or `text` (never). Default: `auto`.
	ProblemDetails ruleconfig.String `json:"problem_details"`
	// The rules, in the order the proxy tries them; the file may also be a bare list of rules. Required.
	Rules ruleconfig.List[ruleJSON] `json:"rules"`
}

// tokenJSON is one of api_tokens as written.
type tokenJSON struct {
	ruleconfig.Fields
	// The token's name, in logs. Required.
	Name ruleconfig.String `json:"name"`
	// What the token may do: `check` (check, peek and batch the configured rules, settle debts), `settle` (also
	// settle refunds) or `admin` (also reset keys, read the rules, send inline limits). Required.
	Role ruleconfig.String `json:"role"`
	// The token's SHA-256 digest, 64 hex digits (`rl-wasm-host -hash-token` prints it); the token itself is never
	// written down. Required.
	SHA256 ruleconfig.String `json:"sha256"`
}

// ruleJSON is a rule as written: the shared fields and the service's own.
type ruleJSON struct {
	ruleconfig.Rule
	// Leaky bucket only: hold an admitted request for its delay before forwarding it. Default: `false`.
	Shape ruleconfig.Bool `json:"shape"`
	// The rule's limit as one global limit, divided among the replicas by an RLQS server
	// ([rlqs.md](../rlqs.md)); the rule needs `key_by: global` and one limit. Default: none.
	Global globalJSON `json:"global"`
}

// FileShape returns the type ParseConfig decodes a file into, its fields'
// comments written for users: the source of the configuration reference
// (tests/docs/docgen).
func FileShape() reflect.Type { return reflect.TypeFor[fileJSON]() }

// DefaultMaxInlineLimits is the default of Config.MaxInlineLimits.
const DefaultMaxInlineLimits = 4

// Validate checks the file and returns it as a Config read from path, or
// every problem it has.
func (f *fileJSON) Validate(path string) (*Config, []Problem) {
	cfg := &Config{Path: path, InlineLimits: true, MaxInlineLimits: DefaultMaxInlineLimits}
	c := &ruleconfig.Checker{}
	if !c.Object("", "a mapping with \"rules\" (or a list of rules)", &f.Fields) {
		return nil, c.Problems
	}
	if s, ok := c.String("upstream", f.Upstream); ok {
		cfg.Upstream = s
		if s != "" && s != "demo" {
			u, err := url.Parse(s)
			switch {
			case err != nil:
				c.Fail("upstream", "%v", err)
			case u.Scheme != "http" && u.Scheme != "https":
				c.Fail("upstream", "want an http:// or https:// URL or \"demo\", got %q", s)
			case u.Host == "":
				c.Fail("upstream", "no host in %q", s)
			}
		}
	}
	if c.Want("trusted_proxies", "a list of IPs or CIDR prefixes", f.TrustedProxies.Got) {
		for i, e := range f.TrustedProxies.Items {
			fld := fmt.Sprintf("trusted_proxies[%d]", i)
			s, ok := c.String(fld, e)
			if !ok {
				continue
			}
			if pfx, err := netip.ParsePrefix(s); err == nil {
				cfg.TrustedProxies = append(cfg.TrustedProxies, pfx.Masked())
			} else if a, err := netip.ParseAddr(s); err == nil {
				a = a.Unmap()
				cfg.TrustedProxies = append(cfg.TrustedProxies, netip.PrefixFrom(a, a.BitLen()))
			} else {
				c.Fail(fld, "%q is neither an IP address nor a CIDR prefix", s)
			}
		}
	}
	if s, ok := c.String("upstream_timeout", f.UpstreamTimeout); ok {
		if d, err := ruleconfig.ParseDuration(s); err != nil {
			c.Fail("upstream_timeout", "%v", err)
		} else {
			cfg.UpstreamTimeout = d
		}
	}
	prefix := func(field string, v ruleconfig.Int, bits int64, to *int) {
		if n, ok := c.Int(field, v); ok {
			if n < 1 || n > bits {
				c.Fail(field, "%d is outside [1, %d]", n, bits)
			} else {
				*to = int(n)
			}
		}
	}
	prefix("ipv4_prefix", f.IPv4Prefix, 32, &cfg.IPv4Prefix)
	prefix("ipv6_prefix", f.IPv6Prefix, 128, &cfg.IPv6Prefix)
	if b, ok := c.Bool("inline_limits", f.InlineLimits); ok {
		cfg.InlineLimits = b
	}
	if n, ok := c.Int("max_inline_limits", f.MaxInlineLimits); ok {
		if n < 1 || n > rl.MaxLimits {
			c.Fail("max_inline_limits", "%d is outside [1, %d]", n, rl.MaxLimits)
		}
		cfg.MaxInlineLimits = int(n)
	}
	if c.Want("api_tokens", "a list of {name, role, sha256}", f.APITokens.Got) {
		cfg.APITokens = checkTokens(c, f.APITokens.Items)
	}
	switch {
	case !f.Rules.Set:
		c.Fail("rules", "missing")
	case !c.Want("rules", "a list of rules", f.Rules.Got):
	case len(f.Rules.Items) == 0:
		c.Fail("rules", "empty: want at least one rule (a service without rules limits nothing)")
	}
	if v, ok := c.String("problem_details", f.ProblemDetails); ok {
		if m, ok := pipeline.ParseProblemMode(v); ok {
			cfg.ProblemDetails = m
		} else {
			c.Fail("problem_details", "%q: want %s (problem details when the client accepts JSON, always, or plain text always)",
				ruleconfig.Clip(v, 32), strings.Join(pipeline.ProblemModes(), ", "))
		}
	}
	if name, ok := c.String("partition_key_secret_env", f.PKSecretEnv); ok {
		cfg.PartitionKeySecretEnv = name
		v := os.Getenv(name)
		switch {
		case !ruleconfig.IsToken(name) || strings.Contains(name, "="):
			c.Fail("partition_key_secret_env", "%q is not the name of an environment variable", ruleconfig.Clip(name, 64))
		case len(v) < pipeline.MinPartitionKeySecret:
			// Never the value: it is a secret.
			c.Fail("partition_key_secret_env", "the environment variable %s holds %d bytes; want a secret of at least %d (e.g. openssl rand -hex 32)",
				name, len(v), pipeline.MinPartitionKeySecret)
		default:
			cfg.PartitionKeySecret = []byte(v)
		}
	}
	cfg.Rules = ruleconfig.CheckRules(c, f.Rules.Items, func(r *ruleJSON) (RuleSpec, string, bool) {
		s, ok := r.check(c, cfg.IPv4Prefix, cfg.IPv6Prefix)
		if s.PartitionKey && !f.PKSecretEnv.Set {
			c.Fail("partition_key", "needs a secret to key the hash: set partition_key_secret_env to the name of an environment variable holding at least %d random bytes",
				pipeline.MinPartitionKeySecret)
			ok = false
		}
		return s, s.Name, ok
	})
	checkGlobals(c, cfg.Rules)
	return cfg, c.Problems
}

// checkTokens validates api_tokens.
func checkTokens(c *ruleconfig.Checker, ts []tokenJSON) []APIToken {
	var out []APIToken
	names := map[string]bool{}
	digests := map[[32]byte]bool{}
	for i := range ts {
		tj := &ts[i]
		f := fmt.Sprintf("api_tokens[%d]", i)
		if !c.Object(f, "a mapping {name, role, sha256}", &tj.Fields) {
			continue
		}
		var t APIToken
		if s, ok := c.String(f+".name", tj.Name); ok {
			if err := ruleconfig.CheckName(s); err != nil {
				c.Fail(f+".name", "%v", err)
			} else if names[s] {
				c.Fail(f+".name", "%q names two tokens", s)
			}
			names[s] = true
			t.Name = s
		}
		if s, ok := c.String(f+".role", tj.Role); ok {
			switch s {
			case "admin":
				t.Role = RoleAdmin
			case "check":
				t.Role = RoleCheck
			case "settle":
				t.Role = RoleSettle
			default:
				c.Fail(f+".role", "%q: want admin, settle or check", ruleconfig.Clip(s, 32))
			}
		}
		if s, ok := c.String(f+".sha256", tj.SHA256); ok {
			b, err := hex.DecodeString(strings.TrimPrefix(s, "sha256:"))
			if err != nil || len(b) != 32 {
				c.Fail(f+".sha256", "want the 64 hex digits of the token's SHA-256 (printf %%s \"$TOKEN\" | sha256sum), not the token itself")
			} else {
				copy(t.SHA256[:], b)
				if digests[t.SHA256] {
					c.Fail(f+".sha256", "the same token is listed twice")
				}
				digests[t.SHA256] = true
			}
		}
		for _, k := range []struct {
			name string
			set  bool
		}{{"name", tj.Name.Set}, {"role", tj.Role.Set}, {"sha256", tj.SHA256.Set}} {
			if !k.set {
				c.Fail(f+"."+k.name, "missing")
			}
		}
		out = append(out, t)
	}
	return out
}

// check validates the rule: the shared fields, then the service's.
func (r *ruleJSON) check(c *ruleconfig.Checker, ip4, ip6 int) (RuleSpec, bool) {
	before := len(c.Problems)
	s, _ := r.Check(c, ruleconfig.Options{IPv4Prefix: ip4, IPv6Prefix: ip6})
	spec := RuleSpec{
		Name: s.Name, Endpoint: s.Endpoint, Host: s.Host, Methods: s.Methods,
		KeyBy: s.KeyBy, Cost: s.Cost, MinCost: s.MinCost, CostHeader: s.CostHeader, ResponseCostHeader: s.ResponseCostHeader,
		FailOpen: s.FailOpen, Closest: s.Closest, QuotaUnit: s.QuotaUnit, PartitionKey: s.PartitionKey,
	}
	spec.Limits, spec.Overrides = s.Limits, s.Overrides
	if !r.Fields.Set || r.Got != "" {
		return spec, false
	}
	if r.Name.OK() && slices.Contains(ruleconfig.ReservedNames(), s.Name) {
		c.Fail("name", "%q is reserved: it is a namespace of stored keys (%q: the decision API's inline limits; %q: the gRPC rate limit service's domains)",
			s.Name, ruleconfig.InlineNamespace, ruleconfig.RLSNamespace)
	}
	if e, ok := r.Endpoint.V, r.Endpoint.OK(); ok && strings.HasPrefix(e, "/") && !strings.ContainsAny(e, "?#") {
		if cp, err := pipeline.CanonicalPath(e); err != nil {
			c.Fail("endpoint", "%q: %v", e, err)
		} else if cp != e || strings.Contains(e, ";") {
			c.Fail("endpoint", "%q is not in canonical form (no \"..\", \".\", \"//\", \";\" or encoded unreserved characters): requests are matched after cleaning their path, so this endpoint could never match; want %q", e, pipeline.MatchPath(cp))
		}
	}
	if b, ok := c.Bool("shape", r.Shape); ok && b {
		spec.Shape = true
		if len(spec.Limits) > 0 && !slices.ContainsFunc(spec.Limits, func(l ruleconfig.NamedLimit) bool { return l.Algorithm == core.LeakyBucket }) {
			c.Fail("shape", "only a leaky bucket delays admitted requests, and this rule has none (strategy: leaky)")
		}
		if spec.Endpoint == "" {
			c.Fail("shape", "shaping holds proxied requests, and this rule has no endpoint")
		}
	}
	r.checkGlobal(c, &spec)
	return spec, len(c.Problems) == before
}
