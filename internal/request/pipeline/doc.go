// Package pipeline is the request pipeline every front end runs before a
// decision, written once so that the proxy (internal/frontend/service), the
// decision API, the Envoy rate limit service (internal/frontend/rls) and the
// proxy-wasm filter (proxywasm) cannot drift apart:
//
//   - the canonical path and host of a request (CanonicalPath, MatchPath,
//     CanonicalHost), refusing what cannot be cleaned;
//   - method matching (MatchMethod: HEAD is limited as GET, case is
//     ignored);
//   - the key, from exactly one place a rule's typed key source names
//     (Key, ruleconfig.KeyBy), a header in any spelling of '-' and '_'
//     (SameField, FieldSpellings);
//   - the cost, with a rule's min_cost (ParseCost), and its range for any
//     front end (CheckCost: the gRPC service's hits_addend); the actual
//     cost an upstream's response reports (ParseResponseCost, the rule's
//     response_cost_header), and the correction every front end settles
//     for it against the estimate (SettleDelta: min_cost, MaxCost), its
//     results counted by one list (SettleResult);
//   - the rule a request matches (Matcher, CompareMatchers);
//   - the answer's fields (Verdict, AppendFields, PartitionKey, DeniedBody):
//     the RateLimit fields listing every limit of the policy;
//   - what a proxying front end forwards: the canonical path (Prepare),
//     no path-override field (PathOverrideFields, IsPathOverride) and no
//     field named like the matched rule's response_cost_header
//     (DropsField).
//
// It imports only the standard library, core and ruleconfig (never
// net/http), so that the filter, built for wasip1, uses it too. Each front
// end is a thin adapter: it reads its own request form (a *http.Request,
// proxy-wasm header pairs, Envoy descriptors) into a Request and writes
// the answer its own way. The front-end conformance table (tests/frontends)
// runs the same requests through every front end.
package pipeline
