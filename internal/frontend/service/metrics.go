package service

import (
	"net/http"
	"strconv"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/decisionlog"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/version"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The "outcome" label of rl_decisions_total is the name of an
// engine.Outcome: allowed, denied, fail_open and fail_closed, under which
// a refusal for load or an internal error is counted too (record).

// metrics are the service's Prometheus metrics, on a registry of its own.
//
// Label values come from the configuration (rule and limit names) or from
// fixed lists (outcomes, reasons, sources, operations), never from a
// request (SECURITY.md): a key, a path or a header value as a label would
// leak it to whoever reads /metrics and let clients grow the series
// without bound. The vectors with a fixed list create every series
// up front, so each is exported, at 0, from the start.
type metrics struct {
	reg            *prometheus.Registry
	decisions      *prometheus.CounterVec
	failOpen       *prometheus.CounterVec
	storeErrors    *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	rejected       *fixedCounters
	reloads        *prometheus.CounterVec
	configOK       prometheus.Gauge
	configLoadedAt prometheus.Gauge
	rules          prometheus.Gauge
	failover       *prometheus.CounterVec
	failoverActive prometheus.Gauge
	overload       *fixedCounters
	apiLatency     prometheus.Observer
	proxyLatency   prometheus.Observer
	limitDenials   *prometheus.CounterVec
	shadowDenials  *prometheus.CounterVec
	settles        *prometheus.CounterVec
	storeLatency   [2][2]prometheus.Observer // [op][result]
}

// RejectReasons are the values of rl_rejected_requests_total's "reason"
// label: the decision API's error codes and the proxy's refusals. A reason
// not listed is counted as "other".
func RejectReasons() []string {
	return []string{"invalid_json", "body_too_large", "unknown_field", "unknown_rule", "invalid_key", "invalid_cost",
		"invalid_limits", "inline_disabled", "invalid_batch", "method_not_allowed", "not_found", "unauthorized",
		"forbidden", "missing_key", "invalid_path", "invalid_host", "upstream_timeout", "other"}
}

// OverloadReasons are the values of rl_overload_rejected_total's "reason"
// label.
func OverloadReasons() []string { return []string{"in_flight", "key_in_flight", "store_busy", "other"} }

// StoreOps and StoreResults are the values of rl_store_duration_seconds's
// "op" and "result" labels.
func StoreOps() []string     { return []string{"decide", "reset"} }
func StoreResults() []string { return []string{"ok", "error"} }

// SettleResults are the values of rl_settles_total's "result" label: the
// actual cost settled against the estimate, a response cost that is not
// one (nothing settled), or a settle the store failed; the one list is
// pipeline.SettleResults, which the proxy-wasm filter counts by too.
func SettleResults() []string {
	var out []string
	for _, r := range pipeline.SettleResults() {
		out = append(out, r.String())
	}
	return out
}

// InlineLimitLabel is the "limit" label of a denial by inline limits,
// whose names are the request's.
const InlineLimitLabel = "_inline"

// fixedCounters is a counter vector of one label whose values are a fixed
// list, every series created up front; a value off the list counts as
// "other" (the list's last).
type fixedCounters struct {
	byValue map[string]prometheus.Counter
	other   prometheus.Counter
}

func newFixedCounters(vec *prometheus.CounterVec, values []string) *fixedCounters {
	f := &fixedCounters{byValue: make(map[string]prometheus.Counter, len(values))}
	for _, v := range values {
		f.byValue[v] = vec.WithLabelValues(v)
	}
	f.other = f.byValue[values[len(values)-1]]
	return f
}

// WithLabelValues returns the counter of v, or of "other".
func (f *fixedCounters) WithLabelValues(v string) prometheus.Counter {
	if c, ok := f.byValue[v]; ok {
		return c
	}
	return f.other
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_decisions_total",
		Help: "Rate-limit decisions by rule and outcome (allowed, denied, fail_open, fail_closed). Peeks count too; rule \"inline\" is the decision API's inline limits.",
	}, []string{"rule", "outcome"})
	m.failOpen = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rate_limiter_fail_open_total",
		Help: "Requests admitted without a decision because the store failed and the rule has fail_open: true. Alert when it grows.",
	}, []string{"rule"})
	m.storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_store_errors_total",
		Help: "Decisions, resets and settles that failed because the store failed (down, timed out, full). Alert when it keeps growing.",
	}, []string{"rule"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rl_decision_duration_seconds",
		Help:    "Time to decide one request (key extraction, store round trip, decision), by source (api, proxy).",
		Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"source"})
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_rejected_requests_total",
		Help: "Requests answered 4xx before any decision, by reason (invalid_json, body_too_large, unknown_rule, invalid_key, missing_key, invalid_cost, invalid_limits, ...), and proxied requests the upstream did not answer in time (upstream_timeout).",
	}, []string{"reason"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_config_reloads_total",
		Help: "Configuration reloads (SIGHUP, or a change -watch-config saw) by result: success, or failure (the old rules stay in force).",
	}, []string{"result"})
	m.configOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rl_config_last_reload_success",
		Help: "1 if the last configuration load succeeded, 0 if it failed (the previous rules are in force): alert on 0.",
	})
	m.configLoadedAt = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rl_config_last_reload_timestamp_seconds",
		Help: "When the rules in force were loaded (at start, or by the last successful reload), in seconds since the Unix epoch: time() minus it is their age.",
	})
	m.rules = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rl_rules",
		Help: "Rules in force.",
	})
	m.failover = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_failover_events_total",
		Help: "Switches of the failover store, by target: memory (PostgreSQL failed, the breaker opened) or primary (PostgreSQL recovered).",
	}, []string{"to"})
	m.failoverActive = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rl_failover_active",
		Help: "1 while decisions are served by the in-memory failover store instead of PostgreSQL: alert when it stays 1.",
	})
	overload := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_overload_rejected_total",
		Help: "Requests answered 503 with Retry-After because of load, never admitted nor forwarded, by reason: in_flight (Options.MaxInFlight), key_in_flight (MaxInFlightPerKey), store_busy (every database connection in use past the queue timeout, or a full memory store). Alert when it keeps growing.",
	}, []string{"reason"})
	m.limitDenials = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_limit_denials_total",
		Help: "Denials by the rule and the limit that denied (the deciding one, with the latest retry), as configured; inline limits count under rule \"inline\", limit \"" + InlineLimitLabel + "\" (their names are the request's).",
	}, []string{"rule", "limit"})
	m.shadowDenials = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_shadow_denials_total",
		Help: "Would-denies of shadow limits (\"shadow\": true): requests admitted that the shadow limit, by rule and limit as configured, would have denied (it was not charged for them); inline limits count under rule \"inline\", limit \"" + InlineLimitLabel + "\".",
	}, []string{"rule", "limit"})
	m.settles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_settles_total",
		Help: "Costs settled after the response, by rule and result: settled (the actual cost from the rule's response_cost_header, or a decision-API settle, corrected the estimate; a cost equal to it needs no store call), invalid (a response cost that is not one; nothing settled), failed (the store failed the settle: alert when it grows). Inline limits count under rule \"inline\".",
	}, []string{"rule", "result"})
	storeLatency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rl_store_duration_seconds",
		Help:    "Time the store took for one call, by op (decide, reset) and result (ok, error): the memory store's lock and decision, or PostgreSQL's round trip (with the pool's wait), for every front end.",
		Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"op", "result"})
	m.reg.MustRegister(m.decisions, m.failOpen, m.storeErrors, m.latency, rejected, m.reloads, m.configOK,
		m.configLoadedAt, buildInfo(version.Get()), m.rules, m.failover, m.failoverActive, overload, m.limitDenials, m.shadowDenials, m.settles, storeLatency,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.rejected, m.overload = newFixedCounters(rejected, RejectReasons()), newFixedCounters(overload, OverloadReasons())
	for i, op := range StoreOps() {
		for j, res := range StoreResults() {
			m.storeLatency[i][j] = storeLatency.WithLabelValues(op, res)
		}
	}
	m.apiLatency = m.latency.WithLabelValues("api")
	m.proxyLatency = m.latency.WithLabelValues("proxy")
	for _, r := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(r)
	}
	for _, t := range []string{"memory", "primary"} {
		m.failover.WithLabelValues(t)
	}
	return m
}

// denialLogSuppressed is rl_denial_log_suppressed_total: the denials the
// denial log left out for its rate.
func denialLogSuppressed(dl *decisionlog.Logger) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "rl_denial_log_suppressed_total",
		Help: "Denials the denial log (-log-denials) left out to keep to its rate; each line reports those left out since the line before. Exported when the denial log is on.",
	}, func() float64 { return float64(dl.Suppressed()) })
}

// buildInfo is rl_build_info: a gauge of 1 whose labels say which build
// is running (package version), for dashboards and alerts to tell
// versions apart in a rollout.
func buildInfo(v version.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rl_build_info",
		Help: "1, labelled with the build: version (the module version), revision (the commit, or unknown), goversion, schema (the database migration it expects), extension (the extension rl's version) and wasm_abi (the WebAssembly module's abi_version); rl-wasm-host -version prints the same.",
		ConstLabels: prometheus.Labels{"version": v.Module, "revision": v.Commit, "goversion": v.Go,
			"schema": strconv.Itoa(v.Schema), "extension": v.Extension, "wasm_abi": strconv.Itoa(v.ABI)},
	})
	g.Set(1)
	return g
}

// configLoaded records that a configuration was loaded and is in force
// (at start or by a reload): rl_config_last_reload_success 1, and its time.
func (m *metrics) configLoaded(at time.Time) {
	m.configOK.Set(1)
	m.configLoadedAt.Set(float64(at.UnixNano()) / 1e9)
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// ruleMetrics are one rule's counters, looked up once per rule set so a
// decision does not hash label values.
type ruleMetrics struct {
	allowed, denied, failOpen, failClosed prometheus.Counter
	failOpenTotal, storeErrors            prometheus.Counter
	// deniedBy are the denials by each limit of the rule, in its order;
	// inline limits have one, InlineLimitLabel.
	deniedBy []prometheus.Counter
	// settles count the rule's settles by result (pipeline.SettleResult).
	settles [pipeline.NumSettleResults]prometheus.Counter
	// shadowDenied are the would-denies of each shadow limit of the rule,
	// in its order (nil for an enforced limit); inline limits have one,
	// InlineLimitLabel, created up front so that the metric is always
	// exported.
	shadowDenied []prometheus.Counter
}

// forRule returns the counters of the rule name with the limits limits
// (nil: inline limits).
func (m *metrics) forRule(name string, limits []rl.Limit) *ruleMetrics {
	rm := &ruleMetrics{
		allowed:       m.decisions.WithLabelValues(name, engine.Allowed.String()),
		denied:        m.decisions.WithLabelValues(name, engine.Denied.String()),
		failOpen:      m.decisions.WithLabelValues(name, engine.FailOpen.String()),
		failClosed:    m.decisions.WithLabelValues(name, engine.FailClosed.String()),
		failOpenTotal: m.failOpen.WithLabelValues(name),
		storeErrors:   m.storeErrors.WithLabelValues(name),
	}
	for _, r := range pipeline.SettleResults() {
		rm.settles[r] = m.settles.WithLabelValues(name, r.String())
	}
	if limits == nil {
		limits = []rl.Limit{{Name: InlineLimitLabel, Shadow: true}}
	}
	for _, l := range limits {
		rm.deniedBy = append(rm.deniedBy, m.limitDenials.WithLabelValues(name, l.Name))
		var c prometheus.Counter
		if l.Shadow {
			c = m.shadowDenials.WithLabelValues(name, l.Name)
		}
		rm.shadowDenied = append(rm.shadowDenied, c)
	}
	return rm
}

// wouldDeny counts the would-denies of a decision admitted by the enforced
// limits: each shadow limit of each (the policy's results) that would
// have denied it (any index for inline limits).
func (rm *ruleMetrics) wouldDeny(each []rl.LimitResult) {
	for i := range each {
		if l := &each[i]; l.Shadow && !l.Allowed {
			j := i
			if j >= len(rm.shadowDenied) || rm.shadowDenied[j] == nil {
				j = 0 // inline limits: one counter
			}
			if c := rm.shadowDenied[j]; c != nil {
				c.Inc()
			}
		}
	}
}

// deniedByLimit counts a denial by limit i of the rule (any index for
// inline limits).
func (rm *ruleMetrics) deniedByLimit(i int) {
	if i < 0 || i >= len(rm.deniedBy) {
		i = 0
	}
	rm.deniedBy[i].Inc()
}

// observeStore records a store call of op (0 decide, 1 reset) that took d
// seconds and failed or not.
func (m *metrics) observeStore(op int, seconds float64, failed bool) {
	res := 0
	if failed {
		res = 1
	}
	m.storeLatency[op][res].Observe(seconds)
}

// PoolStats is a WebAssembly pool's state, as wasm.Pool.Stats reports it.
type PoolStats struct {
	// Instances are live instances, busy or idle; Idle those waiting for
	// a call.
	Instances, Idle int
	// Started and Discarded count the instances started and those
	// discarded after a trap, since the pool began.
	Started, Discarded uint64
}

// poolCollectors are the WebAssembly pool's metrics, read from stats at
// each scrape.
func poolCollectors(stats func() PoolStats) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rl_wasm_instances", Help: "Live WebAssembly instances of the decision core, busy or idle.",
			ConstLabels: prometheus.Labels{"state": "busy"}}, func() float64 { s := stats(); return float64(s.Instances - s.Idle) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rl_wasm_instances", Help: "Live WebAssembly instances of the decision core, busy or idle.",
			ConstLabels: prometheus.Labels{"state": "idle"}}, func() float64 { return float64(stats().Idle) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rl_wasm_instances_started_total",
			Help: "WebAssembly instances started (the pool grows on demand up to -wasm-instances)."}, func() float64 { return float64(stats().Started) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rl_wasm_instances_discarded_total",
			Help: "WebAssembly instances discarded after a trap (each one a bug: alert on any)."}, func() float64 { return float64(stats().Discarded) }),
	}
}

// DeciderStats says which decision core decides, as the command reports
// it (a wasm.Handoff while the module compiles, then the module).
type DeciderStats struct {
	// Deciding is the core deciding now: one of Deciders.
	Deciding string
	// Compiling reports that the WebAssembly module is compiling while
	// the native core decides; it takes over once compiled.
	Compiling bool
	// Failed reports that the WebAssembly module could not start: the
	// native core decides for good.
	Failed bool
	// CompileSeconds is the time the WebAssembly module took to compile
	// and start; 0 until it has, and for the native core.
	CompileSeconds float64
}

// Deciders are the names of the decision cores, DeciderStats.Deciding's
// values: the native core compiled into the binary, and the WebAssembly
// core hosted by wazero.
func Deciders() []string { return []string{"native", "wasm"} }

// deciderCollectors are the decider's metrics, read from stats at each
// scrape: rl_decider{decider} for each of Deciders (1 for the one
// deciding), rl_wasm_compile_seconds and rl_wasm_start_failed.
func deciderCollectors(stats func() DeciderStats) []prometheus.Collector {
	var cs []prometheus.Collector
	for _, d := range Deciders() {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rl_decider",
			Help:        "1 for the decision core deciding now (decider=native or wasm), 0 for the other: with -decider wasm, native while the module compiles, then wasm.",
			ConstLabels: prometheus.Labels{"decider": d}}, func() float64 {
			if stats().Deciding == d {
				return 1
			}
			return 0
		}))
	}
	return append(cs,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rl_wasm_compile_seconds",
			Help: "Time the WebAssembly module took to compile and start (0 until it has, and with -decider native)."},
			func() float64 { return stats().CompileSeconds }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rl_wasm_start_failed",
			Help: "1 when the WebAssembly module could not start, so the native core decides for good (the same decisions; the log says why): alert on it."},
			func() float64 {
				if stats().Failed {
					return 1
				}
				return 0
			}),
	)
}
