package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rlcore/rl/core"
)

// Defaults and bounds of the plugin configuration.
const (
	defaultSlots       = 16384
	maxSlots           = 1 << 20
	defaultKeysPerSlot = 4
	maxKeysPerSlot     = 64
	maxLimits          = core.MaxLimits // limits per rule, as rl.MaxLimits and the WASM ABI
	defaultTimeoutMS   = 100
	maxTimeoutMS       = 60_000
	defaultCheckPath   = "/v1/ratelimit/check"
)

// config is a validated plugin configuration.
type config struct {
	// Rules in configuration order.
	Rules []*rule
	// Slots is the number of shared-data entries (slots) per rule, and
	// KeysPerSlot how many keys one slot holds: a rule keeps the state of
	// at most Slots × KeysPerSlot live keys.
	Slots       int
	KeysPerSlot int
	// proxied are the rules that match requests, most specific first.
	proxied []*rule
}

// rule is one validated rule.
type rule struct {
	Name     string
	Endpoint string // path prefix; "/" matches every path
	// matchEndpoint is Endpoint in the form request paths are matched in.
	matchEndpoint string
	Host          string // "", "api.example.com" or "*.example.com", lower case
	Methods       []string
	// Limits and their names, decided together, all or nothing.
	Limits     []core.Limit
	LimitNames []string
	// KeyBy is "ip", "api_key", "header:<name>", "query:<name>", "path" or
	// "global".
	KeyBy      string
	Cost       int64
	CostHeader string // lower case
	// FailOpen admits requests when no decision can be had (shared data
	// failed or full, the global service failed or timed out).
	FailOpen bool
	// Global, if set, sends decisions to rl-wasm-host instead of deciding
	// on shared data.
	Global *globalSpec
	// maxLog is the largest sliding-log limit among Limits (0 if none): the
	// log capacity a decision needs.
	maxLog int
}

// globalSpec is a rule's global mode: an HTTP callout to rl-wasm-host's
// decision API.
type globalSpec struct {
	Cluster   string // Envoy cluster running rl-wasm-host
	Authority string // :authority of the callout; default the cluster name
	Path      string // default /v1/ratelimit/check
	TimeoutMS uint32 // default 100
	// Rule names a rule of rl-wasm-host's configuration; "" sends this
	// rule's limits inline.
	Rule string
	// Token, if set, is sent as "Authorization: Bearer <token>" (one of
	// rl-wasm-host's api_tokens). A secret: never logged.
	Token string
}

// String describes g without its token.
func (g globalSpec) String() string {
	t := ""
	if g.Token != "" {
		t = " token=<redacted>"
	}
	return fmt.Sprintf("{cluster=%s authority=%s path=%s timeout=%dms rule=%s%s}", g.Cluster, g.Authority, g.Path, g.TimeoutMS, g.Rule, t)
}

// Problem is one mistake in the configuration.
type Problem struct {
	// Rule locates the rule ("rules[2] \"pay\""); "" for top-level fields.
	Rule string
	// Field is the field's path ("window", "limits[1].strategy").
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

// ConfigError lists every mistake found in the plugin configuration.
type ConfigError struct {
	Problems []Problem
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rl-filter configuration: %d problem", len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	for _, p := range e.Problems {
		b.WriteString("; ")
		b.WriteString(p.String())
	}
	return b.String()
}

// parseConfig validates a JSON plugin configuration. Every mistake is
// reported in one *ConfigError naming the rule and the field.
func parseConfig(data []byte) (*config, error) {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, &ConfigError{Problems: []Problem{{Message: "JSON: " + jsonErr(data, err)}}}
	}
	if dec.More() {
		return nil, &ConfigError{Problems: []Problem{{Message: "JSON: data after the top-level value"}}}
	}
	p := &parser{cfg: &config{Slots: defaultSlots, KeysPerSlot: defaultKeysPerSlot}}
	p.file(doc)
	if len(p.problems) > 0 {
		return nil, &ConfigError{Problems: p.problems}
	}
	p.cfg.sortRules()
	return p.cfg, nil
}

// jsonErr adds a line number to a JSON syntax error.
func jsonErr(data []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
		return fmt.Sprintf("line %d: %v", line, err)
	}
	if errors.Is(err, io.EOF) {
		return "empty configuration: want an object with \"rules\" (or a list of rules)"
	}
	return err.Error()
}

type parser struct {
	cfg      *config
	problems []Problem
	rule     string // current rule's locator
}

func (p *parser) fail(field, format string, args ...any) {
	p.problems = append(p.problems, Problem{Rule: p.rule, Field: field, Message: fmt.Sprintf(format, args...)})
}

func (p *parser) file(doc any) {
	switch d := doc.(type) {
	case []any:
		p.rules(d)
	case map[string]any:
		for _, k := range sortedKeys(d) {
			v := d[k]
			switch k {
			case "rules":
				if l, ok := v.([]any); ok {
					p.rules(l)
				} else {
					p.fail(k, "want a list of rules, got %s", kind(v))
				}
			case "slots":
				if n, ok := p.integer(k, v); ok {
					if n < 1 || n > maxSlots {
						p.fail(k, "%d is outside [1, %d]", n, maxSlots)
					} else {
						p.cfg.Slots = int(n)
					}
				}
			case "keys_per_slot":
				if n, ok := p.integer(k, v); ok {
					if n < 1 || n > maxKeysPerSlot {
						p.fail(k, "%d is outside [1, %d]", n, maxKeysPerSlot)
					} else {
						p.cfg.KeysPerSlot = int(n)
					}
				}
			default:
				p.fail(k, "unknown field (want rules, slots, keys_per_slot)")
			}
		}
		if _, ok := d["rules"]; !ok {
			p.fail("rules", "missing")
		}
	default:
		p.fail("", "want an object with \"rules\" (or a list of rules), got %s", kind(doc))
	}
}

var ruleFields = []string{"name", "endpoint", "host", "methods", "strategy", "algorithm", "limit", "window", "rate",
	"limits", "key_by", "cost", "cost_header", "fail_open", "global"}

func (p *parser) rules(l []any) {
	if len(l) == 0 {
		p.fail("rules", "no rules")
	}
	seen := map[string]int{}
	for i, v := range l {
		p.rule = fmt.Sprintf("rules[%d]", i)
		m, ok := v.(map[string]any)
		if !ok {
			p.fail("", "want an object, got %s", kind(v))
			continue
		}
		if n, ok := m["name"].(string); ok && n != "" {
			p.rule += fmt.Sprintf(" %q", clip(n, 64))
		} else if e, ok := m["endpoint"].(string); ok && e != "" {
			p.rule += fmt.Sprintf(" %q", clip(e, 64))
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

func (p *parser) oneRule(m map[string]any) (*rule, bool) {
	before := len(p.problems)
	r := &rule{KeyBy: "ip", Cost: 1}
	for _, k := range sortedKeys(m) {
		if !slices.Contains(ruleFields, k) {
			if k == "shape" {
				p.fail(k, "not supported by the filter (a proxy-wasm filter cannot hold a request for a delay)")
			} else {
				p.fail(k, "unknown field (want one of %s)", strings.Join(ruleFields, ", "))
			}
		}
	}
	if v, ok := m["name"]; ok {
		if s, ok := p.str("name", v); ok {
			if err := checkName(s); err != nil {
				p.fail("name", "%v", err)
			}
			r.Name = s
		}
	}
	if v, ok := m["endpoint"]; ok {
		if s, ok := p.str("endpoint", v); ok {
			if !strings.HasPrefix(s, "/") {
				p.fail("endpoint", "want a path starting with \"/\", got %q", clip(s, 64))
			}
			r.Endpoint = s
		}
	}
	if v, ok := m["host"]; ok {
		if s, ok := p.str("host", v); ok {
			if s == "" || strings.ContainsAny(s, "/ :") {
				p.fail("host", "want a host name such as api.example.com or *.example.com, got %q", clip(s, 64))
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
			f := fmt.Sprintf("methods[%d]", i)
			if s, ok := p.str(f, e); ok {
				if !isToken(s) {
					p.fail(f, "%q is not an HTTP method", clip(s, 32))
				}
				r.Methods = append(r.Methods, strings.ToUpper(s))
			}
		}
	}
	if r.Endpoint == "" {
		r.Endpoint = "/"
	}
	if strings.HasPrefix(r.Endpoint, "/") {
		if m, err := matchPath(r.Endpoint); strings.ContainsAny(r.Endpoint, "?#") {
			p.fail("endpoint", "%q: want a path without a query or fragment", clip(r.Endpoint, 64))
		} else if err != nil {
			p.fail("endpoint", "%q: %v", clip(r.Endpoint, 64), err)
		} else {
			r.matchEndpoint = m
		}
	}
	if r.Name == "" {
		if err := checkName(r.Endpoint); err != nil {
			p.fail("name", "missing, and the endpoint cannot serve as one (%v)", err)
		} else {
			r.Name = r.Endpoint
		}
	}

	single := false
	for _, k := range []string{"strategy", "algorithm", "limit", "window", "rate"} {
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
		case len(l) == 0 || len(l) > maxLimits:
			p.fail("limits", "%d limits, want 1 to %d", len(l), maxLimits)
		default:
			names := map[string]bool{}
			for i, e := range l {
				f := fmt.Sprintf("limits[%d]", i)
				lm, ok := e.(map[string]any)
				if !ok {
					p.fail(f, "want an object, got %s", kind(e))
					continue
				}
				lim, name, ok := p.limit(f+".", lm, true)
				if !ok {
					continue
				}
				if name == "" {
					name = lim.Algorithm.String() + "_" + fmtWindow(lim.Window)
				}
				if names[name] {
					p.fail(f+".name", "%q names two limits of the rule", name)
				}
				names[name] = true
				r.Limits = append(r.Limits, lim)
				r.LimitNames = append(r.LimitNames, name)
			}
		}
	} else if lim, _, ok := p.limit("", m, false); ok {
		r.Limits = []core.Limit{lim}
		r.LimitNames = []string{"default"}
	}
	for _, l := range r.Limits {
		if l.Algorithm == core.SlidingLog {
			r.maxLog = max(r.maxLog, int(l.Limit))
		}
	}

	if v, ok := m["key_by"]; ok {
		if s, ok := p.str("key_by", v); ok {
			if err := checkKeyBy(s); err != nil {
				p.fail("key_by", "%v", err)
			}
			r.KeyBy = s
			if name, ok := strings.CutPrefix(s, "header:"); ok {
				r.KeyBy = "header:" + strings.ToLower(name)
			}
		}
	}
	if v, ok := m["cost"]; ok {
		if n, ok := p.integer("cost", v); ok {
			if n < 0 || n > core.MaxCost {
				p.fail("cost", "%d is outside [0, %d]", n, core.MaxCost)
			}
			r.Cost = n
		}
	}
	if v, ok := m["cost_header"]; ok {
		if s, ok := p.str("cost_header", v); ok {
			if !isToken(s) {
				p.fail("cost_header", "%q is not a header name", clip(s, 64))
			}
			r.CostHeader = strings.ToLower(s)
		}
	}
	if v, ok := m["fail_open"]; ok {
		r.FailOpen, _ = p.boolean("fail_open", v)
	}
	if v, ok := m["global"]; ok {
		r.Global = p.global(v)
	}
	return r, len(p.problems) == before
}

var globalFields = []string{"cluster", "authority", "path", "timeout", "rule", "token"}

func (p *parser) global(v any) *globalSpec {
	m, ok := v.(map[string]any)
	if !ok {
		p.fail("global", "want an object {\"cluster\": ..., \"timeout\": ...}, got %s", kind(v))
		return nil
	}
	g := &globalSpec{Path: defaultCheckPath, TimeoutMS: defaultTimeoutMS}
	for _, k := range sortedKeys(m) {
		if !slices.Contains(globalFields, k) {
			p.fail("global."+k, "unknown field (want one of %s)", strings.Join(globalFields, ", "))
		}
	}
	if v, ok := m["cluster"]; !ok {
		p.fail("global.cluster", "missing: name the Envoy cluster that runs rl-wasm-host")
	} else if s, ok := p.str("global.cluster", v); ok {
		if s == "" || len(s) > 255 || strings.ContainsAny(s, " \t\r\n") {
			p.fail("global.cluster", "%q is not a cluster name", clip(s, 64))
		}
		g.Cluster = s
	}
	g.Authority = g.Cluster
	if v, ok := m["authority"]; ok {
		if s, ok := p.str("global.authority", v); ok {
			if s == "" || len(s) > 255 || strings.ContainsAny(s, " \t\r\n/") {
				p.fail("global.authority", "%q is not a host name", clip(s, 64))
			}
			g.Authority = s
		}
	}
	if v, ok := m["path"]; ok {
		if s, ok := p.str("global.path", v); ok {
			if !strings.HasPrefix(s, "/") || strings.ContainsAny(s, " \t\r\n") {
				p.fail("global.path", "want a path starting with \"/\", got %q", clip(s, 64))
			}
			g.Path = s
		}
	}
	if v, ok := m["timeout"]; ok {
		if s, ok := p.str("global.timeout", v); ok {
			d, err := time.ParseDuration(s)
			switch {
			case err != nil:
				p.fail("global.timeout", "%q: want a duration such as \"50ms\" or \"1s\"", clip(s, 32))
			case d < time.Millisecond || d > maxTimeoutMS*time.Millisecond:
				p.fail("global.timeout", "%s is outside [1ms, %s]", d, maxTimeoutMS*time.Millisecond)
			default:
				g.TimeoutMS = uint32(d / time.Millisecond)
			}
		}
	}
	if v, ok := m["token"]; ok {
		if s, ok := v.(string); !ok {
			p.fail("global.token", "want a string") // never echo a token
		} else if len(s) == 0 || len(s) > 4096 || strings.IndexFunc(s, func(c rune) bool { return c <= 0x20 || c >= 0x7f }) >= 0 {
			p.fail("global.token", "want 1 to 4096 bytes of printable ASCII without spaces (the value is not shown)")
		} else {
			g.Token = s
		}
	}
	if v, ok := m["rule"]; ok {
		if s, ok := p.str("global.rule", v); ok {
			if err := checkName(s); err != nil {
				p.fail("global.rule", "%v", err)
			}
			g.Rule = s
		}
	}
	return g
}

// limit parses one limit: in a rule (the single-limit shorthand, prefix "")
// or in its limits list (prefix "limits[i].", which may carry a name).
func (p *parser) limit(prefix string, m map[string]any, listed bool) (core.Limit, string, bool) {
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
	var (
		l    core.Limit
		name string
	)
	if v, ok := m["name"]; ok && listed {
		if s, ok := p.str(prefix+"name", v); ok {
			if err := checkName(s); err != nil {
				p.fail(prefix+"name", "%v", err)
			}
			name = s
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
				p.fail(f, "unknown strategy %q (want one of %s)", clip(s, 32), strategies)
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
		w, err := parseWindow(s)
		if err != nil {
			p.fail(prefix+"window", "%v", err)
		}
		l.Window = w
	}
	if v, ok := m["rate"]; ok {
		if n, ok := p.integer(prefix+"rate", v); ok {
			l.Rate = n
		}
	}
	if len(p.problems) != before {
		return l, name, false
	}
	if field, msg := checkLimit(l); field != "" {
		p.fail(prefix+field, "%s", msg)
		return l, name, false
	}
	return l, name, true
}

const strategies = "fixed, sliding, sliding_log, token, leaky, gcra (or fixed_window, sliding_window, token_bucket, leaky_bucket)"

// checkLimit validates l as core does, naming the field at fault ("" if
// l is valid).
func checkLimit(l core.Limit) (field, msg string) {
	switch l.Validate() {
	case nil:
		return "", ""
	case core.ErrLimit:
		hi := core.MaxLimit
		if l.Algorithm == core.SlidingLog {
			hi = core.MaxLogLimit
		}
		return "limit", fmt.Sprintf("%d is outside [1, %d] for %s", l.Limit, hi, l.Algorithm)
	case core.ErrWindow:
		return "window", fmt.Sprintf("%s is outside [1µs, %s]", fmtWindow(l.Window), fmtWindow(core.MaxWindow))
	case core.ErrRate:
		if l.Algorithm == core.FixedWindow || l.Algorithm == core.SlidingWindow || l.Algorithm == core.SlidingLog {
			return "rate", fmt.Sprintf("must be absent or 0 for %s (rate applies to token, leaky and gcra)", l.Algorithm)
		}
		return "rate", fmt.Sprintf("%d is outside [0, %d]", l.Rate, core.MaxLimit)
	case core.ErrUnits:
		return "limit", fmt.Sprintf("limit %d × window %s is too large for %s (limit × window in µs must stay below 2^61)", l.Limit, fmtWindow(l.Window), l.Algorithm)
	}
	return "strategy", "missing or unknown"
}

// parseWindow parses a window into microseconds: a Go duration ("500ms",
// "10s", "1m", "1h30m") or a whole number of days ("1d", "7d"), a whole
// number of microseconds.
func parseWindow(s string) (int64, error) {
	bad := fmt.Errorf("%q: want a duration such as \"10s\", \"1m\", \"24h\" or \"1d\"", clip(s, 32))
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok && n != "" {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days <= 0 || days > math.MaxInt64/int64(24*time.Hour) {
			return 0, bad
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, bad
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration", clip(s, 32))
	}
	if d%time.Microsecond != 0 {
		return 0, fmt.Errorf("%q: not a whole number of microseconds", clip(s, 32))
	}
	return int64(d / time.Microsecond), nil
}

// fmtWindow writes a window in µs compactly ("1s", "1m", "1h", "1d"), in a
// form parseWindow (and rl-wasm-host) reads back.
func fmtWindow(us int64) string {
	const day = 24 * 3600 * 1_000_000
	switch {
	case us >= day && us%day == 0:
		return strconv.FormatInt(us/day, 10) + "d"
	case us >= 3600_000_000 && us%3600_000_000 == 0:
		return strconv.FormatInt(us/3600_000_000, 10) + "h"
	case us >= 60_000_000 && us%60_000_000 == 0:
		return strconv.FormatInt(us/60_000_000, 10) + "m"
	}
	return (time.Duration(us) * time.Microsecond).String()
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

func checkKeyBy(s string) error {
	switch {
	case s == "ip" || s == "api_key" || s == "global" || s == "path":
		return nil
	case strings.HasPrefix(s, "header:") && isToken(s[len("header:"):]):
		return nil
	case strings.HasPrefix(s, "query:") && len(s) > len("query:") && !strings.ContainsAny(s, " &=#"):
		return nil
	}
	return fmt.Errorf("%q: want ip, api_key, header:<name>, query:<name>, path or global", clip(s, 64))
}

// isToken reports whether s is an HTTP token (RFC 9110): a method or a
// header name.
func isToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

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
	n, ok := v.(json.Number)
	if !ok {
		p.fail(field, "want an integer, got %s", kind(v))
		return 0, false
	}
	if i, err := n.Int64(); err == nil {
		return i, true
	}
	if f, err := n.Float64(); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<62 {
		return int64(f), true
	}
	p.fail(field, "want an integer, got %s", clip(n.String(), 32))
	return 0, false
}

func kind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("the string %q", clip(v, 32))
	case bool:
		return fmt.Sprintf("%v", v)
	case json.Number:
		return "the number " + clip(v.String(), 32)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
