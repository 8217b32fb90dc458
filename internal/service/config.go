package service

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
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
	// Limits are decided together, all or nothing.
	Limits []rl.Limit
	// KeyBy is how the proxy keys a request: "ip", "api_key",
	// "header:<name>", "query:<name>" or "global".
	KeyBy string
	// Cost is the cost of a proxied request, or the default when
	// CostHeader is absent from it. At least MinCost.
	Cost int64
	// MinCost is the least a proxied request (or a decision-API check
	// naming the rule) may cost; at least 1, the default. A cost header
	// asking for less is answered 400: only an explicit peek on the
	// decision API reads a key without charging it.
	MinCost int64
	// CostHeader, if set, names a request header carrying the cost.
	CostHeader string
	// FailOpen admits requests when the store fails; otherwise they are
	// answered 503.
	FailOpen bool
	// Shape makes the proxy hold an admitted request for its LeakyBucket
	// delay before forwarding it.
	Shape bool
}

// Role is what a decision-API caller may do.
type Role uint8

const (
	// RoleCheck may check, peek and batch configured rules.
	RoleCheck Role = iota + 1
	// RoleAdmin may also reset keys, read the rules and decide inline
	// limits.
	RoleAdmin
)

func (r Role) String() string {
	switch r {
	case RoleCheck:
		return "check"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

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

// Problem is one mistake in a configuration file.
type Problem struct {
	// Rule locates the rule ("rules[2] \"pay\""); "" for top-level fields.
	Rule string
	// Field is the field's path within the rule or file ("window",
	// "limits[1].strategy").
	Field   string
	Message string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Rule != "" {
		b.WriteString(p.Rule)
		b.WriteString(": ")
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// ConfigError lists every mistake found in a configuration file.
type ConfigError struct {
	File     string
	Problems []Problem
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config %s: %d problem", e.File, len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(e.File)
		b.WriteString(": ")
		b.WriteString(p.String())
	}
	return b.String()
}

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
	var doc any
	switch format {
	case "yaml":
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return nil, &ConfigError{File: name, Problems: []Problem{{Message: "YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}}
		}
	case "json":
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return nil, &ConfigError{File: name, Problems: []Problem{{Message: "JSON: " + jsonErr(data, err)}}}
		}
		if dec.More() {
			return nil, &ConfigError{File: name, Problems: []Problem{{Message: "JSON: data after the top-level value"}}}
		}
		if msg := jsonDuplicateKey(data); msg != "" {
			return nil, &ConfigError{File: name, Problems: []Problem{{Message: "JSON: " + msg}}}
		}
	default:
		return nil, fmt.Errorf("config: unknown format %q", format)
	}
	p := &parser{cfg: &Config{Path: name, InlineLimits: true, MaxInlineLimits: DefaultMaxInlineLimits}}
	p.file(doc)
	if len(p.problems) > 0 {
		return nil, &ConfigError{File: name, Problems: p.problems}
	}
	return p.cfg, nil
}

// jsonDuplicateKey finds a key given twice in one JSON object (which
// encoding/json silently resolves to the last) and describes it, or "".
func jsonDuplicateKey(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		obj  bool
		seen map[string]bool
		key  bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "" // syntax errors are reported by Decode
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.key {
			if k, ok := tok.(string); ok {
				if top.seen[k] {
					line := 1 + bytes.Count(data[:min(int(dec.InputOffset()), len(data))], []byte("\n"))
					return fmt.Sprintf("line %d: key %q given twice in one object", line, k)
				}
				top.seen[k] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, seen: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			return ""
		}
		if top := stack[len(stack)-1]; top.obj {
			top.key = true // a value ended: a key comes next
		}
	}
}

// jsonErr adds a line number to a JSON syntax error.
func jsonErr(data []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
		return fmt.Sprintf("line %d: %v", line, err)
	}
	return err.Error()
}

type parser struct {
	cfg      *Config
	problems []Problem
	rule     string // current rule's locator
}

func (p *parser) fail(field, format string, args ...any) {
	p.problems = append(p.problems, Problem{Rule: p.rule, Field: field, Message: fmt.Sprintf(format, args...)})
}

func (p *parser) file(doc any) {
	switch d := doc.(type) {
	case nil:
		p.fail("", "empty file: want a mapping with \"rules\" (or a list of rules)")
	case []any: // a bare list of rules, as hosted services export them
		if len(d) == 0 {
			p.fail("rules", "empty: want at least one rule (a service without rules limits nothing)")
		}
		p.rules(d)
	case map[string]any:
		for _, k := range sortedKeys(d) {
			v := d[k]
			switch k {
			case "upstream":
				p.upstream(v)
			case "trusted_proxies":
				p.trusted(v)
			case "upstream_timeout":
				if str, ok := p.str(k, v); ok {
					if d, err := ParseDuration(str); err != nil {
						p.fail(k, "%v", err)
					} else {
						p.cfg.UpstreamTimeout = d
					}
				}
			case "ipv4_prefix", "ipv6_prefix":
				if n, ok := p.integer(k, v); ok {
					bits := int64(32)
					if k == "ipv6_prefix" {
						bits = 128
					}
					if n < 1 || n > bits {
						p.fail(k, "%d is outside [1, %d]", n, bits)
					} else if k == "ipv4_prefix" {
						p.cfg.IPv4Prefix = int(n)
					} else {
						p.cfg.IPv6Prefix = int(n)
					}
				}
			case "inline_limits":
				if b, ok := p.boolean(k, v); ok {
					p.cfg.InlineLimits = b
				}
			case "max_inline_limits":
				if n, ok := p.integer(k, v); ok {
					if n < 1 || n > rl.MaxLimits {
						p.fail(k, "%d is outside [1, %d]", n, rl.MaxLimits)
					}
					p.cfg.MaxInlineLimits = int(n)
				}
			case "api_tokens":
				p.tokens(v)
			case "rules":
				if l, ok := v.([]any); ok {
					p.rules(l)
				} else {
					p.fail(k, "want a list of rules, got %s", kind(v))
				}
			default:
				p.fail(k, "unknown field (want %s)", strings.Join(fileFields, ", "))
			}
		}
		if l, ok := d["rules"]; !ok {
			p.fail("rules", "missing")
		} else if l, ok := l.([]any); ok && len(l) == 0 {
			p.fail("rules", "empty: want at least one rule (a service without rules limits nothing)")
		}
	default:
		p.fail("", "want a mapping with \"rules\" (or a list of rules), got %s", kind(doc))
	}
}

// fileFields are the top-level fields of a configuration file.
var fileFields = []string{"upstream", "trusted_proxies", "inline_limits", "max_inline_limits", "api_tokens",
	"upstream_timeout", "ipv4_prefix", "ipv6_prefix", "rules"}

// DefaultMaxInlineLimits is the default of Config.MaxInlineLimits.
const DefaultMaxInlineLimits = 4

func (p *parser) tokens(v any) {
	l, ok := v.([]any)
	if !ok {
		p.fail("api_tokens", "want a list of {name, role, sha256}, got %s", kind(v))
		return
	}
	names := map[string]bool{}
	digests := map[[32]byte]bool{}
	for i, e := range l {
		f := fmt.Sprintf("api_tokens[%d]", i)
		m, ok := e.(map[string]any)
		if !ok {
			p.fail(f, "want a mapping {name, role, sha256}, got %s", kind(e))
			continue
		}
		var t APIToken
		for _, k := range sortedKeys(m) {
			switch k {
			case "name":
				if s, ok := p.str(f+".name", m[k]); ok {
					if err := checkName(s); err != nil {
						p.fail(f+".name", "%v", err)
					} else if names[s] {
						p.fail(f+".name", "%q names two tokens", s)
					}
					names[s] = true
					t.Name = s
				}
			case "role":
				if s, ok := p.str(f+".role", m[k]); ok {
					switch s {
					case "admin":
						t.Role = RoleAdmin
					case "check":
						t.Role = RoleCheck
					default:
						p.fail(f+".role", "%q: want admin or check", s)
					}
				}
			case "sha256":
				if s, ok := p.str(f+".sha256", m[k]); ok {
					b, err := hex.DecodeString(strings.TrimPrefix(s, "sha256:"))
					if err != nil || len(b) != 32 {
						p.fail(f+".sha256", "want the 64 hex digits of the token's SHA-256 (printf %%s \"$TOKEN\" | sha256sum), not the token itself")
						continue
					}
					copy(t.SHA256[:], b)
					if digests[t.SHA256] {
						p.fail(f+".sha256", "the same token is listed twice")
					}
					digests[t.SHA256] = true
				}
			default:
				p.fail(f+"."+k, "unknown field (want name, role, sha256)")
			}
		}
		for _, k := range []string{"name", "role", "sha256"} {
			if _, ok := m[k]; !ok {
				p.fail(f+"."+k, "missing")
			}
		}
		p.cfg.APITokens = append(p.cfg.APITokens, t)
	}
}

func (p *parser) upstream(v any) {
	s, ok := p.str("upstream", v)
	if !ok || s == "" || s == "demo" {
		p.cfg.Upstream = s
		return
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		p.fail("upstream", "%v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		p.fail("upstream", "want an http:// or https:// URL or \"demo\", got %q", s)
	case u.Host == "":
		p.fail("upstream", "no host in %q", s)
	default:
		p.cfg.Upstream = s
	}
}

func (p *parser) trusted(v any) {
	l, ok := v.([]any)
	if !ok {
		p.fail("trusted_proxies", "want a list of IPs or CIDR prefixes, got %s", kind(v))
		return
	}
	for i, e := range l {
		f := fmt.Sprintf("trusted_proxies[%d]", i)
		s, ok := p.str(f, e)
		if !ok {
			continue
		}
		if pfx, err := netip.ParsePrefix(s); err == nil {
			p.cfg.TrustedProxies = append(p.cfg.TrustedProxies, pfx.Masked())
		} else if a, err := netip.ParseAddr(s); err == nil {
			a = a.Unmap()
			p.cfg.TrustedProxies = append(p.cfg.TrustedProxies, netip.PrefixFrom(a, a.BitLen()))
		} else {
			p.fail(f, "%q is neither an IP address nor a CIDR prefix", s)
		}
	}
}

var ruleFields = []string{"name", "endpoint", "host", "methods", "strategy", "algorithm", "limit", "window", "rate",
	"limits", "key_by", "cost", "min_cost", "cost_header", "fail_open", "shape"}

func (p *parser) rules(l []any) {
	seen := map[string]int{}
	for i, v := range l {
		p.rule = fmt.Sprintf("rules[%d]", i)
		m, ok := v.(map[string]any)
		if !ok {
			p.fail("", "want a mapping, got %s", kind(v))
			continue
		}
		if n, ok := m["name"].(string); ok && n != "" {
			p.rule += fmt.Sprintf(" %q", n)
		} else if e, ok := m["endpoint"].(string); ok && e != "" {
			p.rule += fmt.Sprintf(" %q", e)
		}
		r, ok := p.oneRule(m)
		if r.Name != "" {
			if j, dup := seen[r.Name]; dup {
				p.fail("name", "%q is also the name of rules[%d] (names default to the endpoint; set \"name\" to tell them apart)", r.Name, j)
				continue
			}
			seen[r.Name] = i
		}
		if ok {
			p.cfg.Rules = append(p.cfg.Rules, r)
		}
	}
	p.rule = ""
}

func (p *parser) oneRule(m map[string]any) (RuleSpec, bool) {
	before := len(p.problems)
	r := RuleSpec{KeyBy: "ip", Cost: 1, MinCost: 1}
	for _, k := range sortedKeys(m) {
		if !slices.Contains(ruleFields, k) {
			p.fail(k, "unknown field (want one of %s)", strings.Join(ruleFields, ", "))
		}
	}
	if v, ok := m["name"]; ok {
		if s, ok := p.str("name", v); ok {
			if err := checkName(s); err != nil {
				p.fail("name", "%v", err)
			} else if s == InlineNamespace {
				p.fail("name", "%q is reserved for the decision API's inline limits", s)
			}
			r.Name = s
		}
	}
	if v, ok := m["endpoint"]; ok {
		if s, ok := p.str("endpoint", v); ok {
			if !strings.HasPrefix(s, "/") {
				p.fail("endpoint", "want a path starting with \"/\", got %q", s)
			} else if c, err := canonicalPath(s); err != nil {
				p.fail("endpoint", "%q: %v", s, err)
			} else if c != s || strings.Contains(s, ";") {
				p.fail("endpoint", "%q is not in canonical form (no \"..\", \".\", \"//\", \";\" or encoded unreserved characters): requests are matched after cleaning their path, so this endpoint could never match; want %q", s, matchPath(c))
			}
			r.Endpoint = s
		}
	}
	if v, ok := m["host"]; ok {
		if s, ok := p.str("host", v); ok {
			if err := checkHost(s); err != nil {
				p.fail("host", "%v", err)
			}
			r.Host = strings.ToLower(s)
		}
	}
	if v, ok := m["methods"]; ok {
		var l []any
		switch v := v.(type) {
		case string:
			l = []any{v}
		case []any:
			l = v
		default:
			p.fail("methods", "want a list of HTTP methods, got %s", kind(v))
		}
		for i, e := range l {
			if s, ok := p.str(fmt.Sprintf("methods[%d]", i), e); ok {
				if s == "" || strings.ContainsAny(s, " \t/") {
					p.fail(fmt.Sprintf("methods[%d]", i), "%q is not an HTTP method", s)
				}
				r.Methods = append(r.Methods, strings.ToUpper(s))
			}
		}
	}
	if r.Endpoint == "" && (r.Host != "" || len(r.Methods) > 0) {
		r.Endpoint = "/"
	}
	if r.Name == "" {
		if r.Endpoint == "" {
			p.fail("name", "missing: a rule needs a name or an endpoint")
		} else if err := checkName(r.Endpoint); err != nil {
			p.fail("name", "missing, and the endpoint cannot serve as one (%v)", err)
		} else {
			r.Name = r.Endpoint
		}
	}

	_, single := m["strategy"]
	_, alg := m["algorithm"]
	single = single || alg
	for _, k := range []string{"limit", "window", "rate"} {
		if _, ok := m[k]; ok {
			single = true
		}
	}
	if v, ok := m["limits"]; ok {
		if single {
			p.fail("limits", "give either limits or strategy/limit/window/rate, not both")
		}
		l, ok := v.([]any)
		switch {
		case !ok:
			p.fail("limits", "want a list of limits, got %s", kind(v))
		case len(l) == 0 || len(l) > rl.MaxLimits:
			p.fail("limits", "%d limits, want 1 to %d", len(l), rl.MaxLimits)
		default:
			names := map[string]bool{}
			for i, e := range l {
				f := fmt.Sprintf("limits[%d]", i)
				lm, ok := e.(map[string]any)
				if !ok {
					p.fail(f, "want a mapping, got %s", kind(e))
					continue
				}
				lim, ok := p.limit(f+".", lm, true)
				if !ok {
					continue
				}
				if lim.Name == "" {
					lim.Name = rl.DefaultLimitName(lim, len(l))
				}
				if names[lim.Name] {
					p.fail(f+".name", "%q names two limits of the rule", lim.Name)
				}
				names[lim.Name] = true
				r.Limits = append(r.Limits, lim)
			}
		}
	} else {
		if lim, ok := p.limit("", m, false); ok {
			lim.Name = "default"
			r.Limits = []rl.Limit{lim}
		}
	}

	if v, ok := m["key_by"]; ok {
		if s, ok := p.str("key_by", v); ok {
			if err := checkKeyBy(s); err != nil {
				p.fail("key_by", "%v", err)
			}
			r.KeyBy = s
		}
	}
	if v, ok := m["min_cost"]; ok {
		if n, ok := p.integer("min_cost", v); ok {
			if n < 1 || n > core.MaxCost {
				p.fail("min_cost", "%d is outside [1, %d] (a decision costs at least 1; cost 0 is a peek)", n, core.MaxCost)
			}
			r.MinCost = n
		}
	}
	if v, ok := m["cost"]; ok {
		if n, ok := p.integer("cost", v); ok {
			if n < 1 || n > core.MaxCost {
				p.fail("cost", "%d is outside [1, %d] (a decision costs at least 1; cost 0 is a peek)", n, core.MaxCost)
			}
			r.Cost = n
		}
	} else if r.MinCost > r.Cost {
		r.Cost = r.MinCost
	}
	if r.Cost < r.MinCost && r.MinCost >= 1 && r.MinCost <= core.MaxCost {
		p.fail("cost", "%d is below min_cost %d", r.Cost, r.MinCost)
	}
	if v, ok := m["cost_header"]; ok {
		if s, ok := p.str("cost_header", v); ok {
			if s == "" || strings.ContainsAny(s, " :\t") {
				p.fail("cost_header", "%q is not a header name", s)
			}
			r.CostHeader = s
		}
	}
	if v, ok := m["fail_open"]; ok {
		r.FailOpen, _ = p.boolean("fail_open", v)
	}
	if v, ok := m["shape"]; ok {
		r.Shape, _ = p.boolean("shape", v)
		if r.Shape && len(r.Limits) > 0 && !slices.ContainsFunc(r.Limits, func(l rl.Limit) bool { return l.Algorithm == core.LeakyBucket }) {
			p.fail("shape", "only a leaky bucket delays admitted requests, and this rule has none (strategy: leaky)")
		}
		if r.Shape && r.Endpoint == "" {
			p.fail("shape", "shaping holds proxied requests, and this rule has no endpoint")
		}
	}
	return r, len(p.problems) == before
}

// limit parses one limit: in a rule (the single-limit shorthand, prefix "")
// or in its limits list (named, prefix "limits[i].").
func (p *parser) limit(prefix string, m map[string]any, listed bool) (rl.Limit, bool) {
	before := len(p.problems)
	if listed {
		for _, k := range sortedKeys(m) {
			switch k {
			case "name", "strategy", "algorithm", "limit", "window", "rate":
			default:
				p.fail(prefix+k, "unknown field (want name, strategy, limit, window, rate)")
			}
		}
	}
	var l rl.Limit
	if v, ok := m["name"]; ok && listed {
		if s, ok := p.str(prefix+"name", v); ok {
			if err := checkName(s); err != nil {
				p.fail(prefix+"name", "%v", err)
			}
			l.Name = s
		}
	}
	sv, hasS := m["strategy"]
	av, hasA := m["algorithm"]
	switch {
	case hasS && hasA:
		p.fail(prefix+"algorithm", "give strategy or algorithm (the same thing), not both")
	case !hasS && !hasA:
		p.fail(prefix+"strategy", "missing (one of %s)", strategies)
	default:
		f, v := prefix+"strategy", sv
		if hasA {
			f, v = prefix+"algorithm", av
		}
		if s, ok := p.str(f, v); ok {
			a, err := core.ParseAlgorithm(s)
			if err != nil {
				p.fail(f, "unknown strategy %q (want one of %s)", s, strategies)
			}
			l.Algorithm = a
		}
	}
	if v, ok := m["limit"]; !ok {
		p.fail(prefix+"limit", "missing")
	} else if n, ok := p.integer(prefix+"limit", v); ok {
		l.Limit = n
	}
	if v, ok := m["window"]; !ok {
		p.fail(prefix+"window", "missing")
	} else if s, ok := p.str(prefix+"window", v); ok {
		d, err := ParseDuration(s)
		if err != nil {
			p.fail(prefix+"window", "%v", err)
		}
		l.Window = d
	}
	if v, ok := m["rate"]; ok {
		if n, ok := p.integer(prefix+"rate", v); ok {
			l.Rate = n
		}
	}
	if len(p.problems) != before {
		return l, false
	}
	if err := checkLimit(l); err != nil {
		p.fail(prefix+err.field, "%s", err.msg)
		return l, false
	}
	return l, true
}

const strategies = "fixed, sliding, sliding_log, token, leaky, gcra (or fixed_window, sliding_window, token_bucket, leaky_bucket)"

type limitErr struct{ field, msg string }

// checkLimit validates l as core does, naming the field at fault.
func checkLimit(l rl.Limit) *limitErr {
	if l.Window%time.Microsecond != 0 {
		return &limitErr{"window", "not a whole number of microseconds"}
	}
	c := core.Limit{Algorithm: l.Algorithm, Limit: l.Limit, Window: int64(l.Window / time.Microsecond), Rate: l.Rate}
	err := c.Validate()
	switch err {
	case nil:
		return nil
	case core.ErrLimit:
		max := core.MaxLimit
		if l.Algorithm == core.SlidingLog {
			max = core.MaxLogLimit
		}
		return &limitErr{"limit", fmt.Sprintf("%d is outside [1, %d] for %s", l.Limit, max, l.Algorithm)}
	case core.ErrWindow:
		return &limitErr{"window", fmt.Sprintf("%s is outside [1µs, %s]", l.Window, time.Duration(core.MaxWindow)*time.Microsecond)}
	case core.ErrRate:
		if l.Algorithm == core.FixedWindow || l.Algorithm == core.SlidingWindow || l.Algorithm == core.SlidingLog {
			return &limitErr{"rate", fmt.Sprintf("must be absent or 0 for %s (rate applies to token, leaky and gcra)", l.Algorithm)}
		}
		return &limitErr{"rate", fmt.Sprintf("%d is outside [0, %d]", l.Rate, core.MaxLimit)}
	case core.ErrUnits:
		return &limitErr{"limit", fmt.Sprintf("limit %d × window %s is too large for %s (limit × window in µs must stay below 2^61)", l.Limit, l.Window, l.Algorithm)}
	case core.ErrAlgorithm:
		return &limitErr{"strategy", "missing or unknown"}
	}
	return &limitErr{"", err.Error()}
}

// checkName accepts rule and limit names: 1 to 64 bytes of printable ASCII
// without spaces, quotes or backslashes (they appear in keys and headers).
func checkName(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("want 1 to 64 bytes, got %d", len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return fmt.Errorf("%q: byte %d is not printable ASCII (or is a space, quote or backslash)", s, i)
		}
	}
	return nil
}

// checkHost accepts a rule's host: a DNS name or IP address, or "*."
// followed by a name (every subdomain). A bare "*" would match every host:
// leave host out for that.
func checkHost(s string) error {
	name := strings.TrimPrefix(canonicalHost(s), "*.")
	switch {
	case strings.ContainsAny(s, "/\\@?#% "):
		return fmt.Errorf("%q: want a host name such as api.example.com or *.example.com, without scheme or path", s)
	case s == "" || s == "*":
		return fmt.Errorf("%q: want a host name such as api.example.com or *.example.com (leave host out to match every host)", s)
	case name == "" || strings.ContainsAny(name, "*/ \\@?#%[]") || strings.Contains(name, "..") || strings.HasPrefix(name, "."):
		return fmt.Errorf("%q: want a host name such as api.example.com or *.example.com, without scheme or path", s)
	case len(name) > 253:
		return fmt.Errorf("%q: longer than 253 bytes", s)
	}
	return nil
}

func checkKeyBy(s string) error {
	switch {
	case s == "ip" || s == "api_key" || s == "global":
		return nil
	case strings.HasPrefix(s, "header:") && len(s) > len("header:") && !strings.ContainsAny(s[7:], " :"):
		return nil
	case strings.HasPrefix(s, "query:") && len(s) > len("query:"):
		return nil
	}
	return fmt.Errorf("%q: want ip, api_key, header:<name>, query:<name> or global", s)
}

// ParseDuration parses a window: a Go duration ("500ms", "10s", "1m",
// "1h30m") or a whole number of days ("1d", "7d").
func ParseDuration(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok && n != "" {
		d, err := strconv.ParseInt(n, 10, 64)
		if err != nil || d <= 0 || d > math.MaxInt64/int64(24*time.Hour) {
			return 0, fmt.Errorf("%q: want a duration such as \"10s\", \"1m\", \"24h\" or \"1d\"", s)
		}
		return time.Duration(d) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: want a duration such as \"10s\", \"1m\", \"24h\" or \"1d\"", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration", s)
	}
	return d, nil
}

// fmtDuration writes d compactly: "1s", "1m", "1h", "1d" (rl.FormatWindow).
func fmtDuration(d time.Duration) string { return rl.FormatWindow(d) }

func (p *parser) str(field string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		p.fail(field, "want a string, got %s", kind(v))
	}
	return s, ok
}

func (p *parser) boolean(field string, v any) (bool, bool) {
	b, ok := v.(bool)
	if !ok {
		p.fail(field, "want true or false, got %s", kind(v))
	}
	return b, ok
}

func (p *parser) integer(field string, v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		if n <= math.MaxInt64 {
			return int64(n), true
		}
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<62 {
			return int64(n), true
		}
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return i, true
		}
		if f, err := n.Float64(); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<62 {
			return int64(f), true
		}
	default:
		p.fail(field, "want an integer, got %s", kind(v))
		return 0, false
	}
	p.fail(field, "want an integer, got %v", v)
	return 0, false
}

func kind(v any) string {
	switch v := v.(type) {
	case nil:
		return "nothing (null)"
	case string:
		return fmt.Sprintf("the string %q", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case int, int64, uint64, float64, json.Number:
		return fmt.Sprintf("the number %v", v)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
