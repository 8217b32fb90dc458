// Package httpflow is the net/http flow the HTTP front ends share: the
// public middleware (package httplimit, whose API is this package's under
// its own documented names) and rl-wasm-host's reverse proxy (one
// middleware per rule) run the same handler. A request is keyed, costed
// and decided by a Limiter (the proxy's decides with the decision engine,
// internal/request/engine), its failure classified by the one failure rule
// into an engine.Outcome, and answered: the rate-limit fields of every
// limit (SetFields, from engine.Verdict and pipeline.AppendFields), 429 or
// problem details on a denial, 503 with Retry-After on load, a shaping
// wait, and the settle of a cost its response reports (ResponseCost).
//
// Its errors and texts say "httplimit": they reach the users of the
// public middleware, which returns them as its own.
package httpflow
