package rls

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// Config is a validated rate limit service configuration: the domains of
// envoyproxy/ratelimit's configuration files. Load it with LoadConfig or
// ParseDomain; a Server decides by it.
type Config struct {
	// Path is the file or directory it was read from.
	Path string
	// Domains by name.
	Domains map[string]*Domain
}

// Domain is one domain: a tree of descriptors.
type Domain struct {
	// Name is the domain, as Envoy's rate limit filter sends it.
	Name string
	// File is the file it was read from.
	File string
	// Extensions lists the fields of rl's own the file uses (the paths of
	// its rate_limit fields named by ExtensionFields), in file order:
	// envoyproxy/ratelimit refuses a file with any. Empty: the file is
	// portable.
	Extensions []string
	root       node
}

// node is one descriptor of the configuration: it matches one entry of a
// request's descriptor at its depth.
type node struct {
	key, value string
	// path names the node in metrics: its keys and configured values from
	// the top, as envoyproxy/ratelimit names its statistics
	// ("to_number", "message_type_marketing.to_number"); never a value a
	// request supplied.
	path  string
	limit *Limit
	// pattern is a wildcard value split at its "*"s (value "/api/*/x":
	// "/api/", "/x"); nil for a value without "*".
	pattern []string
	// shared lists, for each entry of a request descriptor ending here,
	// the wildcard value whose matches share one count (share_threshold
	// on the node matching that entry), or "" where the entry's own value
	// counts; nil when no entry's does.
	shared []string
	// Children: by key and value, by wildcard value (in file order), by
	// key alone (any value), in that order of preference.
	exact map[entryKey]*node
	wild  []*node
	any   map[string]*node
}

type entryKey struct{ key, value string }

// Limit is the rate_limit of a descriptor.
type Limit struct {
	// Unlimited descriptors are answered OK without a decision.
	Unlimited bool
	// Shadow (shadow_mode) decides and counts but never denies.
	Shadow bool
	// Quota (quota_mode): the request is denied by its quota limits only
	// when every one of them denies it; a quota limit that denies while
	// another admits is answered OVER_LIMIT in its status alone.
	Quota bool
	// Metadata (the descriptor's metadata) is merged into the response's
	// dynamic metadata when the descriptor passes, if the Server's
	// Options.ResponseMetadata is set; nil when none was given.
	Metadata *structpb.Struct
	// FailOpen (extension) answers OK when the store is down; otherwise
	// the call fails with UNAVAILABLE and Envoy's failure_mode_deny
	// decides.
	FailOpen bool
	// Name and Replaces: a matched limit whose Name another matched
	// limit replaces is not applied.
	Name     string
	Replaces []string
	// RequestsPerUnit per Unit × UnitMultiplier. 0 denies every request.
	RequestsPerUnit uint32
	Unit            rlsv3.RateLimitResponse_RateLimit_Unit
	UnitMultiplier  uint32
	// Limit is the limit decided: Algorithm (extension "algorithm",
	// default fixed_window), RequestsPerUnit per window, named stateName
	// whatever they are.
	Limit rl.Limit
	// ShadowLimits (extension "shadow_limits") are candidates decided with
	// Limit on the descriptor's key, in the same atomic step: shadow
	// limits (rl.Limit.Shadow), each named, which never deny.
	ShadowLimits []rl.Limit

	policy  *rl.Policy
	current *rlsv3.RateLimitResponse_RateLimit
	window  time.Duration
	m       *descMetrics
}

// stateName is the limit name of every descriptor's enforced limit (its
// rate_limit), whatever its unit, unit_multiplier and algorithm: "default",
// the name rl-wasm-host gives a rule's single limit (core.DefaultLimitName
// of one limit). The store keeps a descriptor's state per key and limit
// name, so a reload changing any of them, or adding or removing a value's
// override, reads the value's state under the new parameters and carries
// its usage across (README.md, "Changing a limit: what carries over"). A
// shadow limit may not take it. (Before issue 22 the name was
// "<algorithm>_<window>", so such a change started the value fresh;
// states stored under those names are no longer read.)
const stateName = "default"

// unitSeconds are the lengths of envoyproxy/ratelimit's units.
var unitSeconds = map[rlsv3.RateLimitResponse_RateLimit_Unit]int64{
	rlsv3.RateLimitResponse_RateLimit_SECOND: 1,
	rlsv3.RateLimitResponse_RateLimit_MINUTE: 60,
	rlsv3.RateLimitResponse_RateLimit_HOUR:   3600,
	rlsv3.RateLimitResponse_RateLimit_DAY:    86400,
	rlsv3.RateLimitResponse_RateLimit_WEEK:   7 * 86400,
	rlsv3.RateLimitResponse_RateLimit_MONTH:  30 * 86400,
	rlsv3.RateLimitResponse_RateLimit_YEAR:   365 * 86400,
}

// ConfigFiles returns the files LoadConfig reads for path: path itself,
// or for a directory the .yaml and .yml files in it whose names do not
// begin with "." (a Kubernetes ConfigMap's ..data and its timestamped
// directories are skipped; its files, symbolic links through ..data, are
// read), in name order. A directory with none is a *ruleconfig.ConfigError.
func ConfigFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rls: config: %w", err)
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("rls: config: %w", err)
	}
	var files []string
	for _, e := range ents {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if !e.IsDir() && !strings.HasPrefix(e.Name(), ".") && (ext == ".yaml" || ext == ".yml") {
			files = append(files, filepath.Join(path, e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, &ruleconfig.ConfigError{File: path, Problems: []ruleconfig.Problem{{Message: "no .yaml or .yml file in the directory"}}}
	}
	return files, nil
}

// LoadConfig reads a YAML file of one domain, or every .yaml and .yml file
// (not starting with ".") of a directory, one domain each, as
// envoyproxy/ratelimit reads its runtime directory. Every mistake of every
// file is reported in one *ruleconfig.ConfigError naming the file, the domain
// and the field.
func LoadConfig(path string) (*Config, error) {
	files, err := ConfigFiles(path)
	if err != nil {
		return nil, err
	}
	cfg := &Config{Path: path, Domains: map[string]*Domain{}}
	ce := &ruleconfig.ConfigError{File: path}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("rls: config: %w", err)
		}
		d, err := ParseDomain(f, data)
		if err != nil {
			if fe, ok := err.(*ruleconfig.ConfigError); ok {
				for _, p := range fe.Problems {
					if f != path { // a file of a directory
						p.Rule = strings.TrimSuffix(filepath.Base(f)+": "+p.Rule, ": ")
					}
					ce.Problems = append(ce.Problems, p)
				}
				continue
			}
			return nil, err
		}
		if prev, dup := cfg.Domains[d.Name]; dup {
			ce.Problems = append(ce.Problems, ruleconfig.Problem{Rule: filepath.Base(f), Field: "domain",
				Message: fmt.Sprintf("%q is also the domain of %s (one file per domain)", d.Name, filepath.Base(prev.File))})
			continue
		}
		cfg.Domains[d.Name] = d
	}
	if len(ce.Problems) > 0 {
		return nil, ce
	}
	return cfg, nil
}

// Portability lists the rl extensions cfg's files use, one line each,
// "<file>: domain "<name>": <field>", by file and then in file order. Empty
// means envoyproxy/ratelimit loads every file as rl does: the extensions
// (ExtensionFields) are the only fields of rl's format it refuses.
func (c *Config) Portability() []string {
	var out []string
	for _, d := range slices.SortedFunc(maps.Values(c.Domains), func(a, b *Domain) int { return strings.Compare(a.File, b.File) }) {
		for _, f := range d.Extensions {
			out = append(out, fmt.Sprintf("%s: domain %q: %s", d.File, d.Name, f))
		}
	}
	return out
}

// ParseDomain validates one configuration file in envoyproxy/ratelimit's
// format (YAML; JSON is YAML too); name is used in errors.
func ParseDomain(name string, data []byte) (*Domain, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ruleconfig.ConfigError{File: name, Problems: []ruleconfig.Problem{{Message: "YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}}
	}
	js, err := ruleconfig.AppendJSON(nil, doc)
	if err != nil {
		return nil, &ruleconfig.ConfigError{File: name, Problems: []ruleconfig.Problem{{Message: "YAML: " + err.Error()}}}
	}
	var f domainJSON
	if ps := ruleconfig.Decode(js, &f); len(ps) > 0 {
		return nil, &ruleconfig.ConfigError{File: name, Problems: ps}
	}
	d, ps := f.Validate(name)
	if len(ps) > 0 {
		return nil, &ruleconfig.ConfigError{File: name, Problems: ps}
	}
	return d, nil
}

// domainJSON is a configuration file as written.
type domainJSON struct {
	ruleconfig.Fields
	Domain      ruleconfig.String               `json:"domain"`
	Descriptors ruleconfig.List[descriptorJSON] `json:"descriptors"`
}

// descriptorJSON is a descriptor as written: every field of
// envoyproxy/ratelimit's descriptors.
type descriptorJSON struct {
	ruleconfig.Fields
	Key         scalar                          `json:"key"`
	Value       scalar                          `json:"value"`
	RateLimit   rateLimitJSON                   `json:"rate_limit"`
	Descriptors ruleconfig.List[descriptorJSON] `json:"descriptors"`
	ShadowMode  ruleconfig.Bool                 `json:"shadow_mode"`
	QuotaMode   ruleconfig.Bool                 `json:"quota_mode"`
	// DetailedMetric and ValueToMetric are accepted and change no metric:
	// they would put request values in metric names, which rl's metrics
	// never carry (SECURITY.md).
	DetailedMetric ruleconfig.Bool `json:"detailed_metric"`
	ValueToMetric  ruleconfig.Bool `json:"value_to_metric"`
	ShareThreshold ruleconfig.Bool `json:"share_threshold"`
	Metadata       metadataJSON    `json:"metadata"`
}

// metadataJSON is a descriptor's metadata: any mapping, kept as written.
type metadataJSON struct {
	raw []byte
	set bool
}

// UnmarshalJSON keeps b; it never fails.
func (m *metadataJSON) UnmarshalJSON(b []byte) error {
	m.raw, m.set = append([]byte(nil), b...), true
	return nil
}

// check returns the metadata at field as a Struct, reporting anything but
// a mapping; nil if absent or wrong.
func (m metadataJSON) check(c *ruleconfig.Checker, field string) *structpb.Struct {
	if !m.set || !c.Want(field, "a mapping", gotUnlessObject(m.raw)) {
		return nil
	}
	var v map[string]any
	if err := json.Unmarshal(m.raw, &v); err != nil {
		c.Fail(field, "%v", err) // not reached: the document is valid JSON
		return nil
	}
	st, err := structpb.NewStruct(v)
	if err != nil {
		c.Fail(field, "%v", err) // not reached: JSON values are Struct values
		return nil
	}
	return st
}

// gotUnlessObject describes b unless it is a JSON object.
func gotUnlessObject(b []byte) string {
	if len(b) > 0 && b[0] == '{' {
		return ""
	}
	return ruleconfig.Describe(b)
}

// rateLimitJSON is a descriptor's rate_limit as written: every field of
// envoyproxy/ratelimit's, and rl's extensions (see extensions).
type rateLimitJSON struct {
	ruleconfig.Fields
	Unit            ruleconfig.String            `json:"unit"`
	RequestsPerUnit ruleconfig.Int               `json:"requests_per_unit"`
	Unlimited       ruleconfig.Bool              `json:"unlimited"`
	Name            ruleconfig.String            `json:"name"`
	Replaces        ruleconfig.List[replaceJSON] `json:"replaces"`
	UnitMultiplier  ruleconfig.Int               `json:"unit_multiplier"`
	Algorithm       ruleconfig.String            `json:"algorithm"`
	FailOpen        ruleconfig.Bool              `json:"fail_open"`
	ShadowLimits    ruleconfig.List[shadowJSON]  `json:"shadow_limits"`
}

// shadowJSON is one of a rate_limit's shadow_limits as written: a name and
// the fields of a rate of its own.
type shadowJSON struct {
	ruleconfig.Fields
	Name            ruleconfig.String `json:"name"`
	Unit            ruleconfig.String `json:"unit"`
	RequestsPerUnit ruleconfig.Int    `json:"requests_per_unit"`
	UnitMultiplier  ruleconfig.Int    `json:"unit_multiplier"`
	Algorithm       ruleconfig.String `json:"algorithm"`
}

// extensions reports which of rl's own fields r sets: the fields
// envoyproxy/ratelimit refuses. It is the one list of them
// (ExtensionFields).
func (r *rateLimitJSON) extensions() map[string]bool {
	return map[string]bool{
		"unit_multiplier": r.UnitMultiplier.Set,
		"algorithm":       r.Algorithm.Set,
		"fail_open":       r.FailOpen.Set,
		"shadow_limits":   r.ShadowLimits.Set,
	}
}

// ExtensionFields are the fields rl reads that envoyproxy/ratelimit does not
// (it refuses a file using any): rl's extensions, all in a descriptor's
// rate_limit. A file without them loads in both.
func ExtensionFields() []string {
	return slices.Sorted(maps.Keys((&rateLimitJSON{}).extensions()))
}

type replaceJSON struct {
	ruleconfig.Fields
	Name ruleconfig.String `json:"name"`
}

// scalar is a descriptor's key or value: a string, or an integer or a
// boolean written unquoted (value: 30), as envoyproxy/ratelimit reads them.
type scalar struct{ ruleconfig.String }

// UnmarshalJSON takes an integer or a boolean as its text.
func (s *scalar) UnmarshalJSON(b []byte) error {
	t := string(b)
	if n := strings.TrimPrefix(t, "-"); t == "true" || t == "false" || n != "" && strings.Trim(n, "0123456789") == "" {
		s.String = ruleconfig.String{V: string(b), Set: true}
		return nil
	}
	return s.String.UnmarshalJSON(b)
}

// check reports a key or value that is neither a string nor an integer or
// boolean.
func (s scalar) check(c *ruleconfig.Checker, field string) (string, bool) {
	if s.Got != "" {
		c.Fail(field, "want a string, got %s (quote it)", s.Got)
		return "", false
	}
	return s.V, s.Set
}

// Validate checks the file and returns its domain, or every problem it
// has.
func (f *domainJSON) Validate(file string) (*Domain, []ruleconfig.Problem) {
	c := &ruleconfig.Checker{}
	d := &Domain{File: file}
	if !c.Object("", "a mapping with \"domain\" and \"descriptors\"", &f.Fields) {
		return nil, c.Problems
	}
	if !f.Domain.Set {
		c.Fail("domain", "missing")
	} else if s, ok := c.String("domain", f.Domain); ok {
		if err := checkDomain(s); err != nil {
			c.Fail("domain", "%v", err)
		}
		d.Name = s
		c.Rule = fmt.Sprintf("domain %q", s)
	}
	if f.Descriptors.Set {
		descriptors(c, d, "descriptors", "", 0, f.Descriptors, &d.root)
	}
	return d, c.Problems
}

// checkDomain accepts 1 to 64 bytes of printable ASCII without spaces or
// ':' (ruleconfig.CheckBaseName): the domain is part of every key the store
// holds.
func checkDomain(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("want 1 to 64 bytes, got %d", len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c >= 0x7f {
			return fmt.Errorf("%q: byte %d is not printable ASCII (or is a space)", s, i)
		}
	}
	return ruleconfig.CheckBaseName(s)
}

// descriptors checks a descriptor list into parent's children, at depth
// (0 at the top: the index of the request's entry they match), and records
// the extensions they use in d.
func descriptors(c *ruleconfig.Checker, d *Domain, field, parentPath string, depth int, l ruleconfig.List[descriptorJSON], parent *node) {
	if !c.Want(field, "a list of descriptors", l.Got) {
		return
	}
	for i := range l.Items {
		dj := &l.Items[i]
		f := fmt.Sprintf("%s[%d]", field, i)
		if !c.Object(f, "a mapping {key, value, rate_limit, descriptors}", &dj.Fields) {
			continue
		}
		n := &node{}
		if !dj.Key.Set {
			c.Fail(f+".key", "missing")
		} else if s, ok := dj.Key.check(c, f+".key"); ok {
			switch {
			case s == "":
				c.Fail(f+".key", "empty")
			case strings.Contains(s, "*"):
				// envoyproxy/ratelimit matches "key_value" as one
				// string, so a "*" in a key would match across the
				// key and the value; rl matches keys exactly.
				c.Fail(f+".key", "%q: a key has no wildcards (put \"*\" in the value)", ruleconfig.Clip(s, 32))
			}
			n.key = s
		}
		if s, ok := dj.Value.check(c, f+".value"); ok {
			n.value = s
			if strings.Contains(s, "*") {
				n.pattern = strings.Split(s, "*")
			}
		}
		n.path = n.key
		if n.value != "" {
			n.path += "_" + n.value
		}
		if parentPath != "" {
			n.path = parentPath + "." + n.path
		}
		shadow, _ := c.Bool(f+".shadow_mode", dj.ShadowMode)
		quota, _ := c.Bool(f+".quota_mode", dj.QuotaMode)
		c.Bool(f+".detailed_metric", dj.DetailedMetric)
		c.Bool(f+".value_to_metric", dj.ValueToMetric)
		share, _ := c.Bool(f+".share_threshold", dj.ShareThreshold)
		if share && n.pattern == nil {
			c.Fail(f+".share_threshold", "only a wildcard value (with \"*\") has matches to share a count")
		}
		n.shared = parent.shared
		if share && n.pattern != nil {
			n.shared = make([]string, depth+1)
			copy(n.shared, parent.shared)
			n.shared[depth] = n.value
		}
		meta := dj.Metadata.check(c, f+".metadata")
		if dj.RateLimit.Set {
			n.limit = dj.RateLimit.check(c, f+".rate_limit")
			if n.limit != nil {
				n.limit.Shadow, n.limit.Quota, n.limit.Metadata = shadow, quota, meta
			}
			for _, k := range ExtensionFields() {
				if dj.RateLimit.extensions()[k] {
					d.Extensions = append(d.Extensions, f+".rate_limit."+k)
				}
			}
		}
		if dj.Descriptors.Set {
			descriptors(c, d, f+".descriptors", n.path, depth+1, dj.Descriptors, n)
		}
		add(c, f, parent, n)
	}
}

// add puts n among parent's children, refusing a second descriptor of the
// same key and value at one level, and a wildcard value that an earlier
// one of the same key hides (hidden).
func add(c *ruleconfig.Checker, f string, parent *node, n *node) {
	switch {
	case n.value == "":
		if parent.any == nil {
			parent.any = map[string]*node{}
		}
		if _, dup := parent.any[n.key]; dup {
			c.Fail(f, "a second descriptor with key %q and no value at this level", n.key)
			return
		}
		parent.any[n.key] = n
	case n.pattern != nil:
		for _, o := range parent.wild {
			if o.key == n.key && o.value == n.value {
				c.Fail(f, "a second descriptor with key %q and value %q at this level", n.key, n.value)
				return
			}
			if hidden(o, n) {
				c.Fail(f+".value", "%q is never matched: the wildcard value %q before it (key %q, this level) matches every value it does, and the first wildcard in file order that matches decides; list the more specific first",
					ruleconfig.Clip(n.value, 64), ruleconfig.Clip(o.value, 64), ruleconfig.Clip(n.key, 32))
				return
			}
		}
		parent.wild = append(parent.wild, n)
	default:
		if parent.exact == nil {
			parent.exact = map[entryKey]*node{}
		}
		k := entryKey{n.key, n.value}
		if _, dup := parent.exact[k]; dup {
			c.Fail(f, "a second descriptor with key %q and value %q at this level", n.key, n.value)
			return
		}
		parent.exact[k] = n
	}
}

// check validates a rate_limit at f; nil if it has a problem.
func (r *rateLimitJSON) check(c *ruleconfig.Checker, f string) *Limit {
	before := len(c.Problems)
	if !c.Object(f, "a mapping {unit, requests_per_unit}", &r.Fields) {
		return nil
	}
	l := &Limit{UnitMultiplier: 1, Limit: rl.Limit{Algorithm: core.FixedWindow}}
	l.Unlimited, _ = c.Bool(f+".unlimited", r.Unlimited)
	l.Name, _ = c.String(f+".name", r.Name)
	if c.Want(f+".replaces", "a list of {name}", r.Replaces.Got) {
		for i := range r.Replaces.Items {
			e := &r.Replaces.Items[i]
			rf := fmt.Sprintf("%s.replaces[%d]", f, i)
			if !c.Object(rf, "a mapping {name}", &e.Fields) {
				continue
			}
			s, ok := c.String(rf+".name", e.Name)
			switch {
			case !e.Name.Set:
				c.Fail(rf+".name", "missing")
			case !ok:
			case s == "":
				c.Fail(rf+".name", "empty")
			case s == l.Name:
				c.Fail(rf+".name", "%q is this limit's own name", s)
			default:
				l.Replaces = append(l.Replaces, s)
			}
		}
	}
	l.FailOpen, _ = c.Bool(f+".fail_open", r.FailOpen)
	if l.Unlimited {
		// requests_per_unit is read and ignored, as envoyproxy/ratelimit
		// does; it refuses a unit, and rl its own fields.
		c.Int(f+".requests_per_unit", r.RequestsPerUnit)
		for _, k := range []struct {
			name string
			set  bool
		}{{"unit", r.Unit.Set}, {"unit_multiplier", r.UnitMultiplier.Set}, {"algorithm", r.Algorithm.Set}, {"shadow_limits", r.ShadowLimits.Set}} {
			if k.set {
				c.Fail(f+"."+k.name, "must be absent when unlimited is true")
			}
		}
		if len(c.Problems) != before {
			return nil
		}
		return l
	}
	if !l.rate(c, f, r.Unit, r.RequestsPerUnit, r.UnitMultiplier, r.Algorithm) || len(c.Problems) != before {
		return nil
	}
	l.current = &rlsv3.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit}
	if l.UnitMultiplier != 1 {
		l.current.UnitMultiplier = wrapperspb.UInt32(l.UnitMultiplier)
	}
	if l.RequestsPerUnit == 0 {
		if r.ShadowLimits.Set {
			c.Fail(f+".shadow_limits", "must be absent when requests_per_unit is 0 (a limit that denies everything keeps no state to decide them on)")
			return nil
		}
		return l // denies everything; no state
	}
	l.Limit.Name = stateName
	if !checkPolicy(c, f, l.Limit, l.window) {
		return nil
	}
	if !l.shadowLimits(c, f+".shadow_limits", r.ShadowLimits) {
		return nil
	}
	ls := []ruleconfig.NamedLimit{named(l.Limit)}
	for _, sh := range l.ShadowLimits {
		ls = append(ls, named(sh))
	}
	// Checked above, each limit once (checkPolicy): compiled in one step,
	// as every front end's configured limits are.
	pol, err := engine.Policy(ls)
	if err != nil { // not reached: each limit was checked
		c.Fail(f, "%v", err)
		return nil
	}
	l.policy = pol
	return l
}

// rate reads a rate at f (unit, requests_per_unit, unit_multiplier,
// algorithm) into l: its Unit, RequestsPerUnit, UnitMultiplier, window
// and Limit's Algorithm, Window and Limit. It reports whether they are
// valid.
func (l *Limit) rate(c *ruleconfig.Checker, f string, unit ruleconfig.String, rpu, mult ruleconfig.Int, alg ruleconfig.String) bool {
	before := len(c.Problems)
	if !unit.Set {
		c.Fail(f+".unit", "missing (second, minute, hour, day, week, month or year)")
	} else if s, ok := c.String(f+".unit", unit); ok {
		u, known := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(s)]
		if !known || u == 0 {
			c.Fail(f+".unit", "unknown unit %q (want second, minute, hour, day, week, month or year)", ruleconfig.Clip(s, 32))
		} else {
			l.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(u)
		}
	}
	if !rpu.Set {
		c.Fail(f+".requests_per_unit", "missing")
	} else if n, ok := c.Int(f+".requests_per_unit", rpu); ok {
		if n < 0 || n > math.MaxUint32 {
			c.Fail(f+".requests_per_unit", "%d is outside [0, %d]", n, uint32(math.MaxUint32))
		} else {
			l.RequestsPerUnit = uint32(n)
		}
	}
	if n, ok := c.Int(f+".unit_multiplier", mult); ok {
		if n < 1 || n > math.MaxUint32 {
			c.Fail(f+".unit_multiplier", "%d is outside [1, %d]", n, uint32(math.MaxUint32))
		} else {
			l.UnitMultiplier = uint32(n)
		}
	}
	if s, ok := c.String(f+".algorithm", alg); ok {
		a, err := core.ParseAlgorithm(s)
		if err != nil {
			c.Fail(f+".algorithm", "unknown algorithm %q (want one of %s)", ruleconfig.Clip(s, 32), ruleconfig.Strategies)
		}
		l.Limit.Algorithm = a
	}
	if len(c.Problems) != before {
		return false
	}
	secs := unitSeconds[l.Unit]
	if int64(l.UnitMultiplier) > core.MaxWindow/1e6/secs {
		c.Fail(f+".unit_multiplier", "%d %ss is longer than the longest window, %s", l.UnitMultiplier, strings.ToLower(l.Unit.String()),
			time.Duration(core.MaxWindow)*time.Microsecond)
		return false
	}
	l.window = time.Duration(secs*int64(l.UnitMultiplier)) * time.Second
	l.Limit.Window = l.window
	l.Limit.Limit = int64(l.RequestsPerUnit)
	return true
}

// named is l, a limit of the configuration, as ruleconfig names a
// checked limit (for engine.Policy).
func named(l rl.Limit) ruleconfig.NamedLimit {
	return ruleconfig.NamedLimit{Name: l.Name, Limit: core.Limit{Algorithm: l.Algorithm, Limit: l.Limit,
		Window: int64(l.Window / time.Microsecond), Rate: l.Rate}, Shadow: l.Shadow}
}

// checkPolicy reports, at f's requests_per_unit, a limit core refuses
// (core.Limit.Validate): the one check of each limit, before they are
// compiled together (engine.Policy).
func checkPolicy(c *ruleconfig.Checker, f string, lim rl.Limit, window time.Duration) bool {
	err := named(lim).Validate()
	switch {
	case err == nil:
		return true
	case lim.Algorithm == core.SlidingLog && lim.Limit > core.MaxLogLimit:
		c.Fail(f+".requests_per_unit", "%d is above %d, the most a sliding_log holds", lim.Limit, core.MaxLogLimit)
	default:
		c.Fail(f+".requests_per_unit", "%d per %s with %s: %v", lim.Limit, rl.FormatWindow(window), lim.Algorithm, err)
	}
	return false
}

// shadowLimits reads the rate_limit's shadow_limits at f into
// l.ShadowLimits: each named (1 to 64 printable bytes, unique, not
// stateName, the name of the enforced limit's state), a rate of its own
// above 0 requests.
func (l *Limit) shadowLimits(c *ruleconfig.Checker, f string, sl ruleconfig.List[shadowJSON]) bool {
	if !sl.Set {
		return true
	}
	before := len(c.Problems)
	if !c.Want(f, "a list of {name, unit, requests_per_unit}", sl.Got) {
		return false
	}
	if len(sl.Items) == 0 || len(sl.Items) >= rl.MaxLimits {
		c.Fail(f, "%d shadow limits, want 1 to %d", len(sl.Items), rl.MaxLimits-1)
		return false
	}
	names := map[string]bool{}
	for i := range sl.Items {
		s := &sl.Items[i]
		sf := fmt.Sprintf("%s[%d]", f, i)
		if !c.Object(sf, "a mapping {name, unit, requests_per_unit, unit_multiplier, algorithm}", &s.Fields) {
			continue
		}
		sh := Limit{UnitMultiplier: 1, Limit: rl.Limit{Algorithm: core.FixedWindow, Shadow: true}}
		if !s.Name.Set {
			c.Fail(sf+".name", "missing (a shadow limit's state is kept under its name)")
		} else if name, ok := c.String(sf+".name", s.Name); ok {
			switch err := ruleconfig.CheckName(name); {
			case err != nil:
				c.Fail(sf+".name", "%v", err)
			case name == l.Limit.Name:
				c.Fail(sf+".name", "%q is reserved: the rate_limit's own limit keeps its state under it (name the shadow limit otherwise)", name)
			case names[name]:
				c.Fail(sf+".name", "%q is the name of another shadow limit of this descriptor", name)
			}
			names[name] = true
			sh.Limit.Name = name
		}
		if !sh.rate(c, sf, s.Unit, s.RequestsPerUnit, s.UnitMultiplier, s.Algorithm) {
			continue
		}
		if sh.RequestsPerUnit == 0 {
			c.Fail(sf+".requests_per_unit", "must be above 0 (a shadow limit of 0 would deny everything, which says nothing)")
			continue
		}
		if checkPolicy(c, sf, sh.Limit, sh.window) {
			l.ShadowLimits = append(l.ShadowLimits, sh.Limit)
		}
	}
	return len(c.Problems) == before
}

// match finds the limit of a request's descriptor as envoyproxy/ratelimit
// does: at each depth the entry's key and value, else the first wildcard
// value (in file order) the value matches, else the key alone; a limit
// applies only at the descriptor's last entry (the request's depth must
// equal the configuration's). It returns nil when no limit applies.
func (d *Domain) match(entries []*entry) *node {
	cur := &d.root
	for i, e := range entries {
		next := cur.exact[entryKey{e.GetKey(), e.GetValue()}]
		if next == nil {
			for _, n := range cur.wild {
				if n.key == e.GetKey() && wildcardMatch(n.pattern, e.GetValue()) {
					next = n
					break
				}
			}
		}
		if next == nil {
			next = cur.any[e.GetKey()]
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			if next.limit == nil {
				return nil
			}
			return next
		}
		cur = next
	}
	return nil
}

// hidden reports whether the wildcard node n, listed after the wildcard
// node o at one level, can never be matched: o has n's key and matches
// every value n matches, and match tries wildcards in file order. Read as
// text, n's value (its "*"s included) matches o's pattern exactly when it
// does: o's literal parts hold no "*", so they can only match n's literal
// bytes, and o's "*"s take n's "*"s with whatever they stand for. So
// "tenant-*" hides "tenant-a:*" (a longer prefix must come first), "*"
// hides everything after it, and "a*" and "*b", which each match values
// the other does not, hide neither.
//
// The refusal keeps a file's decisions the same here and in
// envoyproxy/ratelimit, which tries wildcards in file order too, while
// making the most specific of two nested wildcards the one that decides:
// with prefixes, the longest that matches.
func hidden(o, n *node) bool {
	return o.key == n.key && wildcardMatch(o.pattern, n.value)
}

// wildcardMatch reports whether v matches a wildcard value split at its
// "*"s (at least two parts): v starts with the first part, ends with the
// last, and holds the others in order between them, apart; each "*" stands
// for zero or more bytes. Taking each middle part at its first place leaves
// the most room for the rest, so one pass decides.
func wildcardMatch(parts []string, v string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(v) < len(first)+len(last) || !strings.HasPrefix(v, first) || !strings.HasSuffix(v, last) {
		return false
	}
	v = v[len(first) : len(v)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(v, p)
		if i < 0 {
			return false
		}
		v = v[i+len(p):]
	}
	return true
}

// limits calls f for every limit of the domain with its node's path.
func (d *Domain) limits(f func(path string, l *Limit)) {
	var walk func(n *node)
	walk = func(n *node) {
		if n.limit != nil {
			f(n.path, n.limit)
		}
		for _, k := range slices.SortedFunc(maps.Keys(n.exact), func(a, b entryKey) int {
			return strings.Compare(a.key+"\x00"+a.value, b.key+"\x00"+b.value)
		}) {
			walk(n.exact[k])
		}
		for _, c := range n.wild {
			walk(c)
		}
		for _, k := range slices.Sorted(maps.Keys(n.any)) {
			walk(n.any[k])
		}
	}
	walk(&d.root)
}
