package httplimit

import (
	"net/http"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/pipeline"
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
	var buf [6][2]string
	for _, kv := range pipeline.AppendFields(buf[:0], verdict(r)) {
		h.Set(kv[0], kv[1])
	}
}

// verdict is r in the units of the answer's fields (internal/pipeline, the
// one source of the fields every front end writes): durations in µs, each
// rounded up so that nothing is early.
func verdict(r rl.Result) pipeline.Verdict {
	return pipeline.Verdict{Allowed: r.Allowed, Never: r.Never, Name: r.Name, Limit: r.Limit, Remaining: r.Remaining,
		Window: ceilMicros(r.Window), ResetAfter: ceilMicros(r.ResetAfter), RetryAfter: ceilMicros(r.RetryAfter)}
}

// ceilMicros rounds d up to whole µs.
func ceilMicros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond > 0 {
		us++
	}
	return us
}
