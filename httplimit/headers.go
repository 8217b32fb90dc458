package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rlcore/rl"
)

// SetHeaders writes the rate-limit header fields describing r's deciding
// limit (on a denial, the limit that denied) to h:
//
//	RateLimit-Policy: "minute";q=100;w=60          (IETF draft-ietf-httpapi-ratelimit-headers-11)
//	RateLimit: "minute";r=42;t=17
//	X-RateLimit-Limit: 100
//	X-RateLimit-Remaining: 42
//	X-RateLimit-Reset: 17                          (seconds from now, not an epoch)
//
// and, on a denial that a retry can pass, Retry-After in whole seconds,
// rounded up so that it is never earlier than the moment a retry succeeds.
// Durations are rounded up to whole seconds; w is at least 1. The largest
// Duration (about 292 years, what rl.Result saturates at) gives its whole
// seconds, 9223372037, never a wrapped or negative value.
func SetHeaders(h http.Header, r rl.Result) {
	name := sfString(r.Name)
	q := strconv.FormatInt(r.Limit, 10)
	rem := strconv.FormatInt(r.Remaining, 10)
	reset := strconv.FormatInt(ceilSeconds(r.ResetAfter), 10)
	h.Set("RateLimit-Policy", name+";q="+q+";w="+strconv.FormatInt(max(1, ceilSeconds(r.Window)), 10))
	h.Set("RateLimit", name+";r="+rem+";t="+reset)
	h.Set("X-RateLimit-Limit", q)
	h.Set("X-RateLimit-Remaining", rem)
	h.Set("X-RateLimit-Reset", reset)
	if !r.Allowed && !r.Never {
		h.Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(r.RetryAfter)), 10))
	}
}

// ceilSeconds rounds d up to whole seconds, 0 for a negative d. It cannot
// overflow (d + time.Second - 1 would, within a second of the largest
// Duration, and turn a 292-year wait into a negative one).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
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
