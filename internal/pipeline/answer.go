package pipeline

import (
	"math"
	"strconv"
	"strings"
)

// Verdict is what a decision says about a request, in the units of the
// answer's fields: the deciding limit (on a denial the one that denied).
type Verdict struct {
	Allowed bool
	// Never: denied, and no retry passes (the cost exceeds the limit).
	Never     bool
	Name      string
	Limit     int64
	Remaining int64
	// Window, ResetAfter and RetryAfter are in µs; RetryAfter is 0 when
	// allowed.
	Window, ResetAfter, RetryAfter int64
}

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
// to dst:
//
//	RateLimit-Policy: "minute";q=100;w=60          (draft-ietf-httpapi-ratelimit-headers-11)
//	RateLimit: "minute";r=42;t=17
//	X-RateLimit-Limit: 100
//	X-RateLimit-Remaining: 42
//	X-RateLimit-Reset: 17                          (seconds from now, not an epoch)
//	Retry-After: 17                                (a denial a retry can pass)
//
// Durations are whole seconds rounded up, so Retry-After is never earlier
// than the moment a retry passes; w and Retry-After are at least 1. Spans
// beyond the largest time.Duration (about 292 years) give its whole
// seconds, 9223372037, never a wrapped or negative value.
func AppendFields(dst [][2]string, v Verdict) [][2]string {
	name := sfString(v.Name)
	q := strconv.FormatInt(v.Limit, 10)
	rem := strconv.FormatInt(v.Remaining, 10)
	reset := strconv.FormatInt(CeilSeconds(v.ResetAfter), 10)
	dst = append(dst,
		[2]string{FieldPolicy, name + ";q=" + q + ";w=" + strconv.FormatInt(max(1, CeilSeconds(v.Window)), 10)},
		[2]string{FieldRateLimit, name + ";r=" + rem + ";t=" + reset},
		[2]string{FieldLimit, q},
		[2]string{FieldRemaining, rem},
		[2]string{FieldReset, reset},
	)
	if !v.Allowed && !v.Never {
		dst = append(dst, [2]string{FieldRetryAfter, strconv.FormatInt(max(1, CeilSeconds(v.RetryAfter)), 10)})
	}
	return dst
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
