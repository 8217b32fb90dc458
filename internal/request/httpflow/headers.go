package httpflow

import (
	"net/http"
	"sync/atomic"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/pipeline"
)

// Fields chooses what the rate-limit header fields say beyond the limits
// themselves. The zero value lists every limit, counts requests and sends
// no partition key.
type Fields struct {
	// Closest makes the RateLimit field list only the limit closest to
	// exhaustion (the deciding one: on a denial, the one that denied), as
	// draft-ietf-httpapi-ratelimit-headers allows; RateLimit-Policy still
	// lists every limit.
	Closest bool
	// QuotaUnit is the policies' "qu" parameter when the cost counts
	// something other than requests: "content-bytes". "" and "requests"
	// (the draft's default) leave it out.
	QuotaUnit string
	// PartitionKey, if set, returns the partition key ("pk", a Byte
	// Sequence) of a request's key. It must not reveal the key: use
	// PartitionKeyFunc, a keyed hash.
	PartitionKey func(key string) []byte
}

// PartitionKeyFunc returns a Fields.PartitionKey that sends the first 16
// bytes of HMAC-SHA256(secret, scope + NUL + key): one partition key per
// quota (scope names the policy's quota, such as a route; keys of two
// scopes never share one), which nobody without the secret can compute or
// reverse, even for a guessable key such as an IP address. The secret
// should be at least 16 random bytes, and the same on every instance so
// that a client sees one key wherever it lands.
func PartitionKeyFunc(secret []byte, scope string) func(key string) []byte {
	secret = append([]byte(nil), secret...)
	return func(key string) []byte { return pipeline.PartitionKey(secret, scope, key) }
}

// SetFields writes the rate-limit header fields of a decision on key to h:
// every limit of the policy, given as each (the policy's results,
// rl.Request.Each; res alone when each is shorter than res.Index+1),
//
//	RateLimit-Policy: "burst";q=10;w=1, "daily";q=1000;w=86400   (draft-ietf-httpapi-ratelimit-headers-11)
//	RateLimit: "burst";r=9;t=1, "daily";r=999;t=86399
//	X-RateLimit-Limit: 10
//	X-RateLimit-Remaining: 9
//	X-RateLimit-Reset: 1                           (seconds from now, not an epoch)
//
// and, on a denial that a retry can pass, Retry-After in whole seconds,
// rounded up so that it is never earlier than the moment a retry succeeds.
// RateLimit-Policy lists the limits in the policy's order; RateLimit too,
// except that on a denial the limit that denied comes first (f.Closest:
// it alone). r is the remaining quota and t the seconds until more is made
// available (rl.LimitResult.NextAfter: left out when nothing is missing).
// The X-RateLimit-* fields and Retry-After describe the deciding limit
// (res). Shadow limits (rl.Limit.Shadow) are left out of every field: they
// never deny, so a client has nothing to wait for; a policy of only shadow
// limits gets no fields. Durations are rounded up to whole seconds; w is
// at least 1. The
// largest Duration (about 292 years, what rl.Result saturates at) gives
// its whole seconds, 9223372037, never a wrapped or negative value.
func SetFields(h http.Header, key string, res rl.Result, each []rl.LimitResult, f Fields) {
	setFields(h, key, res, each, f, nil, nil)
}

// policyField is a RateLimit-Policy value and the policy it lists.
type policyField struct {
	p *rl.Policy
	v string
}

// setFields is SetFields. With p, the policy each holds every result of,
// and cache, the RateLimit-Policy value is computed once per policy (it is
// the same from response to response) unless f has a partition key, which
// is the request's.
func setFields(h http.Header, key string, res rl.Result, each []rl.LimitResult, f Fields, p *rl.Policy, cache *atomic.Pointer[policyField]) {
	var buf [pipeline.MaxFields][2]string
	v := verdict(res, each)
	pf := pipeline.Fields{Closest: f.Closest, QuotaUnit: f.QuotaUnit}
	if f.PartitionKey != nil {
		pf.PartitionKey = f.PartitionKey(key)
	} else if cache != nil && p != nil && len(v.Limits) == p.Len() {
		if c := cache.Load(); c != nil && c.p == p {
			pf.Policy = c.v
		} else {
			pf.Policy = pipeline.PolicyField(&v, &pf)
			cache.Store(&policyField{p, pf.Policy})
		}
	}
	kvs := pipeline.AppendFields(buf[:0], &v, &pf)
	// As h.Set each, with the names in canonical form once and one
	// allocation for the values.
	vals := make([]string, len(kvs))
	for i, kv := range kvs {
		vals[i] = kv[1]
		name, ok := canonicalFields[kv[0]]
		if !ok {
			name = http.CanonicalHeaderKey(kv[0])
		}
		h[name] = vals[i : i+1 : i+1]
	}
}

// canonicalFields are the canonical forms of the names AppendFields writes.
var canonicalFields = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{pipeline.FieldPolicy, pipeline.FieldRateLimit, pipeline.FieldLimit, pipeline.FieldRemaining,
		pipeline.FieldReset, pipeline.FieldRetryAfter} {
		m[n] = http.CanonicalHeaderKey(n)
	}
	return m
}()

// verdict is a decision in the units of the answer's fields (engine.Verdict).
func verdict(res rl.Result, each []rl.LimitResult) pipeline.Verdict { return engine.Verdict(res, each) }
