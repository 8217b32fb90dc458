package service

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/httplimit"
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

// build compiles cfg into a rule set over the service's store and decider.
func (s *Service) build(cfg *Config) (*ruleSet, error) {
	rs := &ruleSet{cfg: cfg, byName: make(map[string]*rule, len(cfg.Rules)), loaded: time.Now()}
	newLim := func(base string, p *rl.Policy) (*rl.Limiter, error) {
		return rl.New(rl.Config{Store: s.store, Policy: p, BaseKey: base, Clock: s.clock, Decider: s.decider, MaxKeyLength: s.maxKey})
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
		r := &rule{spec: spec, policy: p, lim: lim, key: keyFunc(spec.KeyBy, cfg.TrustedProxies), m: s.metrics.forRule(spec.Name)}
		rs.byName[spec.Name] = r
		if spec.Proxied() {
			rs.proxied = append(rs.proxied, r)
		}
	}
	slices.SortStableFunc(rs.proxied, func(a, b *rule) int {
		return cmp.Or(
			-cmp.Compare(len(a.spec.Endpoint), len(b.spec.Endpoint)),
			-cmp.Compare(specificity(a.spec.Host), specificity(b.spec.Host)),
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
		rs.upstream = s.reverseProxy(u, nil)
		rs.decided = s.reverseProxy(u, dropLegacyRateLimitFields)
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

// match returns the most specific proxied rule matching r, or nil.
func (rs *ruleSet) match(r *http.Request) *rule {
	if len(rs.proxied) == 0 {
		return nil
	}
	host := ""
	for _, ru := range rs.proxied {
		if ru.spec.Host != "" && host == "" {
			host = requestHost(r)
		}
		if ru.matches(r, host) {
			return ru
		}
	}
	return nil
}

func (ru *rule) matches(r *http.Request, host string) bool {
	if !pathMatches(ru.spec.Endpoint, r.URL.Path) {
		return false
	}
	if h := ru.spec.Host; h != "" {
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
// endpoint ending in "/" matches everything under it.
func pathMatches(endpoint, path string) bool {
	if !strings.HasPrefix(path, endpoint) {
		return false
	}
	return len(path) == len(endpoint) || endpoint[len(endpoint)-1] == '/' || path[len(endpoint)] == '/'
}

// requestHost is r's host, lower case, without a port.
func requestHost(r *http.Request) string {
	h := r.Host
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// keyFunc returns the key function a rule's key_by names (validated).
func keyFunc(keyBy string, trusted []netip.Prefix) httplimit.KeyFunc {
	switch {
	case keyBy == "ip":
		return httplimit.ClientIP(trusted...)
	case keyBy == "api_key":
		return hashedAPIKey(httplimit.APIKey())
	case keyBy == "global":
		return func(*http.Request) (string, error) { return "global", nil }
	case strings.HasPrefix(keyBy, "header:"):
		return httplimit.Header(keyBy[len("header:"):])
	case strings.HasPrefix(keyBy, "query:"):
		return httplimit.Query(keyBy[len("query:"):])
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

// errCost is a cost header that is not an integer in [0, core.MaxCost].
type errCost struct{ value string }

func (e errCost) Error() string {
	return fmt.Sprintf("cost %q is not an integer between 0 and %d", e.value, core.MaxCost)
}

// cost returns the cost of a proxied request.
func (ru *rule) cost(r *http.Request) (int64, error) {
	if ru.spec.CostHeader == "" {
		return ru.spec.Cost, nil
	}
	v := r.Header.Get(ru.spec.CostHeader)
	if v == "" {
		return ru.spec.Cost, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 || n > core.MaxCost {
		return 0, errCost{clipString(v, 32)}
	}
	return n, nil
}

func clipString(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// dropLegacyRateLimitFields removes an upstream's X-RateLimit-* fields.
func dropLegacyRateLimitFields(resp *http.Response) error {
	for _, f := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
		delete(resp.Header, f)
	}
	return nil
}

// reverseProxy forwards to u over the service's shared transport.
func (s *Service) reverseProxy(u *url.URL, modify func(*http.Response) error) http.Handler {
	return &httputil.ReverseProxy{
		ModifyResponse: modify,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			// Keep the chain (as nginx's $proxy_add_x_forwarded_for does);
			// the upstream decides whom to trust, as key_by: ip does here.
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
		},
		Transport: s.transport,
		ErrorLog:  slogErrorLog(s.log),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				s.metrics.rejected.WithLabelValues("body_too_large").Inc()
				http.Error(w, "Request body too large", http.StatusRequestEntityTooLarge)
				return
			}
			s.log.Warn("upstream failed", "upstream", u.Redacted(), "method", r.Method, "path", r.URL.Path, "err", err)
			http.Error(w, "Bad gateway: the upstream failed", http.StatusBadGateway)
		},
	}
}
