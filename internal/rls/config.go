package rls

import (
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
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/ruleconfig"
	"github.com/rlcore/rl/internal/service"
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
	root node
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
	// Children: by key and value, by value prefix (a value ending in "*"),
	// by key alone (any value), in that order of preference.
	exact  map[entryKey]*node
	prefix []*node
	any    map[string]*node
}

type entryKey struct{ key, value string }

// Limit is the rate_limit of a descriptor.
type Limit struct {
	// Unlimited descriptors are answered OK without a decision.
	Unlimited bool
	// Shadow (shadow_mode) decides and counts but never denies.
	Shadow bool
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
	// default fixed_window), RequestsPerUnit per window.
	Limit rl.Limit

	policy  *rl.Policy
	current *rlsv3.RateLimitResponse_RateLimit
	window  time.Duration
	m       *descMetrics
}

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

// LoadConfig reads a YAML file of one domain, or every .yaml and .yml file
// (not starting with ".") of a directory, one domain each, as
// envoyproxy/ratelimit reads its runtime directory. Every mistake of every
// file is reported in one *service.ConfigError naming the file, the domain
// and the field.
func LoadConfig(path string) (*Config, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rls: config: %w", err)
	}
	files := []string{path}
	if fi.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("rls: config: %w", err)
		}
		files = files[:0]
		for _, e := range ents {
			ext := strings.ToLower(filepath.Ext(e.Name()))
			if !e.IsDir() && !strings.HasPrefix(e.Name(), ".") && (ext == ".yaml" || ext == ".yml") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		if len(files) == 0 {
			return nil, &service.ConfigError{File: path, Problems: []service.Problem{{Message: "no .yaml or .yml file in the directory"}}}
		}
	}
	cfg := &Config{Path: path, Domains: map[string]*Domain{}}
	ce := &service.ConfigError{File: path}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("rls: config: %w", err)
		}
		d, err := ParseDomain(f, data)
		if err != nil {
			if fe, ok := err.(*service.ConfigError); ok {
				for _, p := range fe.Problems {
					if fi.IsDir() {
						p.Rule = strings.TrimSuffix(filepath.Base(f)+": "+p.Rule, ": ")
					}
					ce.Problems = append(ce.Problems, p)
				}
				continue
			}
			return nil, err
		}
		if prev, dup := cfg.Domains[d.Name]; dup {
			ce.Problems = append(ce.Problems, service.Problem{Rule: filepath.Base(f), Field: "domain",
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

// ParseDomain validates one configuration file in envoyproxy/ratelimit's
// format (YAML; JSON is YAML too); name is used in errors.
func ParseDomain(name string, data []byte) (*Domain, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &service.ConfigError{File: name, Problems: []service.Problem{{Message: "YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}}
	}
	js, err := ruleconfig.AppendJSON(nil, doc)
	if err != nil {
		return nil, &service.ConfigError{File: name, Problems: []service.Problem{{Message: "YAML: " + err.Error()}}}
	}
	var f domainJSON
	if ps := ruleconfig.Decode(js, &f); len(ps) > 0 {
		return nil, &service.ConfigError{File: name, Problems: ps}
	}
	d, ps := f.Validate(name)
	if len(ps) > 0 {
		return nil, &service.ConfigError{File: name, Problems: ps}
	}
	return d, nil
}

// domainJSON is a configuration file as written.
type domainJSON struct {
	ruleconfig.Fields
	Domain      ruleconfig.String               `json:"domain"`
	Descriptors ruleconfig.List[descriptorJSON] `json:"descriptors"`
}

// descriptorJSON is a descriptor as written.
type descriptorJSON struct {
	ruleconfig.Fields
	Key            scalar                          `json:"key"`
	Value          scalar                          `json:"value"`
	RateLimit      rateLimitJSON                   `json:"rate_limit"`
	Descriptors    ruleconfig.List[descriptorJSON] `json:"descriptors"`
	ShadowMode     ruleconfig.Bool                 `json:"shadow_mode"`
	DetailedMetric ruleconfig.Bool                 `json:"detailed_metric"` // accepted; metrics never carry request values
}

// rateLimitJSON is a descriptor's rate_limit as written.
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
func (f *domainJSON) Validate(file string) (*Domain, []service.Problem) {
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
		descriptors(c, "descriptors", "", f.Descriptors, &d.root)
	}
	return d, c.Problems
}

// checkDomain accepts 1 to 64 bytes of printable ASCII without spaces: the
// domain is part of every key the store holds.
func checkDomain(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("want 1 to 64 bytes, got %d", len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c >= 0x7f {
			return fmt.Errorf("%q: byte %d is not printable ASCII (or is a space)", s, i)
		}
	}
	return nil
}

// descriptors checks a descriptor list into parent's children.
func descriptors(c *ruleconfig.Checker, field, parentPath string, l ruleconfig.List[descriptorJSON], parent *node) {
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
			if s == "" {
				c.Fail(f+".key", "empty")
			}
			n.key = s
		}
		if s, ok := dj.Value.check(c, f+".value"); ok {
			n.value = s
		}
		n.path = n.key
		if n.value != "" {
			n.path += "_" + n.value
		}
		if parentPath != "" {
			n.path = parentPath + "." + n.path
		}
		shadow, _ := c.Bool(f+".shadow_mode", dj.ShadowMode)
		c.Bool(f+".detailed_metric", dj.DetailedMetric)
		if dj.RateLimit.Set {
			n.limit = dj.RateLimit.check(c, f+".rate_limit")
			if n.limit != nil {
				n.limit.Shadow = shadow
			}
		}
		if dj.Descriptors.Set {
			descriptors(c, f+".descriptors", n.path, dj.Descriptors, n)
		}
		add(c, f, parent, n)
	}
}

// add puts n among parent's children, refusing a second descriptor of the
// same key and value at one level.
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
	case strings.HasSuffix(n.value, "*"):
		for _, o := range parent.prefix {
			if o.key == n.key && o.value == n.value {
				c.Fail(f, "a second descriptor with key %q and value %q at this level", n.key, n.value)
				return
			}
		}
		parent.prefix = append(parent.prefix, n)
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
		for _, k := range []struct {
			name string
			set  bool
		}{{"unit", r.Unit.Set}, {"requests_per_unit", r.RequestsPerUnit.Set}, {"unit_multiplier", r.UnitMultiplier.Set}, {"algorithm", r.Algorithm.Set}} {
			if k.set {
				c.Fail(f+"."+k.name, "must be absent when unlimited is true")
			}
		}
		if len(c.Problems) != before {
			return nil
		}
		return l
	}
	if !r.Unit.Set {
		c.Fail(f+".unit", "missing (second, minute, hour, day, week, month or year)")
	} else if s, ok := c.String(f+".unit", r.Unit); ok {
		u, known := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(s)]
		if !known || u == 0 {
			c.Fail(f+".unit", "unknown unit %q (want second, minute, hour, day, week, month or year)", ruleconfig.Clip(s, 32))
		} else {
			l.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(u)
		}
	}
	if !r.RequestsPerUnit.Set {
		c.Fail(f+".requests_per_unit", "missing")
	} else if n, ok := c.Int(f+".requests_per_unit", r.RequestsPerUnit); ok {
		if n < 0 || n > math.MaxUint32 {
			c.Fail(f+".requests_per_unit", "%d is outside [0, %d]", n, uint32(math.MaxUint32))
		} else {
			l.RequestsPerUnit = uint32(n)
		}
	}
	if n, ok := c.Int(f+".unit_multiplier", r.UnitMultiplier); ok {
		if n < 1 || n > math.MaxUint32 {
			c.Fail(f+".unit_multiplier", "%d is outside [1, %d]", n, uint32(math.MaxUint32))
		} else {
			l.UnitMultiplier = uint32(n)
		}
	}
	if s, ok := c.String(f+".algorithm", r.Algorithm); ok {
		a, err := core.ParseAlgorithm(s)
		if err != nil {
			c.Fail(f+".algorithm", "unknown algorithm %q (want one of %s)", ruleconfig.Clip(s, 32), ruleconfig.Strategies)
		}
		l.Limit.Algorithm = a
	}
	if len(c.Problems) != before {
		return nil
	}
	secs := unitSeconds[l.Unit]
	if int64(l.UnitMultiplier) > core.MaxWindow/1e6/secs {
		c.Fail(f+".unit_multiplier", "%d %ss is longer than the longest window, %s", l.UnitMultiplier, strings.ToLower(l.Unit.String()),
			time.Duration(core.MaxWindow)*time.Microsecond)
		return nil
	}
	l.window = time.Duration(secs*int64(l.UnitMultiplier)) * time.Second
	l.Limit.Window = l.window
	l.Limit.Limit = int64(l.RequestsPerUnit)
	l.current = &rlsv3.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit}
	if l.UnitMultiplier != 1 {
		l.current.UnitMultiplier = wrapperspb.UInt32(l.UnitMultiplier)
	}
	if l.RequestsPerUnit == 0 {
		return l // denies everything; no state
	}
	l.Limit.Name = rl.DefaultLimitName(l.Limit, 2)
	pol, err := rl.NewPolicy(l.Limit)
	if err != nil {
		field := "requests_per_unit"
		if l.Limit.Algorithm == core.SlidingLog && l.Limit.Limit > core.MaxLogLimit {
			c.Fail(f+"."+field, "%d is above %d, the most a sliding_log holds", l.Limit.Limit, core.MaxLogLimit)
		} else {
			c.Fail(f+"."+field, "%d per %s with %s: %v", l.Limit.Limit, rl.FormatWindow(l.window), l.Limit.Algorithm, err)
		}
		return nil
	}
	l.policy = pol
	return l
}

// match finds the limit of a request's descriptor as envoyproxy/ratelimit
// does: at each depth the entry's key and value, else a value prefix, else
// the key alone; a limit applies only at the descriptor's last entry (the
// request's depth must equal the configuration's). It returns nil when no
// limit applies.
func (d *Domain) match(entries []*entry) *node {
	cur := &d.root
	for i, e := range entries {
		next := cur.exact[entryKey{e.GetKey(), e.GetValue()}]
		if next == nil {
			for _, n := range cur.prefix {
				if n.key == e.GetKey() && strings.HasPrefix(e.GetValue(), n.value[:len(n.value)-1]) {
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
		for _, c := range n.prefix {
			walk(c)
		}
		for _, k := range slices.Sorted(maps.Keys(n.any)) {
			walk(n.any[k])
		}
	}
	walk(&d.root)
}
