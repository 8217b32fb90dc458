// Package httpflow is the net/http flow the HTTP front ends share: the
// public middleware (package httplimit, whose API is this package's under
// its own documented names) and rl-wasm-host's reverse proxy (one
// middleware per rule) run the same handler. A request is keyed, costed,
// decided and its failure classified by the one failure rule into an
// engine.Outcome in one call of the decision engine (engine.Engine.Run,
// internal/request/engine): the proxy's rule reads the key and cost
// itself and decides in the service's engine (Config.Engine, Config.Rule),
// the middleware's Key and Cost functions feed an engine of its own over
// its Limiter. The result is answered: the rate-limit fields of every
// limit (SetFields, from engine.Verdict and pipeline.AppendFields), 429 or
// problem details on a denial, 503 with Retry-After on load, a shaping
// wait, and the settle of a cost its response reports (ResponseCost).
//
// Its errors and texts say "httplimit": they reach the users of the
// public middleware, which returns them as its own.
package httpflow
