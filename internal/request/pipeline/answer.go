package pipeline

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"math"
	"strconv"
	"strings"

	"github.com/rlcore/rl/core"
)

// LimitState is one limit of a decided policy, in the units of the
// answer's fields.
type LimitState struct {
	Name string
	// Allowed: this limit admitted the cost (when the request was denied
	// by another, it was not charged).
	Allowed bool
	// Never: denied, and no retry passes (the cost exceeds the limit).
	Never bool
	// Shadow: a shadow limit (rl.Limit.Shadow), which never denies (its
	// Allowed false is a would-deny). The answer's fields leave it out.
	Shadow           bool
	Limit, Remaining int64
	// Window, ResetAfter, RetryAfter and NextAfter are in µs; RetryAfter
	// is 0 when allowed, NextAfter 0 when nothing is missing
	// (core.Decision.NextAfter).
	Window, ResetAfter, RetryAfter, NextAfter int64
}

// Verdict is what a decision says about a request: every limit of its
// policy and which one decided.
type Verdict struct {
	Allowed bool
	// Limits are every limit of the policy, in the policy's order.
	Limits []LimitState
	// Deciding indexes Limits: when denied, the denying limit with the
	// latest retry; when allowed, the one with the fewest remaining, the
	// closest to exhaustion (core.TakeAll's index). It is an enforced
	// limit unless the policy has only shadow limits.
	Deciding int
}

// FromCore is the verdict of core's decisions ds of the limits ls, named
// names, whose shadow limits shadow marks (nil: none), deciding the index
// store.Policy.Decide returned: a front end deciding with core itself (the
// filter) reads its answer through it. A policy of only shadow limits
// admits.
func FromCore(names []string, ls []core.Limit, shadow []bool, ds []core.Decision, deciding int) Verdict {
	v := Verdict{Allowed: ds[deciding].Allowed, Deciding: deciding, Limits: make([]LimitState, len(ds))}
	for i := range ds {
		d := &ds[i]
		v.Limits[i] = LimitState{Name: names[i], Allowed: d.Allowed, Never: d.RetryAfter == core.Never,
			Shadow: shadow != nil && shadow[i], Limit: d.Limit, Remaining: d.Remaining, Window: ls[i].Window,
			ResetAfter: d.ResetAfter, RetryAfter: max(0, d.RetryAfter), NextAfter: d.NextAfter}
	}
	if v.Limits[deciding].Shadow {
		v.Allowed = true // nothing enforced: a shadow limit never denies
	}
	return v
}

// WouldDeny reports whether limit i is a shadow limit that would have
// denied a request the enforced limits admitted: what enforcing it would
// have denied in addition, the would-deny front ends count.
func (v *Verdict) WouldDeny(i int) bool {
	l := &v.Limits[i]
	return v.Allowed && l.Shadow && !l.Allowed
}

// Decider returns the deciding limit.
func (v *Verdict) Decider() *LimitState { return &v.Limits[v.Deciding] }

// Violated returns the names of the limits that denied, the deciding one
// first, then the others in the policy's order: the problem details'
// "violated-policies".
func (v *Verdict) Violated() []string {
	var out []string
	for _, i := range v.order() {
		if !v.Limits[i].Allowed {
			out = append(out, v.Limits[i].Name)
		}
	}
	return out
}

// order is the order of the RateLimit field's items, the enforced limits
// only (a shadow limit is never listed): the policy's when allowed; when
// denied, the deciding limit, then the other denying limits, then the
// rest, each in the policy's order.
func (v *Verdict) order() []int {
	out := make([]int, 0, len(v.Limits))
	if v.Allowed {
		for i := range v.Limits {
			if !v.Limits[i].Shadow {
				out = append(out, i)
			}
		}
		return out
	}
	out = append(out, v.Deciding)
	for _, denying := range []bool{true, false} {
		for i := range v.Limits {
			if i != v.Deciding && !v.Limits[i].Shadow && v.Limits[i].Allowed != denying {
				out = append(out, i)
			}
		}
	}
	return out
}

// Fields are a rule's choices of what the RateLimit fields say beyond the
// limits: the zero value lists every limit, in requests, without a
// partition key.
type Fields struct {
	// Closest lists only the deciding limit in the RateLimit field, the
	// one closest to exhaustion (on a denial, the one that denied), as
	// the draft allows; RateLimit-Policy still lists every limit, as it
	// should stay the same from response to response.
	Closest bool
	// QuotaUnit is the "qu" parameter of every policy: "" for requests,
	// the draft's default, left out, or another unit of QuotaUnits
	// ("content-bytes") when a rule's cost counts something else.
	QuotaUnit string
	// PartitionKey is the "pk" parameter's bytes (PartitionKey), nil for
	// none.
	PartitionKey []byte
	// Policy, when not empty, is the RateLimit-Policy value, as
	// PolicyField gives it for the same limits and Fields: it is the same
	// from response to response, so a caller deciding by one policy (and
	// no partition key, which is the request's) computes it once.
	Policy string
}

// MaxFields is the most fields AppendFields appends.
const MaxFields = 6

// The names of the answer's fields, as AppendFields writes them.
const (
	FieldPolicy     = "RateLimit-Policy"
	FieldRateLimit  = "RateLimit"
	FieldLimit      = "X-RateLimit-Limit"
	FieldRemaining  = "X-RateLimit-Remaining"
	FieldReset      = "X-RateLimit-Reset"
	FieldRetryAfter = "Retry-After"
)

// AppendFields appends the rate-limit header fields of a decided request
// to dst, as draft-ietf-httpapi-ratelimit-headers-11 defines the first two
// (Structured Fields lists, RFC 9651), for a burst and a daily limit with
// Fields{QuotaUnit: "content-bytes", PartitionKey: ...}:
//
//	RateLimit-Policy: "burst";q=10;qu="content-bytes";w=1;pk=:3q2+7w==:, "daily";q=1000;qu="content-bytes";w=86400;pk=:3q2+7w==:
//	RateLimit: "burst";r=9;t=1;pk=:3q2+7w==:, "daily";r=999;t=86399;pk=:3q2+7w==:
//	X-RateLimit-Limit: 10                          (the deciding limit's, as before the draft)
//	X-RateLimit-Remaining: 9
//	X-RateLimit-Reset: 1                           (seconds until it is whole again, not an epoch)
//	Retry-After: 1                                 (a denial a retry can pass)
//
// Shadow limits are never listed, in any field: they deny nothing, and a
// client must not wait for one. A policy of only shadow limits gets no
// fields at all.
//
// RateLimit-Policy lists every limit in the policy's order: q the quota
// (capacity, burst), w the window in seconds. RateLimit lists every limit
// too (only the deciding one with Fields.Closest), the deciding limit
// first on a denial, then the other denying ones: r the remaining quota, t
// the seconds until more quota is made available (NextAfter; left out when
// nothing is missing, as nothing will be). The X-RateLimit-* fields and
// Retry-After describe the deciding limit, as they always have.
//
// Durations are whole seconds rounded up, so neither t nor Retry-After is
// ever earlier than the moment it names; w and Retry-After are at least 1.
// Spans beyond the largest time.Duration (about 292 years) give its whole
// seconds, 9223372037, never a wrapped or negative value.
func AppendFields(dst [][2]string, v *Verdict, f *Fields) [][2]string {
	if v.Limits[v.Deciding].Shadow {
		return dst // only shadow limits: nothing enforced to describe
	}
	policy := f.Policy
	if policy == "" {
		policy = PolicyField(v, f)
	}
	var pk string
	if f.PartitionKey != nil {
		pk = ";pk=" + sfBytes(f.PartitionKey)
	}
	var current strings.Builder
	order := v.order()
	if f.Closest {
		order = order[:0]
		order = append(order, v.Deciding)
	}
	for n, i := range order {
		l := &v.Limits[i]
		if n > 0 {
			current.WriteString(", ")
		}
		current.WriteString(sfString(l.Name))
		current.WriteString(";r=")
		current.WriteString(strconv.FormatInt(l.Remaining, 10))
		if l.NextAfter > 0 {
			current.WriteString(";t=")
			current.WriteString(strconv.FormatInt(CeilSeconds(l.NextAfter), 10))
		}
		current.WriteString(pk)
	}
	d := v.Decider()
	rem := strconv.FormatInt(d.Remaining, 10)
	dst = append(dst,
		[2]string{FieldPolicy, policy},
		[2]string{FieldRateLimit, current.String()},
		[2]string{FieldLimit, strconv.FormatInt(d.Limit, 10)},
		[2]string{FieldRemaining, rem},
		[2]string{FieldReset, strconv.FormatInt(CeilSeconds(d.ResetAfter), 10)},
	)
	if !v.Allowed && !d.Never {
		dst = append(dst, [2]string{FieldRetryAfter, strconv.FormatInt(max(1, CeilSeconds(d.RetryAfter)), 10)})
	}
	return dst
}

// PolicyField is the RateLimit-Policy value of v's limits under f (f.Policy
// aside): every enforced limit in the policy's order, "<name>";q=<limit>;w=<window
// seconds>, with qu and pk as f says.
func PolicyField(v *Verdict, f *Fields) string {
	var pk string
	if f.PartitionKey != nil {
		pk = ";pk=" + sfBytes(f.PartitionKey)
	}
	var qu string
	if f.QuotaUnit != "" && f.QuotaUnit != "requests" {
		qu = ";qu=" + sfString(f.QuotaUnit)
	}
	var policy strings.Builder
	for i := range v.Limits {
		l := &v.Limits[i]
		if l.Shadow { // in no field: a client never waits for one
			continue
		}
		if policy.Len() > 0 {
			policy.WriteString(", ")
		}
		policy.WriteString(sfString(l.Name))
		policy.WriteString(";q=")
		policy.WriteString(strconv.FormatInt(l.Limit, 10))
		policy.WriteString(qu)
		policy.WriteString(";w=")
		policy.WriteString(strconv.FormatInt(max(1, CeilSeconds(l.Window)), 10))
		policy.WriteString(pk)
	}
	return policy.String()
}

// CeilSeconds rounds µs up to whole seconds, 0 for a negative span,
// saturating at the whole seconds of the largest time.Duration.
func CeilSeconds(us int64) int64 {
	us = min(max(us, 0), math.MaxInt64/1000)
	return (us + 999_999) / 1_000_000
}

// DeniedBody is the plain-text body of a 429.
func DeniedBody(never bool) string {
	if never {
		return "Rate limit exceeded: the request's cost exceeds the limit\n"
	}
	return "Rate limit exceeded\n"
}

// PartitionKeyBytes is the length of a partition key: 128 bits.
const PartitionKeyBytes = 16

// MinPartitionKeySecret is the shortest secret PartitionKey is keyed with:
// 128 bits.
const MinPartitionKeySecret = 16

// PartitionKey is the "pk" parameter of a request's RateLimit fields: the
// first 16 bytes of HMAC-SHA256(secret, rule + NUL + key), key as the rule
// keys the request (before the rule's name is added; an API key is
// already its digest). Quota is kept per rule and key, and so is this: a
// client sees one pk per quota it draws on and can tell its quotas apart,
// while without the secret nobody can compute or reverse it, not even from
// a guessable key such as an IP address.
func PartitionKey(secret []byte, rule, key string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(rule))
	m.Write([]byte{0})
	m.Write([]byte(key))
	return m.Sum(nil)[:PartitionKeyBytes]
}

// sfString encodes s as a Structured Field String (RFC 9651): quoted, with
// backslash and quote escaped; bytes outside printable ASCII become '_'.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// sfBytes encodes b as a Structured Field Byte Sequence (RFC 9651):
// base64 with padding between colons.
func sfBytes(b []byte) string {
	return ":" + base64.StdEncoding.EncodeToString(b) + ":"
}
