// Package service is the rate-limiting HTTP service that cmd/rl-wasm-host
// runs (internal: its configuration language and JSON API are the
// command's interface, documented in docs/service.md, not a Go
// API): a JSON decision API, a reverse proxy filter and the operations
// endpoints, over rules read from a YAML or JSON file.
//
// A Service decides over one store.Store (memstore, pgstore, or the
// failover store of both), which decides with the decider it was created
// with (the WebAssembly build of the core hosted by package wasm, the
// native core, or PL/pgSQL). Each rule is an
// rl.Limiter whose base key is the rule's name; limits given inline in a
// decision-API request use the base key "inline". The proxy hands each
// request its most specific rule matches to that rule's middleware (the
// HTTP flow httplimit runs too, internal/request/httpflow), built once per
// rule set with the service's hooks (metrics, logs, 400 messages); every
// decision, the decision API's and the proxy's, is one call of the
// decision engine (internal/request/engine, Engine.Run: key, cost,
// override, per-key bound, store, outage detector, failure rule) on the
// rule's engine.Rule, compiled once per rule set.
//
//	cfg, err := service.LoadConfig("rules.yaml")   // every mistake, by file, rule and field
//	svc, err := service.New(cfg, service.Options{Store: memstore.New(&memstore.Config{Decider: pool})})
//	go http.ListenAndServe("127.0.0.1:8081", svc.APIHandler()) // decision API and ops: trusted clients only
//	http.ListenAndServe(":8080", svc.ProxyHandler())         // the proxy: every path
//	...
//	err = svc.Reload("rules.yaml")                  // atomic swap; an invalid file keeps the old rules
//
// The process around it (flags, listeners, the decider and the stores it
// builds, reload on SIGHUP, graceful shutdown) is the command's, in
// cmd/rl-wasm-host.
//
// Units: the API and the configuration speak milliseconds and seconds
// (durations rounded up, never early) and Go durations ("10s", "1d"); the
// core underneath decides in microseconds.
//
// A Service is safe for concurrent use; requests read the rule set through
// an atomic pointer, so a reload never blocks or drops them.
package service
