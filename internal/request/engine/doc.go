// Package engine is the decision engine under every front end of
// rl-wasm-host and the httplimit middleware: the steps of a decision
// written once, so that a new front end only translates its protocol.
//
// A request goes match → key → cost → override → per-key gate → decide →
// classify → answer fields. The first steps read a request and a rule
// (internal/request/pipeline: Matcher, Key, ParseCost, Overrides); from
// the per-key gate on the Engine does the work: Decide takes the key's
// place in the per-key bound, calls the limiter (rl.Limiter over the
// store), records the decision in the one outage detector and classifies a
// failure by the one failure rule (internal/request/outage) into an
// Outcome, the one vocabulary of outcomes; Verdict turns the result into
// what pipeline.AppendFields writes.
//
// A limit goes from a validated configuration (internal/request/ruleconfig)
// to the policy that decides it in one step, Compile.
//
// The package imports no net/http: only Outcome.Status speaks HTTP, the
// status every HTTP front end answers an outcome with (package httpflow,
// beside this one, is the net/http flow the proxy and the middleware
// share). The proxy-wasm filter, whose store is Envoy's shared data and not
// an rl.Limiter, links the vocabulary (Outcome, OutcomeOf) alone.
package engine
