package pipeline

import (
	"cmp"
	"slices"
	"strings"
)

// Target is a request in the forms rules are matched in.
type Target struct {
	// Method as sent (MatchMethod compares it).
	Method string
	// Host is CanonicalHost's form.
	Host string
	// Path is MatchPath's form of the canonical path.
	Path string
}

// Prepare checks r's path and host and returns its Target and its
// canonical path (CanonicalPath: the form a proxy forwards, so that the
// path matched is the path served). A path that cannot be cleaned is a
// *PathError, a host that is not host[:port] a *HostError: both 400.
func Prepare(r *Request) (t Target, canonical string, err error) {
	canonical, err = CanonicalPath(r.Path)
	if err != nil {
		return Target{}, "", err
	}
	host, err := CanonicalHost(r.Host)
	if err != nil {
		return Target{}, "", err
	}
	return Target{Method: r.Method, Host: host, Path: MatchPath(canonical)}, canonical, nil
}

// Matcher is the part of a rule that selects requests, in the forms
// requests are matched in. Build it with NewMatcher.
type Matcher struct {
	// Endpoint is the rule's endpoint in MatchPath's form ("/" matches
	// every path).
	Endpoint string
	// Host is "" (any), a host in CanonicalHost's form, or "*." and one
	// (every subdomain).
	Host string
	// Methods are upper case; none matches every method.
	Methods []string
}

// NewMatcher compiles a rule's endpoint (escaped, as on the wire), host
// (as ruleconfig accepted it) and methods (upper case).
func NewMatcher(endpoint, host string, methods []string) (Matcher, error) {
	p, err := CanonicalPath(endpoint)
	if err != nil {
		return Matcher{}, err
	}
	m := Matcher{Endpoint: MatchPath(p), Methods: methods}
	if host != "" {
		m.Host = RuleHost(host)
	}
	return m, nil
}

// Matches reports whether t is the rule's: its path is the endpoint or
// below it ("/v1/pay" matches "/v1/pay" and "/v1/pay/refund", not
// "/v1/payments"; an endpoint ending in "/" matches everything under it),
// its host is the rule's (or a subdomain of a "*." host), and its method
// is one of the rule's (MatchMethod).
func (m *Matcher) Matches(t *Target) bool {
	if !pathMatches(m.Endpoint, t.Path) {
		return false
	}
	if h := m.Host; h != "" {
		if strings.HasPrefix(h, "*.") {
			if !strings.HasSuffix(t.Host, h[1:]) {
				return false
			}
		} else if t.Host != h {
			return false
		}
	}
	return MatchMethod(m.Methods, t.Method)
}

func pathMatches(endpoint, path string) bool {
	if !strings.HasPrefix(path, endpoint) {
		return false
	}
	return len(path) == len(endpoint) || endpoint[len(endpoint)-1] == '/' || path[len(endpoint)] == '/'
}

// CompareMatchers orders rules most specific first, for a stable sort (so
// that configuration order breaks ties): the longest endpoint, then an
// exact host over a wildcard over none, then a rule with methods over one
// without. The first rule in that order that matches a request is its
// rule.
func CompareMatchers(a, b *Matcher) int {
	return cmp.Or(
		-cmp.Compare(len(a.Endpoint), len(b.Endpoint)),
		-cmp.Compare(specificity(a.Host), specificity(b.Host)),
		-cmp.Compare(min(1, len(a.Methods)), min(1, len(b.Methods))),
	)
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

// Explain reports whether t is the rule's, as Matches does, and why: one
// sentence for each of the path, the host and the method, the first that
// fails last. It is for people (rl-wasm-host's explain); Matches decides.
func (m *Matcher) Explain(t *Target) (ok bool, why []string) {
	switch {
	case !pathMatches(m.Endpoint, t.Path):
		return false, []string{"path " + quote(t.Path) + " is not endpoint " + quote(m.Endpoint) + " nor below it"}
	case t.Path == m.Endpoint:
		why = append(why, "path "+quote(t.Path)+" is endpoint "+quote(m.Endpoint))
	default:
		why = append(why, "path "+quote(t.Path)+" is below endpoint "+quote(m.Endpoint))
	}
	switch h := m.Host; {
	case h == "":
		why = append(why, "the rule matches every host")
	case strings.HasPrefix(h, "*."):
		if !strings.HasSuffix(t.Host, h[1:]) {
			return false, append(why, "host "+quote(t.Host)+" is not a subdomain of "+quote(h[2:]))
		}
		why = append(why, "host "+quote(t.Host)+" is a subdomain of "+quote(h[2:]))
	case t.Host != h:
		return false, append(why, "host "+quote(t.Host)+" is not "+quote(h))
	default:
		why = append(why, "host "+quote(t.Host)+" is the rule's")
	}
	switch {
	case len(m.Methods) == 0:
		why = append(why, "the rule matches every method")
	case !MatchMethod(m.Methods, t.Method):
		return false, append(why, "method "+quote(t.Method)+" is not one of "+strings.Join(m.Methods, ", "))
	case upperASCII(t.Method) == "HEAD" && !slices.Contains(m.Methods, "HEAD"):
		why = append(why, "method HEAD is limited as GET, one of "+strings.Join(m.Methods, ", "))
	default:
		why = append(why, "method "+quote(upperASCII(t.Method))+" is one of "+strings.Join(m.Methods, ", "))
	}
	return true, why
}
