// Package rls is rl-wasm-host's Envoy rate limit service: a gRPC server of
// envoy.service.ratelimit.v3.RateLimitService (ShouldRateLimit) deciding
// with the same store and clock as the HTTP service it runs beside
// (internal: its configuration and behaviour are the command's interface,
// documented in docs/envoy.md).
//
// Configuration is envoyproxy/ratelimit's format, every field of it, read
// by LoadConfig from a file or a directory of files (one domain each):
// domain, nested descriptors of key and optional value (a value with "*"
// is a wildcard, each "*" matching zero or more bytes), rate_limit {unit,
// requests_per_unit, unlimited, name, replaces}, shadow_mode, quota_mode,
// share_threshold (the values matching a wildcard share one count),
// metadata, and detailed_metric and value_to_metric (accepted; metrics
// never carry request values). rl's extensions, all in rate_limit
// (ExtensionFields): unit_multiplier, algorithm (any of the core's; default
// fixed_window, as envoyproxy/ratelimit counts), fail_open and
// shadow_limits (named candidates decided on the descriptor's key with its
// rate_limit in one step, never denying: rl.Limit.Shadow; reported in the
// response's dynamic_metadata "shadowLimits" and counted in
// rl_rls_shadow_denials_total); a file without them loads in both services
// (Domain.Extensions). Matching is
// envoyproxy/ratelimit's: at each depth key and value, else the first
// wildcard value that matches, else key alone; a limit applies only at the
// request descriptor's last entry. Each distinct descriptor (its entries'
// values, not the configuration node) has its own state, kept under the
// base key "rls:<domain>" and the limit name "default" whatever the
// limit's unit and algorithm (shadow limits under their own names), so a
// reload changing a descriptor's requests_per_unit, unit,
// unit_multiplier or algorithm, or adding or removing a value's override,
// carries each value's usage (the core's carry rules).
//
// Unlike envoyproxy/ratelimit, which charges every descriptor of a request
// even when another one denies it (its issue #1060), a request is decided
// all or nothing: it is charged on its limits only when all of them admit
// it. See Server.ShouldRateLimit and decideAll for the two-phase step and
// its race, which can only under-admit.
//
// Costs: a descriptor's hits_addend when set (0: check without charging),
// else the request's hits_addend, 0 meaning 1. Store failures follow the
// one failure rule (outage.Class, in the decision engine the Host shares:
// a descriptor mapped to its limit and key is decided by engine.Engine.Run,
// the path every front end's requests take after their match, with one
// outage detector for every front end): a store that is down is answered OK for a
// fail_open limit and UNAVAILABLE otherwise (Envoy's failure_mode_deny then
// decides); load, a store failure that is not an outage and a corrupt
// state are answered OVER_LIMIT with Retry-After 1, never admitted.
//
// A Server is safe for concurrent use; SetConfig swaps the configuration
// atomically, so a reload never blocks or drops calls.
package rls
