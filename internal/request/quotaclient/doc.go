// Package quotaclient is an RLQS client (envoy.service.rate_limit_quota.v3,
// StreamRateLimitQuotas): the other side of internal/frontend/rlqs. A rule
// of rl-wasm-host with a global limit decides every request locally, in
// memory, on a token bucket the RLQS server assigns this replica, and the
// client reports the replica's usage to the server every report interval.
// No request waits on the server.
//
// # Model
//
// A Client holds one gRPC stream to one server for one domain, and the
// Buckets registered with it (one per global rule). Every ReportInterval,
// and at once when a stream opens, it sends one report with every bucket's
// usage since the last one; it applies each bucket action it receives to
// its bucket:
//
//   - token_bucket: the bucket decides with a core.TokenBucket of Limit
//     max_tokens, Rate tokens_per_fill, Window fill_interval, until the
//     assignment's TTL passes. The local state is kept across assignments
//     (core's carrying rules), so a changed assignment does not start full
//     as Envoy's does; only the first does.
//   - blanket_rule DENY_ALL: every request is denied until the TTL passes.
//   - blanket_rule ALLOW_ALL: read as the rule's own limit (the ceiling):
//     no answer of the server lets a replica admit more than the whole
//     global limit. A token bucket above the ceiling's rate or burst is
//     clamped to it, and counted (Stats.Clamped).
//   - abandon_action: the assignment is dropped; the bucket is left out of
//     reports until it is used again.
//
// Without a live assignment (none received yet, expired, abandoned) the
// bucket applies its fallback: a limit of its own, per replica, or, with
// none, denial. A stream that fails is reopened with backoff; the
// assignment in force holds until its TTL, as the server counts it, and
// then the fallback applies. Load never admits beyond the fallback:
// requests never wait for the server, and nothing but an assignment or the
// fallback admits.
//
// # Cost
//
// RLQS counts requests: BucketQuotaUsage has num_requests_allowed and
// num_requests_denied and no cost. This client reports units instead: a
// request of cost 5 adds 5 to num_requests_allowed (or denied), and a
// settled cost (store.Settle) corrects num_requests_allowed by its delta
// (a refund beyond what was allowed is carried to the next report, since
// a count cannot be negative). The server divides tokens by demand in
// tokens per second, so reporting units is what makes shares follow
// consumption. Envoy's client has no cost: every request takes one token
// and counts one.
//
// # Time
//
// Decisions take their time as an argument (store.Request.Now, µs); the
// client reads Config.Clock when an assignment arrives (its expiry) and
// when it reports. Both must be the same clock.
package quotaclient
