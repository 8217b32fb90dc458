// Package engine is the decision engine under every front end of
// rl-wasm-host and the httplimit middleware: the steps of a decision
// written once, so that a new front end only translates its protocol.
//
// A request goes match → key → cost → override → per-key gate → decide →
// classify → answer fields. The match is the front end's (a proxy's rule
// by path, host and method, pipeline.Matcher; the gRPC service's
// descriptor; the decision API's named rule); everything after it is one
// call, Engine.Run, on the matched Rule and the request's Input:
//
//   - key and cost: read from a pipeline.Request by the rule's Reading
//     (pipeline.Key over its key_by, pipeline.ParseCost over its cost
//     header and min_cost), or given by the front end (the decision API's
//     JSON, a descriptor's entries, httplimit's KeyFunc and CostFunc);
//   - override: the key's policy (Rule.For over pipeline.Overrides);
//   - per-key gate: the key's place among the decisions in flight
//     (Options.MaxInFlightPerKey; Gate);
//   - decide: the rule's Limiter (rl.Limiter over the store);
//   - classify: the one outage detector of the Engine and the one failure
//     rule (internal/request/outage) into an Outcome, the one vocabulary
//     of outcomes.
//
// Run returns one Result (outcome, key, cost, policy, override, the
// limiter's result and every limit's, the failure's class and error): one
// value per decision, which the front end answers in its protocol and
// from which the answer's fields follow (Verdict, pipeline.AppendFields).
//
// A limit goes from a validated configuration (internal/request/ruleconfig)
// to the policy that decides it in one step, Policy (ruleconfig.Compile,
// rl.PolicyOf: nothing checked again); Engine.Compile adds the store's
// ability to decide a shadow limit.
//
// The package imports no net/http: only Outcome.Status speaks HTTP, the
// status every HTTP front end answers an outcome with (package httpflow,
// beside this one, is the net/http flow the proxy and the middleware
// share). The proxy-wasm filter links the vocabulary (Outcome, OutcomeOf)
// and the key and cost steps (Reading), not Run: its decisions are not an
// rl.Limiter's (Envoy's shared data, or an asynchronous call to
// rl-wasm-host), and linking Run with a limiter would add about 210 KB to
// its WebAssembly module.
package engine
