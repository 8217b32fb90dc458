package service

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Outcomes of a decision, the "outcome" label of rl_decisions_total.
const (
	outAllowed    = "allowed"     // admitted
	outDenied     = "denied"      // refused with 429
	outFailOpen   = "fail_open"   // the store failed; admitted by the rule's fail_open
	outFailClosed = "fail_closed" // the store failed; refused with 503
)

// metrics are the service's Prometheus metrics, on a registry of its own.
type metrics struct {
	reg            *prometheus.Registry
	decisions      *prometheus.CounterVec
	failOpen       *prometheus.CounterVec
	storeErrors    *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	rejected       *prometheus.CounterVec
	reloads        *prometheus.CounterVec
	configOK       prometheus.Gauge
	rules          prometheus.Gauge
	failover       *prometheus.CounterVec
	failoverActive prometheus.Gauge
	overload       *prometheus.CounterVec
	apiLatency     prometheus.Observer
	proxyLatency   prometheus.Observer
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
		Help: "Decisions and resets that failed because the store failed (down, timed out, full).",
	}, []string{"rule"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rl_decision_duration_seconds",
		Help:    "Time to decide one request (key extraction, store round trip, decision), by source (api, proxy).",
		Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"source"})
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_rejected_requests_total",
		Help: "Requests answered 4xx before any decision, by reason (invalid_json, body_too_large, unknown_rule, invalid_key, missing_key, invalid_cost, invalid_limits, ...).",
	}, []string{"reason"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_config_reloads_total",
		Help: "Configuration reloads (SIGHUP) by result: success, or failure (the old rules stay in force).",
	}, []string{"result"})
	m.configOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rl_config_last_reload_success",
		Help: "1 if the last configuration load succeeded, 0 if it failed (the previous rules are in force).",
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
		Help: "1 while decisions are served by the in-memory failover store instead of PostgreSQL.",
	})
	m.overload = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_overload_rejected_total",
		Help: "Requests answered 503 with Retry-After because of load, never admitted nor forwarded, by reason: in_flight (Options.MaxInFlight), key_in_flight (MaxInFlightPerKey), store_busy (every database connection in use past the queue timeout).",
	}, []string{"reason"})
	m.reg.MustRegister(m.decisions, m.failOpen, m.storeErrors, m.latency, m.rejected, m.reloads, m.configOK,
		m.rules, m.failover, m.failoverActive, m.overload,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// ruleMetrics are one rule's counters, looked up once per rule set so a
// decision does not hash label values.
type ruleMetrics struct {
	allowed, denied, failOpen, failClosed prometheus.Counter
	failOpenTotal, storeErrors            prometheus.Counter
}

func (m *metrics) forRule(name string) *ruleMetrics {
	return &ruleMetrics{
		allowed:       m.decisions.WithLabelValues(name, outAllowed),
		denied:        m.decisions.WithLabelValues(name, outDenied),
		failOpen:      m.decisions.WithLabelValues(name, outFailOpen),
		failClosed:    m.decisions.WithLabelValues(name, outFailClosed),
		failOpenTotal: m.failOpen.WithLabelValues(name),
		storeErrors:   m.storeErrors.WithLabelValues(name),
	}
}
