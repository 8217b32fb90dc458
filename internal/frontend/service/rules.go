package service

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/httpflow"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/quotaclient"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

// InlineNamespace is the base key of decisions on inline limits (limits
// given in a decision-API request rather than by a rule's name); a rule's
// base key is its name. ruleconfig's Store keys say why no two meet.
const InlineNamespace = ruleconfig.InlineNamespace

// rule is a RuleSpec ready to decide.
type rule struct {
	spec RuleSpec
	// eng is what the engine decides the rule's requests against: its
	// limiter, policy and fail policy, how it reads a request's key and
	// cost, and its overrides' policies (buildOverrides).
	eng    engine.Rule
	policy *rl.Policy
	lim    *rl.Limiter
	// global is a global rule's RLQS bucket, which lim decides on; nil
	// for the others.
	global *quotaclient.Bucket
	m      *ruleMetrics
	fields httpflow.Fields // what its RateLimit fields say
	proxy  http.Handler    // decides and forwards a matched request (ruleProxy)
	// match selects the rule's proxied requests.
	match pipeline.Matcher
	// overrides are the rule's overrides' labels and counters, by the
	// index of eng.Overrides (buildOverrides).
	overrides []*override
}

// ruleSet is everything a configuration load produces; requests read it
// through an atomic pointer, so a reload swaps it whole while requests in
// flight finish with the one they started with.
type ruleSet struct {
	cfg     *Config
	byName  map[string]*rule
	proxied []*rule // most specific first
	inline  *rl.Limiter
	inlineM *ruleMetrics
	// inlineRules decide inline limits: failing closed, and open.
	inlineRules [2]engine.Rule
	// upstream forwards proxied requests; nil without an upstream.
	// decided forwards the requests a rule decided: it drops the
	// upstream's own X-RateLimit-* fields, which would contradict ours
	// (draft-11 RateLimit fields of both are kept: they form one list).
	upstream, decided http.Handler
	loaded            time.Time
}

// build compiles cfg into a rule set over the service's store.
func (s *Service) build(cfg *Config) (*ruleSet, error) {
	rs := &ruleSet{cfg: cfg, byName: make(map[string]*rule, len(cfg.Rules)), loaded: time.Now()}
	newLim := s.eng.Limiter
	for i := range cfg.Rules {
		spec := cfg.Rules[i]
		p, err := s.eng.Compile(fmt.Sprintf("rule %q", spec.Name), spec.Limits)
		if err != nil {
			return nil, err
		}
		lim, bucket, err := s.ruleLimiter(spec, p)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", spec.Name, err)
		}
		ip := pipeline.IPKey{TrustedProxies: cfg.TrustedProxies, IPv4Prefix: cfg.IPv4Prefix, IPv6Prefix: cfg.IPv6Prefix}
		r := &rule{spec: spec, policy: p, lim: lim, global: bucket, m: s.metrics.forRule(spec.Name, p.Limits()),
			fields: httpflow.Fields{Closest: spec.Closest, QuotaUnit: spec.QuotaUnit}}
		r.eng = engine.Rule{Name: spec.Name, Limiter: lim, Policy: p, FailOpen: spec.FailOpen,
			Reading: engine.Reading{KeyBy: spec.KeyBy, IP: ip, Cost: spec.Cost, MinCost: spec.MinCost, CostHeader: spec.CostHeader}}
		if spec.PartitionKey {
			r.fields.PartitionKey = httpflow.PartitionKeyFunc(cfg.PartitionKeySecret, spec.Name)
		}
		if err := s.buildOverrides(r); err != nil {
			return nil, fmt.Errorf("rule %q: %w", spec.Name, err)
		}
		rs.byName[spec.Name] = r
		if spec.Proxied() {
			if r.match, err = pipeline.NewMatcher(spec.Endpoint, spec.Host, spec.Methods); err != nil {
				return nil, fmt.Errorf("rule %q: endpoint: %w", spec.Name, err)
			}
			rs.proxied = append(rs.proxied, r)
		}
	}
	slices.SortStableFunc(rs.proxied, func(a, b *rule) int { return pipeline.CompareMatchers(&a.match, &b.match) })
	inline, err := newLim(InlineNamespace, nil)
	if err != nil {
		return nil, err
	}
	rs.inline, rs.inlineM = inline, s.metrics.forRule(InlineNamespace, nil)
	rs.inlineRules[0] = engine.Rule{Name: InlineNamespace, Limiter: inline}
	rs.inlineRules[1] = engine.Rule{Name: InlineNamespace, Limiter: inline, FailOpen: true}
	switch cfg.Upstream {
	case "":
	case "demo":
		rs.upstream = demoUpstream()
		rs.decided = rs.upstream
	default:
		u, err := url.Parse(cfg.Upstream)
		if err != nil { // not reached: ParseConfig checked it
			return nil, err
		}
		rt := s.upstreamTransport(cfg)
		rs.upstream = s.reverseProxy(u, rt, nil)
		rs.decided = s.reverseProxy(u, rt, dropLegacyRateLimitFields)
	}
	for _, r := range rs.proxied {
		if r.proxy, err = s.ruleProxy(rs, r); err != nil {
			return nil, fmt.Errorf("rule %q: %w", r.spec.Name, err)
		}
	}
	return rs, nil
}

// match returns the most specific proxied rule matching t, or nil.
func (rs *ruleSet) match(t *pipeline.Target) *rule {
	for _, ru := range rs.proxied {
		if ru.match.Matches(t) {
			return ru
		}
	}
	return nil
}

// APIKeyDigest is the key under which rules with key_by: api_key keep an
// API key's state (pipeline.APIKeyDigest); send it as "key" to decide or
// reset the same key through the decision API.
func APIKeyDigest(apiKey string) string { return pipeline.APIKeyDigest(apiKey) }

// dropLegacyRateLimitFields removes an upstream's X-RateLimit-* fields.
func dropLegacyRateLimitFields(resp *http.Response) error {
	for _, f := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
		delete(resp.Header, f)
	}
	return nil
}

// copyBuffers are the buffers the proxies copy response bodies through,
// shared by every rule set.
var copyBuffers httputil.BufferPool = &bufferPool{}

// bufferPool is an httputil.BufferPool of 32 KiB buffers (ReverseProxy's
// own size).
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// reverseProxy forwards to u over rt. Hop-by-hop header fields, those the
// standard names and those the upstream's (or the client's) Connection
// field lists, are dropped by httputil.ReverseProxy in both directions.
func (s *Service) reverseProxy(u *url.URL, rt *headerTimeout, modify func(*http.Response) error) http.Handler {
	rp := &httputil.ReverseProxy{
		ModifyResponse: modify,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			// Keep the chain (as nginx's $proxy_add_x_forwarded_for does);
			// the upstream decides whom to trust, as key_by: ip does here.
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
			// Some upstreams (IIS URL Rewrite, Symfony, Zend) serve the
			// path these name instead of the request's: the upstream
			// must see the path that was matched. Nor may it see a
			// client's own field named like the matched rule's
			// response_cost_header (ruleProxy), in which it reports the
			// actual cost: pipeline.DropsField names both.
			rc, _ := pr.In.Context().Value(responseCostKey{}).(string)
			for f := range pr.Out.Header {
				if pipeline.DropsField(f, rc) {
					delete(pr.Out.Header, f)
				}
			}
		},
		Transport:    rt,
		ErrorLog:     slogErrorLog(s.log),
		ErrorHandler: s.upstreamError(u, rt.d),
		// Without a pool ReverseProxy allocates a 32 KiB buffer for every
		// response it copies: most of the proxy's garbage.
		BufferPool: copyBuffers,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rp.ServeHTTP(interimWriter{w}, r) })
}
