package ruleconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// Problem is one mistake in a configuration.
type Problem struct {
	// Rule locates the rule ("rules[2] \"pay\""); "" for top-level fields.
	Rule string
	// Field is the field's path within the rule or file ("window",
	// "limits[1].strategy").
	Field   string
	Message string
}

// String writes the problem as "rule: field: message", leaving out what is
// empty.
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

// Checker collects the problems of a configuration as its fields are
// checked. Its methods read a field, report what is wrong with it under
// the current Rule, and say whether the value can be used.
type Checker struct {
	// Rule locates the rule being checked; "" outside the rules.
	Rule     string
	Problems []Problem
}

// Fail reports a problem with field.
func (c *Checker) Fail(field, format string, args ...any) {
	c.Problems = append(c.Problems, Problem{Rule: c.Rule, Field: field, Message: fmt.Sprintf(format, args...)})
}

// Want reports, if got is not "", that field wants want but got got, and
// returns whether got is "".
func (c *Checker) Want(field, want, got string) bool {
	if got != "" {
		c.Fail(field, "want %s, got %s", want, got)
	}
	return got == ""
}

// Object reports the object at field (want describes it) if it is not one,
// then each key given twice and each key no field takes; it returns
// whether it is an object.
func (c *Checker) Object(field, want string, f *Fields) bool {
	if !c.Want(field, want, f.Got) {
		return false
	}
	for _, k := range f.Repeated {
		c.Fail(Join(field, asciiName(k)), "given twice in one object")
	}
	for _, k := range f.Unknown {
		if want := Spelling(k, f.known); want != "" {
			c.Fail(Join(field, asciiName(k)), "unknown field: names are case-sensitive; want %q", want)
			continue
		}
		c.Fail(Join(field, asciiName(k)), "unknown field (want one of %s)", strings.Join(f.known, ", "))
	}
	return true
}

// Respelled returns the first of the object's unknown keys that is
// another spelling of one of its fields (Spelling), escaped for a message,
// and that field's name; "", "" if there is none. It serves a reader that
// lets unknown keys pass (an answer from a newer version may carry fields
// this one does not know) but must refuse a field it knows given in
// another spelling, which encoding/json would have taken for it.
func (f *Fields) Respelled() (key, want string) {
	for _, k := range f.Unknown {
		if want := Spelling(k, f.known); want != "" {
			return asciiName(k), want
		}
	}
	return "", ""
}

// asciiName writes a name given in a document for a message: as it is if
// it is printable ASCII, else escaped as in Go ("\u212aey", a Kelvin sign
// that would read as "Key"), clipped to 64 bytes.
func asciiName(k string) string {
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			q := strconv.QuoteToASCII(k)
			return Clip(q[1:len(q)-1], 64)
		}
	}
	return Clip(k, 64)
}

// Spelling returns the name of known that name is another spelling of
// (equal under Unicode case folding, strings.EqualFold: "Key", "KEY" or
// "\u212aey" with a Kelvin sign for "key"), or "" when there is none or
// name is itself one of known. Every JSON input reads exactly one spelling
// of a field, the documented one: encoding/json matches names this way
// (the last of "key" and "Key" wins), so a proxy in front reading one and
// this service the other would decide different requests. A message for
// a name refused names the spelling wanted.
func Spelling(name string, known []string) string {
	if slices.Contains(known, name) {
		return ""
	}
	for _, k := range known {
		if strings.EqualFold(name, k) {
			return k
		}
	}
	return ""
}

// String returns the string at field, reporting another kind; ok is false
// if it is absent or not a string.
func (c *Checker) String(field string, v String) (s string, ok bool) {
	return v.V, v.Set && c.Want(field, "a string", v.Got)
}

// Int is String for an integer.
func (c *Checker) Int(field string, v Int) (n int64, ok bool) {
	return v.V, v.Set && c.Want(field, "an integer", v.Got)
}

// Bool is String for a boolean.
func (c *Checker) Bool(field string, v Bool) (b bool, ok bool) {
	return v.V, v.Set && c.Want(field, "true or false", v.Got)
}

// Join is the path of key in the object at path.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// CheckRules checks a configuration's rules: each with check, c.Rule
// locating it (Rule.Locator), refusing a name (the one check returns)
// given to two rules. It returns the rules without a problem, in order,
// and leaves c.Rule "" for the fields checked after.
func CheckRules[R any, P interface {
	*R
	Locator(i int) string
}, S any](c *Checker, rules []R, check func(r P) (s S, name string, ok bool)) []S {
	var out []S
	names := map[string]int{}
	for i := range rules {
		r := P(&rules[i])
		c.Rule = r.Locator(i)
		s, name, ok := check(r)
		if j, dup := names[name]; dup {
			c.Fail("name", "%q is also the name of rules[%d] (names default to the endpoint; set \"name\" to tell them apart)", name, j)
			continue
		}
		if name != "" {
			names[name] = i
		}
		if ok {
			out = append(out, s)
		}
	}
	c.Rule = ""
	return out
}

// LimitFields are the fields of one limit; a rule carries them itself
// when it has one limit (the shorthand), or a list of Limit.
type LimitFields struct {
	// The algorithm: `fixed`, `sliding`, `sliding_log`, `token`, `leaky`, `gcra`, or their long names
	// (`fixed_window`, `sliding_window`, `token_bucket`, `leaky_bucket`). Required.
	Strategy String `json:"strategy"`
	// The same as `strategy`.
	Algorithm String `json:"algorithm"`
	// The quota, burst or capacity, 1 to 2^40 (a sliding log: 1 to 4096). Required.
	Limit Int `json:"limit"`
	// The window: `500ms`, `10s`, `1m`, `1h`, `1d`. Required.
	Window String `json:"window"`
	// Units restored per window, buckets and GCRA only. Default: `limit`.
	Rate Int `json:"rate"`
	// A shadow limit: decided and counted with the others, never denying (rl.Limit.Shadow). Default: `false`.
	Shadow Bool `json:"shadow"`
}

// Given reports whether any of the fields is given.
func (l *LimitFields) Given() bool {
	return l.Strategy.Set || l.Algorithm.Set || l.Limit.Set || l.Window.Set || l.Rate.Set || l.Shadow.Set
}

// Limit is one limit of a rule's "limits" list, or of a decision-API
// request's inline limits.
type Limit struct {
	Fields
	// The limit's name, unique in its list: state is kept per name, so a reload that changes a named limit's
	// strategy or window carries its usage. Default: `default`.
	Name String `json:"name"`
	LimitFields
}

// UnmarshalJSON decodes b as Decode does an object (a Limit in a list
// decoded by a JSON library keeps its unknown keys, names matched exactly,
// and kinds too).
func (l *Limit) UnmarshalJSON(b []byte) error {
	*l = Limit{}
	decodeObject(b, reflect.ValueOf(l).Elem(), &l.Fields)
	return nil
}

// MarshalJSON writes the limit in its JSON shape ({"name", "strategy",
// "limit", "window", "rate", "shadow"}), so that a decision-API request
// holding limits marshals back to what it was decoded from. A field left
// out or of the wrong kind is left out.
func (l Limit) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name      *string `json:"name,omitempty"`
		Strategy  *string `json:"strategy,omitempty"`
		Algorithm *string `json:"algorithm,omitempty"`
		Limit     *int64  `json:"limit,omitempty"`
		Window    *string `json:"window,omitempty"`
		Rate      *int64  `json:"rate,omitempty"`
		Shadow    *bool   `json:"shadow,omitempty"`
	}{given(l.Name), given(l.Strategy), given(l.Algorithm), given(l.Limit), given(l.Window), given(l.Rate), given(l.Shadow)})
}

// given points to v's value if it is OK, else is nil.
func given[T string | int64 | bool](v Value[T]) *T {
	if v.OK() {
		return &v.V
	}
	return nil
}

// NamedLimit is a validated limit and its name.
type NamedLimit struct {
	Name string
	core.Limit
	// Shadow: a shadow limit (the limit's "shadow": true).
	Shadow bool
}

// Compile compiles limits that CheckLimits (or Check) validated into the
// store's policy that decides them, in one step: named, compiled
// (core.Compile), shadow limits marked (store.Policy.WithShadow). Nothing
// is validated again beyond what compiling is (core.Compile refuses what
// Check refused, so an error means ls did not come from Check); no
// default name, no conversion, no second pass of rl.NewPolicy's.
// Every front end compiles its limits through it: rl-wasm-host's rules,
// overrides and inline limits and the gRPC service's descriptors (as an
// rl.Policy, engine.Policy), the proxy-wasm filter's rules (as they are).
func Compile(ls []NamedLimit) (*store.Policy, error) {
	var names [core.MaxLimits]string
	var limits [core.MaxLimits]core.Limit
	if len(ls) == 0 || len(ls) > core.MaxLimits {
		return nil, fmt.Errorf("%d limits, want 1 to %d: %w", len(ls), core.MaxLimits, core.ErrLimits)
	}
	var shadows []string
	for i := range ls {
		names[i], limits[i] = ls[i].Name, ls[i].Limit
		if ls[i].Shadow {
			shadows = append(shadows, ls[i].Name)
		}
	}
	p, err := store.NewPolicy(names[:len(ls)], limits[:len(ls)])
	if err != nil || shadows == nil {
		return p, err
	}
	return p.WithShadow(shadows...)
}

// Strategies lists the strategy names core.ParseAlgorithm accepts, for
// messages: "fixed, sliding, sliding_log, token, leaky, gcra (or
// fixed_window, sliding_window, token_bucket, leaky_bucket)", from
// core.Algorithms (the short names, then the canonical ones that differ).
var Strategies = strategies()

func strategies() string {
	var short, long []string
	for _, a := range core.Algorithms() {
		short = append(short, a.ShortName())
		if a.String() != a.ShortName() {
			long = append(long, a.String())
		}
	}
	return strings.Join(short, ", ") + " (or " + strings.Join(long, ", ") + ")"
}

// check validates the limit at prefix ("" for the shorthand, else
// "limits[i]."); ok is false if it has a problem.
func (l *LimitFields) check(c *Checker, prefix string) (core.Limit, bool) {
	before := len(c.Problems)
	var lim core.Limit
	switch {
	case l.Strategy.Set && l.Algorithm.Set:
		c.Fail(prefix+"algorithm", "give strategy or algorithm (the same thing), not both")
	case !l.Strategy.Set && !l.Algorithm.Set:
		c.Fail(prefix+"strategy", "missing (one of %s)", Strategies)
	default:
		f, v := prefix+"strategy", l.Strategy
		if l.Algorithm.Set {
			f, v = prefix+"algorithm", l.Algorithm
		}
		if s, ok := c.String(f, v); ok {
			a, err := core.ParseAlgorithm(s)
			if err != nil {
				c.Fail(f, "unknown strategy %q (want one of %s)", Clip(s, 32), Strategies)
			}
			lim.Algorithm = a
		}
	}
	if !l.Limit.Set {
		c.Fail(prefix+"limit", "missing")
	} else if n, ok := c.Int(prefix+"limit", l.Limit); ok {
		lim.Limit = n
	}
	if !l.Window.Set {
		c.Fail(prefix+"window", "missing")
	} else if s, ok := c.String(prefix+"window", l.Window); ok {
		w, err := ParseWindow(s)
		if err != nil {
			c.Fail(prefix+"window", "%v", err)
		}
		lim.Window = w
	}
	if n, ok := c.Int(prefix+"rate", l.Rate); ok {
		lim.Rate = n
	}
	c.Bool(prefix+"shadow", l.Shadow) // its kind; the callers read it
	if len(c.Problems) != before {
		return lim, false
	}
	if field, msg := checkLimit(lim, prefix); msg != "" {
		c.Fail(field, "%s", msg)
		return lim, false
	}
	return lim, true
}

// CheckLimits validates the limits of a list at field ("limits"): 1 to
// core.MaxLimits of them, each valid, named or given its default name, no
// name twice. The default name of a limit alone is alone (LoneLimitName:
// its rule's name), or core.DefaultLimitName's "default" when alone is "";
// among several, core.DefaultLimitName's. ok is false if any has a
// problem.
func CheckLimits(c *Checker, field string, ls []Limit, alone string) (out []NamedLimit, ok bool) {
	before := len(c.Problems)
	if len(ls) == 0 || len(ls) > core.MaxLimits {
		c.Fail(field, "%d limits, want 1 to %d", len(ls), core.MaxLimits)
		return nil, false
	}
	names := map[string]bool{}
	for i := range ls {
		b := len(c.Problems)
		l := &ls[i]
		f := fmt.Sprintf("%s[%d]", field, i)
		if !c.Object(f, "an object {name, strategy, limit, window, rate}", &l.Fields) {
			continue
		}
		var name string
		if s, ok := c.String(f+".name", l.Name); ok {
			if err := CheckName(s); err != nil {
				c.Fail(f+".name", "%v", err)
			}
			name = s
		}
		lim, ok := l.check(c, f+".")
		if !ok || len(c.Problems) != b {
			continue
		}
		if name == "" {
			name = core.DefaultLimitName(lim.Algorithm, lim.Window, len(ls))
			if len(ls) == 1 && alone != "" {
				name = alone
			}
		}
		if names[name] {
			c.Fail(f+".name", "%q names two limits of the rule", name)
		}
		names[name] = true
		out = append(out, NamedLimit{Name: name, Limit: lim, Shadow: l.Shadow.V})
	}
	return out, len(c.Problems) == before
}

// checkLimit validates l as core does: it returns the object at fault
// (prefix without its final ".": "limits[1]", or "" for the rule's own
// limit) and the core's message, which names the parameter, its value and
// the range allowed in the words of Go's error and SQL's
// (core.LimitError.Message), or "", "" if l is valid. A limit without an
// algorithm is reported before, as a missing strategy.
func checkLimit(l core.Limit, prefix string) (field, msg string) {
	var le *core.LimitError
	if !errors.As(l.Validate(), &le) {
		return "", ""
	}
	return strings.TrimSuffix(prefix, "."), le.Message()
}

// Rule is one rule as written: the fields both front ends read. A front
// end's rule type embeds it and adds its own fields.
type Rule struct {
	Fields
	// The rule's name in the decision API, metrics and stored keys: 1 to 64 printable ASCII bytes, no spaces,
	// quotes, `\` or `:`; not `inline` or `rls`. Default: the endpoint.
	Name String `json:"name"`
	// The path prefix the proxy matches: `/v1/pay` matches `/v1/pay/refund`, not `/v1/payments`. A rule without
	// endpoint, host and methods is for the decision API only. Default: none.
	Endpoint String `json:"endpoint"`
	// The host matched: `api.example.com`, `*.example.com` or an IP address. Default: any.
	Host String `json:"host"`
	// The methods matched, e.g. `[GET, POST]`; `HEAD` counts as `GET`. Default: any.
	Methods Strings `json:"methods"`
	LimitFields
	// Instead of one limit's fields: a list of limits, decided all or nothing.
	Limits List[Limit] `json:"limits"`
	// Where a request's key comes from: `ip`, `api_key` (the `Authorization: Bearer` token, kept as its digest),
	// `api_key:<Header>`, `header:<Name>`, `query:<param>`, `global` (one key), and `path` in the proxy-wasm
	// filter. Default: `ip`.
	KeyBy String `json:"key_by"`
	// The units a request takes. Default: `1`.
	Cost Int `json:"cost"`
	// No proxied request costs less. Default: `1`.
	MinCost Int `json:"min_cost"`
	// A request header carrying the cost: decimal digits, once, in [`min_cost`, 2^40]; anything else is 400.
	// Default: none.
	CostHeader String `json:"cost_header"`
	// The upstream's response header (or trailer) carrying the request's actual cost, settled against the
	// estimate taken. Default: none.
	ResponseCostHeader String `json:"response_cost_header"`
	// When the store is down: admit (`true`) or answer 503. Default: `false`.
	FailOpen Bool `json:"fail_open"`
	// `closest`: the `RateLimit` header field lists only the limit closest to exhaustion. Default: `all`.
	RateLimitFields String `json:"ratelimit_fields"`
	// The `qu` parameter of `RateLimit-Policy`: `requests` or `content-bytes`. Default: `requests`.
	QuotaUnit String `json:"quota_unit"`
	// Send the `pk` parameter of `RateLimit-Policy`, a keyed digest of the key. Default: `false`.
	PartitionKey Bool `json:"partition_key"`
	// Other limits for some keys: the exact `key`, else the longest `key_prefix`, decides. Default: none.
	Overrides List[Override] `json:"overrides"`
}

// Locator is how messages name the rule at index i: "rules[2]", followed
// by its name or endpoint if it gives one.
func (r *Rule) Locator(i int) string {
	loc := fmt.Sprintf("rules[%d]", i)
	if r.Name.OK() && r.Name.V != "" {
		loc += fmt.Sprintf(" %q", Clip(r.Name.V, 64))
	} else if r.Endpoint.OK() && r.Endpoint.V != "" {
		loc += fmt.Sprintf(" %q", Clip(r.Endpoint.V, 64))
	}
	return loc
}

// Options are how front ends differ on the shared fields.
type Options struct {
	// Proxied: every rule matches requests, and a rule without an
	// endpoint matches every path (the filter). Otherwise a rule without
	// endpoint, host and methods is for the decision API only, and needs
	// a name.
	Proxied bool
	// PathKey allows key_by: path.
	PathKey bool
	// IPv4Prefix and IPv6Prefix are the prefix lengths the front end keys
	// key_by: ip by (pipeline.IPKey; 0 means 32 and 64): an override of
	// such a rule names a client in that form, or a CIDR prefix no longer.
	IPv4Prefix, IPv6Prefix int
}

// Spec is a validated Rule.
type Spec struct {
	// Name is the name given, else the endpoint.
	Name string
	// Endpoint is a path starting with "/", or "" for a rule of the
	// decision API only. It is "/" when only host or methods are given.
	Endpoint string
	// Host is "", a host name or "*." and a name, in lower case, or an IP
	// address (an IPv6 one in canonical form: CanonicalIPv6).
	Host string
	// Methods are in upper case.
	Methods []string
	// Limits are decided together; the shorthand's one is named
	// "default".
	Limits []NamedLimit
	// KeyBy is DefaultKeyBy (ip) unless given.
	KeyBy KeyBy
	// Cost is the cost of a request without a cost header (or without
	// CostHeader); 1 unless given, at least MinCost.
	Cost int64
	// MinCost is the least a request may cost (1 unless given): a cost
	// header asking for less is refused, as is a decision-API check below
	// it. No request is ever free: cost 0 exists only as the decision
	// API's explicit peek.
	MinCost int64
	// CostHeader, if set, names the header field a request's cost is
	// read from (pipeline.ParseCost); front ends compare it ignoring case.
	CostHeader string
	// ResponseCostHeader, if set, names the response header field or
	// trailer in which the upstream reports a request's actual cost:
	// front ends settle the difference from the cost taken when the
	// request arrived (pipeline.ParseResponseCost, pipeline.SettleDelta),
	// remove the field from the response the client receives, and
	// forward the request without a client's own field of that name
	// (pipeline.DropsField). Compared ignoring case.
	ResponseCostHeader string
	FailOpen           bool
	// Closest makes the RateLimit field list only the limit closest to
	// exhaustion ("ratelimit_fields: closest"); by default it lists every
	// limit ("all").
	Closest bool
	// QuotaUnit is the RateLimit-Policy field's "qu": "requests" (the
	// default) or another of QuotaUnits, when the cost counts something
	// else.
	QuotaUnit string
	// PartitionKey sends the "pk" parameter, a keyed hash of the request's
	// key (pipeline.PartitionKey): it needs the front end's secret.
	PartitionKey bool
	// Overrides replace Limits for the keys they select, in file order
	// (pipeline.Overrides finds a key's: an exact key before a prefix, a
	// longer prefix before a shorter one); no kind and value twice.
	Overrides []OverrideSpec
}

// RateLimitFieldsChoices are the values of a rule's "ratelimit_fields":
// every limit in the RateLimit field, or only the closest to exhaustion.
func RateLimitFieldsChoices() []string { return []string{"all", "closest"} }

// QuotaUnits are the quota units a rule's "quota_unit" may name, from the
// draft's RateLimit Quota Units registry: "requests" (the default) and
// "content-bytes" (a cost counting bytes, e.g. from a header the client or
// a gateway sets to the body's size). The registry's third,
// "concurrent-requests", is not offered: no algorithm here limits
// concurrency.
func QuotaUnits() []string { return []string{"requests", "content-bytes"} }

// Check validates the rule (c.Rule locating it) and returns it validated;
// ok is false if it has a problem.
func (r *Rule) Check(c *Checker, o Options) (s Spec, ok bool) {
	before := len(c.Problems)
	s = Spec{KeyBy: DefaultKeyBy, Cost: 1, MinCost: 1, QuotaUnit: "requests"}
	if !c.Object("", "an object (a rule)", &r.Fields) {
		return s, false
	}
	if v, ok := c.String("name", r.Name); ok {
		if err := CheckName(v); err != nil {
			c.Fail("name", "%v", err)
		} else if err := CheckBaseName(v); err != nil {
			c.Fail("name", "%v", err)
		}
		s.Name = v
	}
	if v, ok := c.String("endpoint", r.Endpoint); ok {
		switch {
		case !strings.HasPrefix(v, "/"):
			c.Fail("endpoint", "want a path starting with \"/\", got %q", Clip(v, 64))
		case strings.ContainsAny(v, "?#"):
			c.Fail("endpoint", "%q: want a path without a query or fragment", Clip(v, 64))
		}
		s.Endpoint = v
	}
	if v, ok := c.String("host", r.Host); ok {
		if err := CheckHost(v); err != nil {
			c.Fail("host", "%v", err)
		}
		s.Host = CanonicalIPv6(strings.ToLower(v))
	}
	if c.Want("methods", "a list of HTTP methods", r.Methods.Got) {
		for i, m := range r.Methods.Items {
			f := fmt.Sprintf("methods[%d]", i)
			if v, ok := c.String(f, m); ok {
				if !IsToken(v) {
					c.Fail(f, "%q is not an HTTP method", Clip(v, 32))
				}
				s.Methods = append(s.Methods, strings.ToUpper(v))
			}
		}
	}
	if s.Endpoint == "" && (o.Proxied || s.Host != "" || len(s.Methods) > 0) {
		s.Endpoint = "/"
	}
	if s.Name == "" && !r.Name.Set {
		if s.Endpoint == "" {
			c.Fail("name", "missing: a rule needs a name or an endpoint")
		} else if err := CheckName(s.Endpoint); err != nil {
			c.Fail("name", "missing, and the endpoint cannot serve as one (%v)", err)
		} else if err := CheckBaseName(s.Endpoint); err != nil {
			c.Fail("name", "missing, and the endpoint cannot serve as one (%v)", err)
		} else {
			s.Name = s.Endpoint
		}
	}

	if r.Limits.Set {
		if r.LimitFields.Given() {
			c.Fail("limits", "give either limits or strategy/limit/window/rate, not both")
		}
		if c.Want("limits", "a list of limits", r.Limits.Got) {
			s.Limits, _ = CheckLimits(c, "limits", r.Limits.Items, LoneLimitName(s.Name))
		}
	} else if lim, ok := r.LimitFields.check(c, ""); ok {
		s.Limits = []NamedLimit{{Name: LoneLimitName(s.Name), Limit: lim, Shadow: r.LimitFields.Shadow.V}}
	}

	if v, ok := c.String("key_by", r.KeyBy); ok {
		if kb, err := ParseKeyBy(v, o.PathKey); err != nil {
			c.Fail("key_by", "%v", err)
		} else {
			s.KeyBy = kb
		}
	}
	if n, ok := c.Int("cost", r.Cost); ok {
		if n < 1 || n > core.MaxCost {
			c.Fail("cost", "%d is outside [1, %d] (a decision costs at least 1; cost 0 is a peek)", n, core.MaxCost)
		}
		s.Cost = n
	}
	if n, ok := c.Int("min_cost", r.MinCost); ok {
		switch {
		case n < 1 || n > core.MaxCost:
			c.Fail("min_cost", "%d is outside [1, %d] (a decision costs at least 1; cost 0 is a peek)", n, core.MaxCost)
		default:
			s.MinCost = n
			if !r.Cost.Set && n > s.Cost {
				s.Cost = n
			}
			if r.Cost.OK() && s.Cost < n { // a cost of the wrong kind is reported as such
				c.Fail("cost", "%d is below min_cost %d", s.Cost, n)
			}
		}
	}
	if v, ok := c.String("cost_header", r.CostHeader); ok {
		if !IsToken(v) {
			c.Fail("cost_header", "%q is not a header name", Clip(v, 64))
		}
		s.CostHeader = v
	}
	if v, ok := c.String("response_cost_header", r.ResponseCostHeader); ok {
		if !IsToken(v) {
			c.Fail("response_cost_header", "%q is not a header name", Clip(v, 64))
		}
		s.ResponseCostHeader = v
	}
	if v, ok := c.Bool("fail_open", r.FailOpen); ok {
		s.FailOpen = v
	}
	if v, ok := c.String("ratelimit_fields", r.RateLimitFields); ok {
		if !slices.Contains(RateLimitFieldsChoices(), v) {
			c.Fail("ratelimit_fields", "%q: want %s (the RateLimit field lists every limit, or only the one closest to exhaustion)",
				Clip(v, 32), strings.Join(RateLimitFieldsChoices(), " or "))
		}
		s.Closest = v == "closest"
	}
	if v, ok := c.String("quota_unit", r.QuotaUnit); ok {
		if !slices.Contains(QuotaUnits(), v) {
			c.Fail("quota_unit", "%q: want one of %s", Clip(v, 32), strings.Join(QuotaUnits(), ", "))
		}
		s.QuotaUnit = v
	}
	if v, ok := c.Bool("partition_key", r.PartitionKey); ok {
		s.PartitionKey = v
	}
	if r.Overrides.Set {
		// A rule of the decision API only that gives no key_by decides
		// the keys its callers send, as text: its key_by is a default
		// that derives nothing.
		derived := r.KeyBy.Set || s.Endpoint != ""
		s.Overrides = checkOverrides(c, s.KeyBy, derived, o, r.Overrides, LoneLimitName(s.Name))
	}
	return s, len(c.Problems) == before
}

// LoneLimitName is the name of a rule's limit when it is the rule's only
// one and names itself nothing: the rule's name, so that a client of two
// rules sees two policies by name in the answer's fields (RateLimit-Policy,
// the decision API's limits), not two "default". A rule's name is a valid
// limit name (CheckName accepts both alike, and SQL's limit names, 1 to
// 256 bytes of a key's characters, take it); a rule without a valid name
// (one already refused) gives "default". The state of the key's limit is
// kept under this name: an override's lone unnamed limit has it too, so
// that it carries the rule's state.
func LoneLimitName(rule string) string {
	if rule == "" || CheckName(rule) != nil {
		return "default"
	}
	return rule
}

// CheckName accepts rule and limit names: 1 to 64 bytes of printable ASCII
// without spaces, quotes or backslashes (they appear in keys and headers).
func CheckName(s string) error {
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

// CheckHost accepts a rule's host: a DNS name or IP address, or "*."
// followed by a name (every subdomain), without a port. A bare "*" would
// match every host: leave host out for that.
func CheckHost(s string) error {
	name := strings.TrimPrefix(s, "*.")
	if a, err := netip.ParseAddr(s); err == nil && a.Is6() && a.Zone() == "" {
		return nil
	}
	switch {
	case s == "" || s == "*":
		return fmt.Errorf("%q: want a host name such as api.example.com or *.example.com (leave host out to match every host)", Clip(s, 64))
	case strings.ContainsAny(s, "/\\@?#%:[] \t"):
		return fmt.Errorf("%q: want a host name such as api.example.com or *.example.com, without scheme, port or path", Clip(s, 64))
	case name == "" || strings.Contains(name, "*") || strings.Contains(name, "..") || strings.HasPrefix(name, ".") || strings.HasSuffix(name, "."):
		return fmt.Errorf("%q: want a host name such as api.example.com or *.example.com", Clip(s, 64))
	case len(name) > 253:
		return fmt.Errorf("%q: longer than 253 bytes", Clip(s, 64))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c >= 0x7f {
			return fmt.Errorf("%q: byte %d is not printable ASCII", Clip(s, 64), i)
		}
	}
	return nil
}

// CanonicalIPv6 is h in netip's canonical form if it is an IPv6 address
// without a zone ("2001:DB8::0001" is "2001:db8::1"), else h. A rule's
// host and a request's go through it, so that every spelling of an
// address matches every other.
func CanonicalIPv6(h string) string {
	if strings.IndexByte(h, ':') < 0 {
		return h
	}
	if a, err := netip.ParseAddr(h); err == nil && a.Is6() && a.Zone() == "" {
		return a.String()
	}
	return h
}

// IsToken reports whether s is an HTTP token (RFC 9110): a method or a
// header name.
func IsToken(s string) bool {
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

// ParseDuration parses a duration: a Go duration ("500ms", "10s", "1m",
// "1h30m") or a whole number of days ("1d", "7d"); it must be positive.
func ParseDuration(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok && n != "" {
		d, err := strconv.ParseInt(n, 10, 64)
		if err != nil || d <= 0 || d > math.MaxInt64/int64(24*time.Hour) {
			return 0, fmt.Errorf("%q: want a duration such as \"10s\", \"1m\", \"24h\" or \"1d\"", Clip(s, 32))
		}
		return time.Duration(d) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: want a duration such as \"10s\", \"1m\", \"24h\" or \"1d\"", Clip(s, 32))
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration", Clip(s, 32))
	}
	return d, nil
}

// ParseWindow parses a window (ParseDuration) into microseconds, core's
// unit; it must be a whole number of them.
func ParseWindow(s string) (int64, error) {
	d, err := ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d%time.Microsecond != 0 {
		return 0, fmt.Errorf("%q: not a whole number of microseconds", Clip(s, 32))
	}
	return int64(d / time.Microsecond), nil
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
