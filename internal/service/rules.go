package service

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/httplimit"
	"github.com/rlcore/rl/internal/ruleconfig"
)

// InlineNamespace is the base key of decisions on inline limits (limits
// given in a decision-API request rather than by a rule's name); a rule's
// base key is its name.
const InlineNamespace = "inline"

// rule is a RuleSpec ready to decide.
type rule struct {
	spec   RuleSpec
	policy *rl.Policy
	lim    *rl.Limiter
	key    httplimit.KeyFunc
	m      *ruleMetrics
	proxy  http.Handler // decides and forwards a matched request (ruleProxy)
	// endpoint and host are the spec's in the canonical forms requests
	// are matched in (matchPath, canonicalHost; host keeps a "*." prefix).
	endpoint, host string
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
	newLim := func(base string, p *rl.Policy) (*rl.Limiter, error) {
		return rl.New(rl.Config{Store: s.store, Policy: p, BaseKey: base, Clock: s.clock, MaxKeyLength: s.maxKey})
	}
	for i := range cfg.Rules {
		spec := cfg.Rules[i]
		p, err := rl.NewPolicy(spec.Limits...)
		if err != nil { // not reached: ParseConfig validated the limits
			return nil, fmt.Errorf("rule %q: %w", spec.Name, err)
		}
		lim, err := newLim(spec.Name, p)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", spec.Name, err)
		}
		key, err := keyFunc(spec.KeyBy, cfg)
		if err != nil { // not reached: ParseConfig validated the prefixes
			return nil, fmt.Errorf("rule %q: %w", spec.Name, err)
		}
		r := &rule{spec: spec, policy: p, lim: lim, key: key, m: s.metrics.forRule(spec.Name)}
		rs.byName[spec.Name] = r
		if spec.Proxied() {
			if r.endpoint, err = endpointMatchPath(spec.Endpoint); err != nil {
				return nil, fmt.Errorf("rule %q: endpoint: %w", spec.Name, err)
			}
			r.host = ruleHost(spec.Host)
			rs.proxied = append(rs.proxied, r)
		}
	}
	slices.SortStableFunc(rs.proxied, func(a, b *rule) int {
		return cmp.Or(
			-cmp.Compare(len(a.endpoint), len(b.endpoint)),
			-cmp.Compare(specificity(a.host), specificity(b.host)),
			-cmp.Compare(min(1, len(a.spec.Methods)), min(1, len(b.spec.Methods))),
		)
	})
	inline, err := newLim(InlineNamespace, nil)
	if err != nil {
		return nil, err
	}
	rs.inline, rs.inlineM = inline, s.metrics.forRule(InlineNamespace)
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

// specificity ranks host patterns: exact host 2, wildcard 1, any 0.
func specificity(host string) int {
	switch {
	case host == "":
		return 0
	case strings.HasPrefix(host, "*."):
		return 1
	}
	return 2
}

// match returns the most specific proxied rule matching r, whose path in
// canonical form (canonicalPath) is path, or nil.
func (rs *ruleSet) match(r *http.Request, path string) *rule {
	if len(rs.proxied) == 0 {
		return nil
	}
	path = matchPath(path)
	host, hostRead := "", false
	for _, ru := range rs.proxied {
		if ru.host != "" && !hostRead {
			host, hostRead = requestHost(r), true
		}
		if ru.matches(r, path, host) {
			return ru
		}
	}
	return nil
}

func (ru *rule) matches(r *http.Request, path, host string) bool {
	if !pathMatches(ru.endpoint, path) {
		return false
	}
	if h := ru.host; h != "" {
		if strings.HasPrefix(h, "*.") {
			if !strings.HasSuffix(host, h[1:]) {
				return false
			}
		} else if host != h {
			return false
		}
	}
	if len(ru.spec.Methods) > 0 && !slices.Contains(ru.spec.Methods, r.Method) {
		return false
	}
	return true
}

// pathMatches reports whether path is endpoint or below it: "/v1/pay"
// matches "/v1/pay" and "/v1/pay/refund" but not "/v1/payments"; an
// endpoint ending in "/" matches everything under it. Both are in the form
// matchPath gives.
func pathMatches(endpoint, path string) bool {
	if !strings.HasPrefix(path, endpoint) {
		return false
	}
	return len(path) == len(endpoint) || endpoint[len(endpoint)-1] == '/' || path[len(endpoint)] == '/'
}

// endpointMatchPath is a rule's endpoint, written as on the wire (escaped:
// "/a%20b"; ParseConfig checked it is canonical), in the form request
// paths are matched in.
func endpointMatchPath(endpoint string) (string, error) {
	p, err := canonicalPath(endpoint)
	if err != nil {
		return "", err
	}
	return matchPath(p), nil
}

// ruleHost is a rule's host pattern in canonical form.
func ruleHost(h string) string {
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		return "*." + canonicalHost(rest)
	}
	return canonicalHost(h)
}

// requestHost is r's host in canonical form: lower case, without a port or
// trailing dots.
func requestHost(r *http.Request) string { return canonicalHost(r.Host) }

// keyFunc returns the key function a rule's key_by names (validated);
// key_by: ip keys by cfg's client prefixes.
func keyFunc(keyBy string, cfg *Config) (httplimit.KeyFunc, error) {
	switch {
	case keyBy == "ip":
		return httplimit.ClientIPKey(httplimit.IPKeyConfig{
			TrustedProxies: cfg.TrustedProxies, IPv4Prefix: cfg.IPv4Prefix, IPv6Prefix: cfg.IPv6Prefix})
	case keyBy == "api_key":
		return hashedAPIKey(httplimit.APIKey()), nil
	case keyBy == "global":
		return func(*http.Request) (string, error) { return "global", nil }, nil
	case strings.HasPrefix(keyBy, "header:"):
		return httplimit.Header(keyBy[len("header:"):]), nil
	case strings.HasPrefix(keyBy, "query:"):
		return httplimit.Query(keyBy[len("query:"):]), nil
	}
	panic("service: unchecked key_by " + keyBy)
}

// hashedAPIKey keys by a digest of the API key: secrets never reach the
// store (or PostgreSQL's rows and logs), and tokens of any length (JWTs)
// make valid keys. The key is "sha256:" and the first 32 hex digits (128
// bits) of the SHA-256 of the token, as APIKeyDigest computes it.
func hashedAPIKey(f httplimit.KeyFunc) httplimit.KeyFunc {
	return func(r *http.Request) (string, error) {
		k, err := f(r)
		if err != nil {
			return "", err
		}
		return APIKeyDigest(k), nil
	}
}

// APIKeyDigest is the key under which rules with key_by: api_key keep an
// API key's state; send it as "key" to decide or reset the same key through
// the decision API.
func APIKeyDigest(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// errCost is a cost header that is not an integer in [min, core.MaxCost].
type errCost struct {
	value string
	min   int64
}

func (e errCost) Error() string {
	return fmt.Sprintf("cost %q is not an integer between %d and %d", e.value, e.min, core.MaxCost)
}

// cost returns the cost of a proxied request: the rule's cost, or the cost
// header's value, which must be a decimal integer in [MinCost, MaxCost]
// (digits only: no sign, spaces or exponent) and present at most once. A
// proxied request is never free: cost 0 exists only as a decision-API peek.
func (ru *rule) cost(r *http.Request) (int64, error) {
	if ru.spec.CostHeader == "" {
		return ru.spec.Cost, nil
	}
	vs := r.Header.Values(ru.spec.CostHeader)
	if len(vs) == 0 {
		return ru.spec.Cost, nil
	}
	v := vs[0]
	if len(vs) > 1 {
		return 0, errCost{ruleconfig.Clip(strings.Join(vs, ", "), 32), ru.spec.MinCost}
	}
	n, ok := parseCost(v)
	if !ok || n < ru.spec.MinCost || n > core.MaxCost {
		return 0, errCost{ruleconfig.Clip(v, 32), ru.spec.MinCost}
	}
	return n, nil
}

// parseCost parses 1 to 19 ASCII digits.
func parseCost(v string) (int64, bool) {
	if v == "" || len(v) > 19 {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

// dropLegacyRateLimitFields removes an upstream's X-RateLimit-* fields.
func dropLegacyRateLimitFields(resp *http.Response) error {
	for _, f := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
		delete(resp.Header, f)
	}
	return nil
}

// pathOverrideFields are request header fields some upstreams take as the
// request's path; the proxy never forwards them.
var pathOverrideFields = []string{"X-Original-Url", "X-Rewrite-Url"}

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
			// must see the path that was matched.
			for _, f := range pathOverrideFields {
				delete(pr.Out.Header, f)
			}
		},
		Transport:    rt,
		ErrorLog:     slogErrorLog(s.log),
		ErrorHandler: s.upstreamError(u, rt.d),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rp.ServeHTTP(interimWriter{w}, r) })
}
