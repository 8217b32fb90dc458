package pipeline

import (
	"encoding/json"
	"strconv"
	"strings"
)

// The problem types of draft-ietf-httpapi-ratelimit-headers (registered
// with IANA's HTTP Problem Types), as RFC 9457 problem details name them.
const (
	// ProblemQuotaExceeded: the request exceeds one or more quota
	// policies (a 429).
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// ProblemReducedCapacity: the request cannot be served now because
	// of a temporary reduction in capacity (a 503: load, or the limiter's
	// store down).
	ProblemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// ProblemContentType is the media type of a problem details body.
const ProblemContentType = "application/problem+json"

// Problem is an RFC 9457 problem details object with the draft's extension
// member "violated-policies".
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	// Detail says what happened to this request, in words for people.
	Detail string `json:"detail,omitempty"`
	// ViolatedPolicies names the policies (limits) whose quota the
	// request exceeded, as the RateLimit fields name them.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// QuotaExceeded is the problem of a 429: the quota-exceeded type (the
// draft's title) naming the limits that denied, the deciding one first
// (Verdict.Violated).
func QuotaExceeded(v *Verdict) Problem {
	detail := "Rate limit exceeded: retry after the Retry-After field's seconds"
	if v.Decider().Never {
		detail = "Rate limit exceeded: the request's cost exceeds the limit; no retry passes"
	}
	return Problem{Type: ProblemQuotaExceeded, Title: "Request cannot be satisfied as assigned quota has been exceeded",
		Status: 429, Detail: detail, ViolatedPolicies: v.Violated()}
}

// ReducedCapacity is the problem of a 503 the limiter answers instead of
// deciding (load, or its store down): the temporary-reduced-capacity type
// with detail, the plain-text answer's words. No policy was exceeded, so
// it names none.
func ReducedCapacity(detail string) Problem {
	return Problem{Type: ProblemReducedCapacity, Title: "Request cannot be satisfied due to temporary server capacity constraints",
		Status: 503, Detail: strings.TrimSpace(detail)}
}

// JSON is the problem's body.
func (p *Problem) JSON() []byte {
	b, err := json.Marshal(p)
	if err != nil { // not reached: strings and an int
		panic(err)
	}
	return append(b, '\n')
}

// ProblemMode chooses the body of the limiter's 429s and 503s.
type ProblemMode uint8

// The modes, named by ProblemModes.
const (
	// ProblemAuto: problem details when the request accepts JSON
	// (AcceptsJSON), plain text otherwise. The default.
	ProblemAuto ProblemMode = iota
	// ProblemJSON: problem details always.
	ProblemJSON
	// ProblemText: plain text always.
	ProblemText
)

// ProblemModes are the modes' names in configurations ("problem_details"),
// indexed by mode.
func ProblemModes() []string { return []string{"auto", "json", "text"} }

// ParseProblemMode returns the mode named s (ProblemModes).
func ParseProblemMode(s string) (ProblemMode, bool) {
	for i, n := range ProblemModes() {
		if n == s {
			return ProblemMode(i), true
		}
	}
	return 0, false
}

func (m ProblemMode) String() string {
	if ms := ProblemModes(); int(m) < len(ms) {
		return ms[m]
	}
	return "unknown"
}

// Wants reports whether a request whose Accept field values are accept
// gets problem details under m.
func (m ProblemMode) Wants(accept []string) bool {
	switch m {
	case ProblemJSON:
		return true
	case ProblemText:
		return false
	}
	return AcceptsJSON(accept)
}

// AcceptsJSON reports whether an Accept field (its values, RFC 9110
// §12.5.1) prefers JSON to plain text: a range naming
// application/problem+json, application/json or application/* with a
// weight above 0, at least that of text/plain. A wildcard "*/*" alone
// (curl's default, a browser's fallback) is not a request for JSON, and
// neither is no Accept field.
func AcceptsJSON(accept []string) bool {
	var qJSON, qText float64
	jsonSpec, textSpec := 0, 0 // specificity of the best match so far: 3 exact, 2 type/*, 1 */*
	for _, v := range accept {
		for _, r := range strings.Split(v, ",") {
			mt, params, _ := strings.Cut(r, ";")
			mt = strings.ToLower(strings.TrimSpace(mt))
			q := weight(params)
			// The most specific range decides (of two as specific, the
			// higher weight).
			if s := matchSpec(mt, "application", "problem+json", "json"); s > jsonSpec || s == jsonSpec && q > qJSON {
				jsonSpec, qJSON = s, q
			}
			if s := matchSpec(mt, "text", "plain"); s > textSpec || s == textSpec && q > qText {
				textSpec, qText = s, q
			}
		}
	}
	return jsonSpec >= 2 && qJSON > 0 && qJSON >= qText
}

// matchSpec returns how specifically the media range mt matches
// typ/sub for one of subs: 3 exactly, 2 as typ/*, 1 as */*, 0 not.
func matchSpec(mt, typ string, subs ...string) int {
	t, s, ok := strings.Cut(mt, "/")
	switch {
	case !ok:
		return 0
	case t == "*" && s == "*":
		return 1
	case t != typ:
		return 0
	case s == "*":
		return 2
	}
	for _, sub := range subs {
		if s == sub {
			return 3
		}
	}
	return 0
}

// weight is a media range's q parameter (1 when absent or malformed).
func weight(params string) float64 {
	for _, p := range strings.Split(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
			if q, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && q >= 0 && q <= 1 {
				return q
			}
		}
	}
	return 1
}
