package rls

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
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
		return nil, fmt.Errorf("rls config: %w", err)
	}
	files := []string{path}
	if fi.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("rls config: %w", err)
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
			return nil, fmt.Errorf("rls config: %w", err)
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
	p := &parser{}
	d := &Domain{File: name}
	m, ok := doc.(map[string]any)
	if !ok {
		p.fail("", "want a mapping with \"domain\" and \"descriptors\", got %s", kind(doc))
	} else {
		for _, k := range sortedKeys(m) {
			switch k {
			case "domain", "descriptors":
			default:
				p.fail(k, "unknown field (want domain, descriptors)")
			}
		}
		if v, ok := m["domain"]; !ok {
			p.fail("domain", "missing")
		} else if s, ok := p.str("domain", v); ok {
			if err := checkDomain(s); err != nil {
				p.fail("domain", "%v", err)
			}
			d.Name = s
			p.domain = fmt.Sprintf("domain %q", s)
		}
		if v, ok := m["descriptors"]; ok {
			p.descriptors("descriptors", "", v, &d.root)
		}
	}
	if len(p.problems) > 0 {
		return nil, &service.ConfigError{File: name, Problems: p.problems}
	}
	return d, nil
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

type parser struct {
	domain   string
	problems []service.Problem
}

func (p *parser) fail(field, format string, args ...any) {
	p.problems = append(p.problems, service.Problem{Rule: p.domain, Field: field, Message: fmt.Sprintf(format, args...)})
}

var descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric"}

var rateLimitFields = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "unit_multiplier", "algorithm", "fail_open"}

// descriptors parses a descriptor list into parent's children.
func (p *parser) descriptors(field, parentPath string, v any, parent *node) {
	l, ok := v.([]any)
	if !ok {
		p.fail(field, "want a list of descriptors, got %s", kind(v))
		return
	}
	for i, e := range l {
		f := fmt.Sprintf("%s[%d]", field, i)
		m, ok := e.(map[string]any)
		if !ok {
			p.fail(f, "want a mapping {key, value, rate_limit, descriptors}, got %s", kind(e))
			continue
		}
		for _, k := range sortedKeys(m) {
			if !slices.Contains(descriptorFields, k) {
				p.fail(f+"."+k, "unknown field (want %s)", strings.Join(descriptorFields, ", "))
			}
		}
		n := &node{}
		if kv, ok := m["key"]; !ok {
			p.fail(f+".key", "missing")
		} else if s, ok := p.scalar(f+".key", kv); ok {
			if s == "" {
				p.fail(f+".key", "empty")
			}
			n.key = s
		}
		if vv, ok := m["value"]; ok {
			if s, ok := p.scalar(f+".value", vv); ok {
				n.value = s
			}
		}
		n.path = n.key
		if n.value != "" {
			n.path += "_" + n.value
		}
		if parentPath != "" {
			n.path = parentPath + "." + n.path
		}
		shadow := false
		if sv, ok := m["shadow_mode"]; ok {
			shadow, _ = p.boolean(f+".shadow_mode", sv)
		}
		if dv, ok := m["detailed_metric"]; ok {
			p.boolean(f+".detailed_metric", dv) // accepted; metrics never carry request values
		}
		if rv, ok := m["rate_limit"]; ok {
			n.limit = p.rateLimit(f+".rate_limit", rv)
			if n.limit != nil {
				n.limit.Shadow = shadow
			}
		}
		if dv, ok := m["descriptors"]; ok {
			p.descriptors(f+".descriptors", n.path, dv, n)
		}
		p.add(f, parent, n)
	}
}

// add puts n among parent's children, refusing a second descriptor of the
// same key and value at one level.
func (p *parser) add(f string, parent *node, n *node) {
	switch {
	case n.value == "":
		if parent.any == nil {
			parent.any = map[string]*node{}
		}
		if _, dup := parent.any[n.key]; dup {
			p.fail(f, "a second descriptor with key %q and no value at this level", n.key)
			return
		}
		parent.any[n.key] = n
	case strings.HasSuffix(n.value, "*"):
		for _, o := range parent.prefix {
			if o.key == n.key && o.value == n.value {
				p.fail(f, "a second descriptor with key %q and value %q at this level", n.key, n.value)
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
			p.fail(f, "a second descriptor with key %q and value %q at this level", n.key, n.value)
			return
		}
		parent.exact[k] = n
	}
}

func (p *parser) rateLimit(f string, v any) *Limit {
	m, ok := v.(map[string]any)
	if !ok {
		p.fail(f, "want a mapping {unit, requests_per_unit}, got %s", kind(v))
		return nil
	}
	before := len(p.problems)
	for _, k := range sortedKeys(m) {
		if !slices.Contains(rateLimitFields, k) {
			p.fail(f+"."+k, "unknown field (want %s)", strings.Join(rateLimitFields, ", "))
		}
	}
	l := &Limit{UnitMultiplier: 1, Limit: rl.Limit{Algorithm: core.FixedWindow}}
	if uv, ok := m["unlimited"]; ok {
		l.Unlimited, _ = p.boolean(f+".unlimited", uv)
	}
	if nv, ok := m["name"]; ok {
		l.Name, _ = p.str(f+".name", nv)
	}
	if rv, ok := m["replaces"]; ok {
		rl, ok := rv.([]any)
		if !ok {
			p.fail(f+".replaces", "want a list of {name}, got %s", kind(rv))
		}
		for i, e := range rl {
			rf := fmt.Sprintf("%s.replaces[%d]", f, i)
			em, ok := e.(map[string]any)
			if !ok {
				p.fail(rf, "want a mapping {name}, got %s", kind(e))
				continue
			}
			for _, k := range sortedKeys(em) {
				if k != "name" {
					p.fail(rf+"."+k, "unknown field (want name)")
				}
			}
			s, ok := p.str(rf+".name", em["name"])
			switch {
			case !ok:
			case s == "":
				p.fail(rf+".name", "empty")
			case s == l.Name:
				p.fail(rf+".name", "%q is this limit's own name", s)
			default:
				l.Replaces = append(l.Replaces, s)
			}
		}
	}
	if fv, ok := m["fail_open"]; ok {
		l.FailOpen, _ = p.boolean(f+".fail_open", fv)
	}
	uv, hasUnit := m["unit"]
	if l.Unlimited {
		for _, k := range []string{"unit", "requests_per_unit", "unit_multiplier", "algorithm"} {
			if _, ok := m[k]; ok {
				p.fail(f+"."+k, "must be absent when unlimited is true")
			}
		}
		if len(p.problems) != before {
			return nil
		}
		return l
	}
	if !hasUnit {
		p.fail(f+".unit", "missing (second, minute, hour, day, week, month or year)")
	} else if s, ok := p.str(f+".unit", uv); ok {
		u, known := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(s)]
		if !known || u == 0 {
			p.fail(f+".unit", "unknown unit %q (want second, minute, hour, day, week, month or year)", s)
		} else {
			l.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(u)
		}
	}
	if rv, ok := m["requests_per_unit"]; !ok {
		p.fail(f+".requests_per_unit", "missing")
	} else if n, ok := p.integer(f+".requests_per_unit", rv); ok {
		if n < 0 || n > math.MaxUint32 {
			p.fail(f+".requests_per_unit", "%d is outside [0, %d]", n, uint32(math.MaxUint32))
		} else {
			l.RequestsPerUnit = uint32(n)
		}
	}
	if mv, ok := m["unit_multiplier"]; ok {
		if n, ok := p.integer(f+".unit_multiplier", mv); ok {
			if n < 1 || n > math.MaxUint32 {
				p.fail(f+".unit_multiplier", "%d is outside [1, %d]", n, uint32(math.MaxUint32))
			} else {
				l.UnitMultiplier = uint32(n)
			}
		}
	}
	if av, ok := m["algorithm"]; ok {
		if s, ok := p.str(f+".algorithm", av); ok {
			a, err := core.ParseAlgorithm(s)
			if err != nil {
				p.fail(f+".algorithm", "unknown algorithm %q (want fixed, sliding, sliding_log, token, leaky or gcra)", s)
			}
			l.Limit.Algorithm = a
		}
	}
	if len(p.problems) != before {
		return nil
	}
	secs := unitSeconds[l.Unit]
	if int64(l.UnitMultiplier) > core.MaxWindow/1e6/secs {
		p.fail(f+".unit_multiplier", "%d %ss is longer than the longest window, %s", l.UnitMultiplier, strings.ToLower(l.Unit.String()),
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
			p.fail(f+"."+field, "%d is above %d, the most a sliding_log holds", l.Limit.Limit, core.MaxLogLimit)
		} else {
			p.fail(f+"."+field, "%d per %s with %s: %v", l.Limit.Limit, rl.FormatWindow(l.window), l.Limit.Algorithm, err)
		}
		return nil
	}
	l.policy = pol
	return l
}

func (p *parser) str(field string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		p.fail(field, "want a string, got %s", kind(v))
	}
	return s, ok
}

// scalar reads a key or value: a string, or an integer or boolean written
// unquoted (`value: 30`), as envoyproxy/ratelimit reads them.
func (p *parser) scalar(field string, v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case int:
		return strconv.Itoa(v), true
	case uint64:
		return strconv.FormatUint(v, 10), true
	case bool:
		return strconv.FormatBool(v), true
	}
	p.fail(field, "want a string, got %s (quote it)", kind(v))
	return "", false
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
	case uint64:
		if n <= math.MaxInt64 {
			return int64(n), true
		}
	}
	p.fail(field, "want an integer, got %s", kind(v))
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
	case int, int64, uint64, float64:
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
