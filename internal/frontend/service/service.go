package service

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/decisionlog"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/httpflow"
	"github.com/rlcore/rl/internal/request/outage"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/util/redact"
	"github.com/rlcore/rl/store"
)

// Options configures a Service. Zero fields take the documented defaults.
type Options struct {
	// Store keeps the state and decides with the decision function it
	// was created with (the WebAssembly host of package wasm, or the
	// native core); required.
	Store store.Store
	// Clock is the decision clock. Default rl.CoarseClock.
	Clock rl.Clock
	// Logger receives the service's logs. Default slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes bounds decision-API request bodies. Default 64 KiB.
	MaxBodyBytes int64
	// ProxyMaxBodyBytes bounds proxied request bodies; 0 means no bound.
	ProxyMaxBodyBytes int64
	// MaxBatch bounds the items of a batch request. Default 100.
	MaxBatch int
	// MaxKeyLength bounds keys in bytes. Default rl.DefaultMaxKeyLength.
	MaxKeyLength int
	// Ready, if set, is part of /readyz: the store's health check.
	Ready func(ctx context.Context) error
	// Transport carries proxied requests. Default: NewTransport(), whose
	// direct path bounds the wait for the response header itself; any
	// other RoundTripper is bounded by a context canceled when
	// upstream_timeout passes.
	Transport http.RoundTripper
	// MaxInFlight bounds the proxied and decision-API requests being
	// served at once. Beyond it a request is answered 503 with
	// Retry-After at once, never forwarded, and counted in
	// rl_overload_rejected_total{reason="in_flight"}. Default 4096;
	// negative: no bound.
	MaxInFlight int
	// ShadowUnsupported, if set, says that Store cannot decide shadow
	// limits: a configuration
	// with a shadow limit is then refused, by New and by every reload,
	// naming the rule and wrapping it, and inline shadow limits are
	// answered 400 (invalid_limits), rather than every decision failing.
	ShadowUnsupported error
	// MaxInFlightPerKey bounds the decisions on one key (of one rule)
	// waiting for the store at once; beyond it they are answered 503 like
	// MaxInFlight's, so one hot key cannot take every connection of a
	// database pool from the other keys. Keys share 4096 counters by hash,
	// so a bound may occasionally cover two keys. 0: no bound (the default;
	// the command sets half the PostgreSQL pool).
	MaxInFlightPerKey int
	// DecisionLog, if set, logs the decisions of every front end deciding
	// in the Service's engine (the proxy, the decision API, the gRPC rate
	// limit service): the denial log and the debug log. With its denial
	// log on, /metrics exports rl_denial_log_suppressed_total. The
	// caller closes it after the Service.
	DecisionLog *decisionlog.Logger
}

// Service is the rate-limiting HTTP service: the decision API, the reverse
// proxy filter and the operations endpoints over one rule set, which Reload
// swaps atomically. It is safe for concurrent use.
type Service struct {
	// eng decides: the per-key bound, the store call, the outage
	// detector and the failure rule, shared by the decision API, the
	// proxy and the gRPC rate limit service (Engine).
	eng       *engine.Engine
	log       *slog.Logger
	maxBody   int64
	proxyBody int64
	maxBatch  int
	ready     func(context.Context) error
	transport http.RoundTripper
	metrics   *metrics

	rules    atomic.Pointer[ruleSet]
	draining atomic.Bool
	drainMu  sync.Mutex
	onDrain  []func()
	storeErr throttle

	checksMu     sync.Mutex
	reloadChecks []func(*Config) error

	maxInFlight int64
	inFlight    atomic.Int64
	decider     atomic.Pointer[func() DeciderStats] // MonitorDecider's; nil: not reported
	global      globalPool                          // the global rules' RLQS clients (global.go)
}

// throttle logs at most one store failure a second, counting the others
// (the metrics count every one), so an outage does not flood the logs.
type throttle struct {
	last       atomic.Int64 // unix ns of the last line
	suppressed atomic.Int64
}

func (th *throttle) log(l *slog.Logger, msg, rule string, err error) {
	now := time.Now().UnixNano()
	last := th.last.Load()
	if now-last < int64(time.Second) || !th.last.CompareAndSwap(last, now) {
		th.suppressed.Add(1)
		return
	}
	l.Warn(msg, "rule", rule, "err", err, "suppressed_since_last", th.suppressed.Swap(0))
}

// New returns a Service deciding by cfg's rules.
func New(cfg *Config, opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, errors.New("service: Options.Store is nil")
	}
	if cfg == nil {
		return nil, errors.New("service: nil Config")
	}
	s := &Service{log: opts.Logger,
		maxBody: opts.MaxBodyBytes, proxyBody: opts.ProxyMaxBodyBytes, maxBatch: opts.MaxBatch,
		ready: opts.Ready, transport: opts.Transport, metrics: newMetrics()}
	eng, err := engine.New(engine.Options{Store: &timedStore{Store: opts.Store, m: s.metrics}, Clock: opts.Clock,
		MaxKeyLength: opts.MaxKeyLength, MaxInFlightPerKey: opts.MaxInFlightPerKey, ShadowUnsupported: opts.ShadowUnsupported,
		OnOverload: func(reason string) { s.metrics.overload.WithLabelValues(reason).Inc() }, OnDecision: opts.DecisionLog.Hook()})
	if err != nil {
		return nil, err
	}
	if dl := opts.DecisionLog; dl != nil && dl.Denials() {
		s.metrics.reg.MustRegister(denialLogSuppressed(dl))
	}
	s.eng = eng
	s.metrics.reg.MustRegister(globalCollector{s}) // the global rules' RLQS clients, read at each scrape
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.maxBody <= 0 {
		s.maxBody = 64 << 10
	}
	if s.maxBatch <= 0 {
		s.maxBatch = 100
	}
	switch {
	case opts.MaxInFlight == 0:
		s.maxInFlight = DefaultMaxInFlight
	case opts.MaxInFlight > 0:
		s.maxInFlight = int64(opts.MaxInFlight)
	}
	if s.transport == nil {
		s.transport = NewTransport()
	}
	rs, err := s.build(cfg)
	if err != nil {
		return nil, err
	}
	s.rules.Store(rs)
	s.metrics.configLoaded(time.Now())
	s.metrics.rules.Set(float64(len(cfg.Rules)))
	return s, nil
}

// SetConfig swaps in cfg's rules: requests in flight finish under the old
// ones, new requests see the new ones, none is dropped.
func (s *Service) SetConfig(cfg *Config) error {
	rs, err := s.build(cfg)
	if err != nil {
		return err
	}
	s.rules.Store(rs)
	s.metrics.rules.Set(float64(len(cfg.Rules)))
	return nil
}

// AddReloadCheck adds a check every configuration Reload loads must pass
// before it is swapped in: a listener started as safe for the
// configuration in force (a decision API on an address other hosts reach,
// which needs api_tokens) must stay safe, so a reload that would make it
// unsafe is refused, the rules in force kept.
func (s *Service) AddReloadCheck(check func(*Config) error) {
	s.checksMu.Lock()
	defer s.checksMu.Unlock()
	s.reloadChecks = append(s.reloadChecks, check)
}

// checkReload runs the reload checks on cfg.
func (s *Service) checkReload(cfg *Config) error {
	s.checksMu.Lock()
	checks := s.reloadChecks
	s.checksMu.Unlock()
	for _, c := range checks {
		if err := c(cfg); err != nil {
			return fmt.Errorf("refused: the new configuration would make a running listener unsafe: %w", err)
		}
	}
	return nil
}

// Reload loads the configuration file at path and swaps it in. When the
// file is invalid, or fails a check of AddReloadCheck (it would make a
// running listener unsafe), it returns the error, logs it, counts it in
// rl_config_reloads_total{result="failure"} and keeps the rules in force.
func (s *Service) Reload(path string) error {
	cfg, err := LoadConfig(path)
	if err == nil {
		err = s.checkReload(cfg)
	}
	if err == nil {
		err = s.SetConfig(cfg)
	}
	if err != nil {
		s.metrics.reloads.WithLabelValues("failure").Inc()
		s.metrics.configOK.Set(0)
		s.log.Error("config reload failed; keeping the rules in force", "file", path, "err", err)
		return err
	}
	s.metrics.reloads.WithLabelValues("success").Inc()
	s.metrics.configLoaded(time.Now())
	s.log.Info("config reloaded", "file", path, "rules", len(cfg.Rules), "upstream", redact.String(cfg.Upstream))
	return nil
}

// Config returns the configuration in force.
func (s *Service) Config() *Config { return s.rules.Load().cfg }

// ShadowUnsupported returns Options.ShadowUnsupported: nil when the store
// decides shadow limits, else why it cannot (for front ends with
// configurations of their own, the rate limit service).
func (s *Service) ShadowUnsupported() error { return s.eng.ShadowUnsupported() }

// SetDraining makes /readyz answer 503 so load balancers stop sending new
// requests, and runs the OnDrain functions (once); the service keeps
// serving the requests that still arrive.
func (s *Service) SetDraining() {
	if !s.draining.CompareAndSwap(false, true) {
		return
	}
	s.drainMu.Lock()
	fs := s.onDrain
	s.onDrain = nil
	s.drainMu.Unlock()
	for _, f := range fs {
		f()
	}
}

// OnDrain registers f to run when the service starts draining (at once if
// it is draining already): a front end beside the HTTP listeners (the gRPC
// rate limit service) reports itself not serving then too.
func (s *Service) OnDrain(f func()) {
	s.drainMu.Lock()
	if !s.draining.Load() {
		s.onDrain = append(s.onDrain, f)
		s.drainMu.Unlock()
		return
	}
	s.drainMu.Unlock()
	f()
}

// FailoverEvent records a switch of the failover store: to "memory" when
// the primary failed, to "primary" when it recovered.
func (s *Service) FailoverEvent(to string) {
	s.metrics.failover.WithLabelValues(to).Inc()
	if to == "memory" {
		s.metrics.failoverActive.Set(1)
		s.log.Warn("failover: deciding in memory; PostgreSQL is failing")
	} else {
		s.metrics.failoverActive.Set(0)
		s.log.Info("failover: back on PostgreSQL")
	}
}

// APIPrefix is the path prefix of the decision API.
const APIPrefix = "/v1/ratelimit/"

// DefaultMaxInFlight is the default of Options.MaxInFlight.
const DefaultMaxInFlight = 4096

// Handler serves everything on one listener, one that proxy clients reach:
// the decision API under APIPrefix and /metrics, both only with a bearer
// token of the configuration's api_tokens (without tokens they always
// answer 401; /metrics needs an admin token), /healthz and /readyz, and every other path through the
// proxy filter. Prefer ProxyHandler and APIHandler on two listeners.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(APIPrefix, s.limitInFlight(s.authenticate(false, s.apiMux())))
	mux.Handle("/metrics", s.authenticate(false, s.adminOnly("reading /metrics", s.metrics.handler())))
	s.health(mux)
	proxy := s.ProxyHandler()
	mux.Handle("/", proxy)
	// The prefix without its slash is not the API's: proxied, not
	// redirected (a ServeMux answers 301 for a subtree's bare root).
	mux.Handle(strings.TrimSuffix(APIPrefix, "/"), proxy)
	return mux
}

// APIHandler serves the decision API, /healthz, /readyz and /metrics for a
// listener of their own, which only trusted clients reach (loopback by
// default): without api_tokens in the configuration every caller there is
// an admin; with them each request needs a token, and its role (/metrics,
// which names rules and counts everyone's traffic, an admin's). Other
// paths are 404.
func (s *Service) APIHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(APIPrefix, s.limitInFlight(s.authenticate(true, s.apiMux())))
	mux.Handle("/metrics", s.authenticate(true, s.adminOnly("reading /metrics", s.metrics.handler())))
	s.health(mux)
	mux.Handle(strings.TrimSuffix(APIPrefix, "/"), http.NotFoundHandler()) // not a 301 to the prefix
	return mux
}

// ProxyHandler serves the proxy filter alone: every path is proxied.
func (s *Service) ProxyHandler() http.Handler { return s.limitInFlight(http.HandlerFunc(s.serveProxy)) }

// apiEndpoint is an endpoint of the decision API: its name under
// APIPrefix, the method it answers (and those pipeline.Limits adds: GET
// answers HEAD), what a 405 says to use, and its handler.
type apiEndpoint struct {
	name, method, use string
	h                 http.HandlerFunc
}

// apiEndpoints is the decision API: the one list of its endpoints and
// their methods, which the mux, the 405's Allow field and the 404's
// message read.
func (s *Service) apiEndpoints() []apiEndpoint {
	const post = "POST with a JSON body"
	return []apiEndpoint{
		{"check", http.MethodPost, post, s.apiDecide(false)},
		{"peek", http.MethodPost, post, s.apiDecide(true)},
		{"reset", http.MethodPost, post, s.apiReset},
		{"settle", http.MethodPost, post, s.apiSettle},
		{"batch", http.MethodPost, post, s.apiBatch},
		{"rules", http.MethodGet, "GET", s.apiRules},
	}
}

func (s *Service) apiMux() *http.ServeMux {
	mux := http.NewServeMux()
	var names []string
	for _, e := range s.apiEndpoints() {
		names = append(names, e.name)
		methods := pipeline.Limits(e.method)
		mux.HandleFunc(APIPrefix+e.name, func(w http.ResponseWriter, r *http.Request) {
			if !slices.Contains(methods, r.Method) {
				w.Header().Set("Allow", strings.Join(methods, ", "))
				s.apiError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use "+e.use)
				return
			}
			e.h(w, r)
		})
	}
	want := APIPrefix + strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	mux.HandleFunc(APIPrefix, func(w http.ResponseWriter, r *http.Request) {
		s.apiError(w, http.StatusNotFound, "not_found", "no such endpoint: want "+want)
	})
	return mux
}

func (s *Service) health(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", s.serveReady)
}

// limitInFlight answers 503 at once, with Retry-After, to requests beyond
// MaxInFlight.
func (s *Service) limitInFlight(next http.Handler) http.Handler {
	if s.maxInFlight <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.inFlight.Add(1) > s.maxInFlight {
			s.inFlight.Add(-1)
			s.overloaded(w, r, "in_flight")
			return
		}
		defer s.inFlight.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// overloaded answers 503 with Retry-After: 1 and counts it.
func (s *Service) overloaded(w http.ResponseWriter, r *http.Request, reason string) {
	s.metrics.overload.WithLabelValues(reason).Inc()
	w.Header().Set("Retry-After", "1")
	if strings.HasPrefix(r.URL.Path, APIPrefix) {
		s.apiError(w, http.StatusServiceUnavailable, "overloaded", "too many requests in flight; retry later")
		return
	}
	httpflow.WriteRefusedFor(w, r, httpflow.Decision{Outcome: engine.Overloaded},
		httpflow.Problems(s.rules.Load().cfg.ProblemDetails))
}

func (s *Service) serveReady(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("draining\n"))
		return
	}
	if s.ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "store not ready: %v\n", err)
			return
		}
	}
	w.Write([]byte("ready\n"))
	if stats := s.decider.Load(); stats != nil {
		fmt.Fprintf(w, "decider: %s\n", deciderStatus((*stats)()))
	}
}

// target is what a decision is made against: a rule, or inline limits.
type target struct {
	// er is what the engine decides against (Engine.Run): the rule's
	// engine rule, or inline limits' (their limiter and fail policy).
	er *engine.Rule
	// lim is er's limiter (a reset calls it itself).
	lim *rl.Limiter
	// policy is the key's: the rule's, or its override's (forKey), or
	// inline limits'.
	policy *rl.Policy
	m      *ruleMetrics
	fields httpflow.Fields // the rule's; inline limits have the default
	rule   *rule           // the rule; nil for inline limits
	// override, if set, is the rule's override deciding the key (forKey):
	// policy and m are its.
	override *override
}

func (ru *rule) target() target {
	return target{er: &ru.eng, lim: ru.lim, policy: ru.policy, m: ru.m, fields: ru.fields, rule: ru}
}

// errClient marks an error that is the request's fault (4xx).
type errClient struct {
	code string
	err  error
}

func (e *errClient) Error() string { return e.err.Error() }
func (e *errClient) Unwrap() error { return e.err }

// decide decides key against t (a check, or a peek). It returns the
// outcome: Allowed or Denied; 0 and an *errClient for a request error (an
// invalid key or cost); FailOpen; or a refusal (FailClosed, Overloaded,
// Error) with the error classified (outage.Classified), counted and logged
// (failed).
func (s *Service) decide(ctx context.Context, t *target, key string, cost int64, peek bool, each []rl.LimitResult) (rl.Result, engine.Outcome, error) {
	d := s.run(ctx, t, &engine.Input{Key: key, Cost: cost, Peek: peek, Each: each})
	switch d.Outcome {
	case engine.Allowed, engine.Denied:
		return d.Result, d.Outcome, nil
	case engine.InvalidKey:
		return d.Result, 0, &errClient{"invalid_key", d.Err}
	case engine.InvalidCost:
		return d.Result, 0, &errClient{"invalid_cost", d.Err}
	}
	if d.Outcome == engine.FailOpen {
		return rl.Result{}, d.Outcome, nil
	}
	return rl.Result{}, d.Outcome, d.Err
}

// refused reports whether o refuses a request for a failure (the answer
// is failClosed's).
func refused(o engine.Outcome) bool {
	return o == engine.FailClosed || o == engine.Overloaded || o == engine.Error
}

// run decides in, a decision-API request on t's key, in the engine
// (Engine.Run, under the key's policy t resolved: the per-key bound as
// in.Gate says, the store call, the outage detector, the failure rule),
// and accounts for it (account). Settles take their place in the bound as
// engine.GateSettleBounded says; a settle refused by its bound is counted
// in rl_overload_rejected_total{reason="key_in_flight"} and answered 503
// with Retry-After, as a check is.
func (s *Service) run(ctx context.Context, t *target, in *engine.Input) engine.Result {
	in.Policy = t.policy
	res := s.eng.Run(ctx, t.er, in)
	s.account(t, &res)
	return res
}

// account counts what the engine made of a decision on t, wherever it was
// made (the decision API, the proxy): the would-denies of the shadow
// limits of a take that went through, and a failure (failed) of a check
// or peek. A settle's failure is counted by settled.
func (s *Service) account(t *target, res *engine.Result) {
	switch {
	case res.Outcome == engine.Allowed && !res.Peek && !res.Settle && res.Policy != nil && res.Policy.Shadowed():
		t.m.wouldDeny(res.Each) // a peek would deny nothing
	case res.Class > outage.Invalid && !res.Settle:
		s.failed(t, res)
	}
}

// failed counts and logs res, a failed decision on t, by its class
// (outage.Class; at most one log line a second): load, a failure that is
// not an outage, an internal error, an outage answered by the target's
// fail policy. A refusal by the per-key bound is counted by the engine
// (Options.OnOverload) alone.
func (s *Service) failed(t *target, res *engine.Result) {
	err := res.Err
	name := t.er.Name
	switch res.Class {
	case outage.Invalid:
		return
	case outage.Load:
		if !errors.Is(err, engine.ErrOverloaded) {
			t.m.storeErrors.Inc()
			s.storeErr.log(s.log, "store busy; refusing (load is never admitted)", name, err)
		}
		return
	case outage.Failed:
		t.m.storeErrors.Inc()
		msg := "store failed; refusing (not an outage, so no fail_open)"
		if errors.Is(err, context.DeadlineExceeded) {
			msg = "store timed out; refusing (fail_open waits for 3 timeouts with no decision completing: a slow store may be a loaded one)"
		}
		s.storeErr.log(s.log, msg, name, err)
		return
	case outage.Internal:
		t.m.storeErrors.Inc()
		s.storeErr.log(s.log, "decision failed; refusing (a corrupt state or a bug: never fail_open)", name, err)
		return
	}
	t.m.storeErrors.Inc()
	if res.Outcome == engine.FailOpen {
		s.storeErr.log(s.log, "store failed; admitting (fail_open)", name, err)
		t.m.failOpenTotal.Inc()
		return
	}
	s.storeErr.log(s.log, "store failed; refusing (fail closed)", name, err)
}

// settled counts a settle on t (the proxy's from a response's
// response_cost_header, or the decision API's) by its error
// (pipeline.SettleResult): none, an invalid response cost
// (httpflow.ErrResponseCost), a proxied request whose response was cut
// off before it reported the cost (httpflow.ErrAborted: its client went
// away, or the upstream failed mid-response), a failure, or a decision-API
// settle refused by the per-key bound (engine.ErrOverloaded, counted in
// rl_overload_rejected_total too); all but the first logged, at most one
// line a second, and a failure of the store is a store error too.
func (s *Service) settled(t *target, err error) {
	switch {
	case err == nil:
		t.m.settles[pipeline.Settled].Inc()
	case errors.Is(err, httpflow.ErrResponseCost):
		t.m.settles[pipeline.SettleInvalid].Inc()
		s.storeErr.log(s.log, "invalid response cost; nothing settled (the estimate stands)", t.er.Name, err)
	case errors.Is(err, httpflow.ErrAborted):
		t.m.settles[pipeline.SettleFailed].Inc()
		s.storeErr.log(s.log, "proxied response cut off before it reported its cost (the client went away, or the upstream failed); nothing settled (the estimate stands)", t.er.Name, err)
	case errors.Is(err, engine.ErrOverloaded):
		t.m.settles[pipeline.SettleFailed].Inc()
		s.storeErr.log(s.log, "settle refused: too many decisions in flight on the key (the caller may retry)", t.er.Name, err)
	default:
		t.m.settles[pipeline.SettleFailed].Inc()
		t.m.storeErrors.Inc()
		s.storeErr.log(s.log, "settle failed; the estimate stands", t.er.Name, err)
	}
}

// record counts a decision's outcome (a refusal for load or an internal
// error as fail_closed) and, for a denial a limit decided (res, not nil,
// denied), the limit that denied. Request errors are not decisions.
func (m *ruleMetrics) record(outcome engine.Outcome, res *rl.Result) {
	switch outcome {
	case engine.Allowed:
		m.allowed.Inc()
	case engine.Denied:
		m.denied.Inc()
		if res != nil && !res.Allowed {
			m.deniedByLimit(res.Index)
		}
	case engine.FailOpen:
		m.failOpen.Inc()
	case engine.FailClosed, engine.Overloaded, engine.Error:
		m.failClosed.Inc()
	}
}

// slogErrorLog adapts the logger for net/http's ErrorLog fields.
func slogErrorLog(l *slog.Logger) *log.Logger {
	return slog.NewLogLogger(l.Handler(), slog.LevelWarn)
}

// deciderStatus is /readyz's account of the decider: its name, and while
// the native core stands in for the WebAssembly core, why.
func deciderStatus(st DeciderStats) string {
	switch {
	case st.Compiling:
		return st.Deciding + " (the WebAssembly module is compiling; it takes over once compiled)"
	case st.Failed:
		return st.Deciding + " (the WebAssembly module could not start: see the log)"
	}
	return st.Deciding
}
