package main

import (
	"math"
	"strconv"
	"strings"
)

// verdict is what a decision says about a request, in the units of the
// header fields: the deciding limit (on a denial the one that denied).
type verdict struct {
	allowed    bool
	never      bool // denied: the cost exceeds the limit, no retry passes
	name       string
	limit      int64
	remaining  int64
	window     int64 // µs
	resetAfter int64 // µs
	retryAfter int64 // µs; 0 when allowed
}

// rateHeaders returns the header fields of a decided response, the same
// strings httplimit.SetHeaders writes (a test holds them equal):
//
//	RateLimit-Policy: "minute";q=100;w=60          (draft-ietf-httpapi-ratelimit-headers-11)
//	RateLimit: "minute";r=42;t=17
//	X-RateLimit-Limit: 100
//	X-RateLimit-Remaining: 42
//	X-RateLimit-Reset: 17                          (seconds from now)
//	Retry-After: 17                                (a denial a retry can pass)
//
// Durations are whole seconds rounded up, so Retry-After is never earlier
// than the moment a retry passes; w is at least 1. (httplimit needs
// net/http, which this WebAssembly module does without.)
func rateHeaders(v verdict) [][2]string {
	name := sfString(v.name)
	q := strconv.FormatInt(v.limit, 10)
	rem := strconv.FormatInt(v.remaining, 10)
	reset := strconv.FormatInt(ceilSeconds(v.resetAfter), 10)
	h := [][2]string{
		{"RateLimit-Policy", name + ";q=" + q + ";w=" + strconv.FormatInt(max(1, ceilSeconds(v.window)), 10)},
		{"RateLimit", name + ";r=" + rem + ";t=" + reset},
		{"X-RateLimit-Limit", q},
		{"X-RateLimit-Remaining", rem},
		{"X-RateLimit-Reset", reset},
	}
	if !v.allowed && !v.never {
		h = append(h, [2]string{"Retry-After", strconv.FormatInt(max(1, ceilSeconds(v.retryAfter)), 10)})
	}
	return h
}

// ceilSeconds rounds µs up to whole seconds. Spans beyond the largest
// time.Duration (about 292 years) give its whole seconds, 9223372037, as
// httplimit (whose results saturate there) does.
func ceilSeconds(us int64) int64 {
	us = min(max(us, 0), math.MaxInt64/1000)
	return (us + 999_999) / 1_000_000
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
