package rls

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcore/rl/internal/request/engine"
)

// The "outcome" label of rl_rls_descriptor_decisions_total is the name of
// the descriptor's engine.Outcome: allowed (admitted, and charged unless
// the request was denied), denied (over its limit, or not charged because
// another descriptor was), fail_open (the store was down; answered OK by
// fail_open), fail_closed (the store was down; the call failed,
// UNAVAILABLE), overloaded (load: answered OVER_LIMIT with Retry-After 1);
// or one of two states no decision makes:
const (
	labelShadowDenied = "shadow_denied" // over its limit in shadow_mode: answered OK
	labelUnlimited    = "unlimited"     // unlimited: true
)

// unknownDomain is the domain label of requests naming a domain the
// configuration lacks: a label per client-chosen string would be unbounded.
const unknownDomain = "_unknown"

type metrics struct {
	requests    *prometheus.CounterVec
	descriptors *prometheus.CounterVec
	unmatched   *prometheus.CounterVec
	partial     *prometheus.CounterVec
	storeErrors *prometheus.CounterVec
	reloads     *prometheus.CounterVec
	latency     prometheus.Histogram
	shadow      *prometheus.CounterVec
	// unknownDomain counts the calls naming a domain the configuration
	// lacks, without the domain (the caller's string).
	unknownDomain prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rl_rls_requests_total",
			Help: "Envoy rate limit service calls by domain (\"_unknown\" for a domain not configured) and code (ok, over_limit, error).",
		}, []string{"domain", "code"}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rl_rls_descriptor_decisions_total",
			Help: "Descriptors with a configured limit, by domain, descriptor (the configuration's keys and configured values, never a request's) and outcome (allowed, denied, shadow_denied, fail_open, fail_closed, overloaded, unlimited).",
		}, []string{"domain", "descriptor", "outcome"}),
		unmatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rl_rls_unmatched_descriptors_total",
			Help: "Descriptors that matched no limit (answered OK), or whose limit another descriptor's replaced, by domain.",
		}, []string{"domain"}),
		partial: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rl_rls_partial_total",
			Help: "Requests of several descriptors denied after some were charged: a concurrent request drained one between its check and its take (the race of the all-or-nothing step; it only under-admits).",
		}, []string{"domain"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rl_rls_store_errors_total",
			Help: "Descriptor decisions the store failed, by domain. Alert when it keeps growing.",
		}, []string{"domain"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rl_rls_config_reloads_total",
			Help: "Reloads of the rate limit service configuration (SIGHUP, or a change -watch-config saw) by result: success, or failure (the old configuration stays in force: alert when it grows).",
		}, []string{"result"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rl_rls_shadow_denials_total",
			Help: "Would-denies of rl's shadow_limits (an extension of rate_limit), by domain, descriptor (the configuration's keys and values) and limit (the shadow limit's name): descriptors admitted and charged that the shadow limit would have denied (it was not charged for them).",
		}, []string{"domain", "descriptor", "limit"}),
		unknownDomain: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rl_rls_unknown_domain_total",
			Help: "Calls naming a domain the configuration lacks, answered OK with nothing limited: Envoy's rate limit domain must be one of the configured domains (each unknown domain is logged the first time it is seen, up to 64 per configuration). Alert when it grows.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rl_rls_duration_seconds",
			Help:    "Time to answer one ShouldRateLimit call (matching, store round trips, decisions).",
			Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
	}
}

// register adds the metrics to r, reusing collectors registered before
// (a second Server over one Service shares them).
func (m *metrics) register(r func(...prometheus.Collector) error) error {
	reg := func(c prometheus.Collector, set func(prometheus.Collector)) error {
		err := r(c)
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			set(are.ExistingCollector)
			return nil
		}
		return err
	}
	for _, x := range []struct {
		c   prometheus.Collector
		set func(prometheus.Collector)
	}{
		{m.requests, func(c prometheus.Collector) { m.requests = c.(*prometheus.CounterVec) }},
		{m.descriptors, func(c prometheus.Collector) { m.descriptors = c.(*prometheus.CounterVec) }},
		{m.unmatched, func(c prometheus.Collector) { m.unmatched = c.(*prometheus.CounterVec) }},
		{m.partial, func(c prometheus.Collector) { m.partial = c.(*prometheus.CounterVec) }},
		{m.storeErrors, func(c prometheus.Collector) { m.storeErrors = c.(*prometheus.CounterVec) }},
		{m.reloads, func(c prometheus.Collector) { m.reloads = c.(*prometheus.CounterVec) }},
		{m.shadow, func(c prometheus.Collector) { m.shadow = c.(*prometheus.CounterVec) }},
		{m.latency, func(c prometheus.Collector) { m.latency = c.(prometheus.Histogram) }},
		{m.unknownDomain, func(c prometheus.Collector) { m.unknownDomain = c.(prometheus.Counter) }},
	} {
		if err := reg(x.c, x.set); err != nil {
			return err
		}
	}
	// Exported, at 0, before the first reload.
	for _, r := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(r)
	}
	return nil
}

// domainMetrics are one domain's counters, looked up once per
// configuration load.
type domainMetrics struct {
	ok, overLimit, failed prometheus.Counter
	unmatched, partial    prometheus.Counter
	storeErrors           prometheus.Counter
}

func (m *metrics) forDomain(name string) *domainMetrics {
	return &domainMetrics{
		ok:          m.requests.WithLabelValues(name, "ok"),
		overLimit:   m.requests.WithLabelValues(name, "over_limit"),
		failed:      m.requests.WithLabelValues(name, "error"),
		unmatched:   m.unmatched.WithLabelValues(name),
		partial:     m.partial.WithLabelValues(name),
		storeErrors: m.storeErrors.WithLabelValues(name),
	}
}

// descMetrics are one configured limit's counters.
type descMetrics struct {
	allowed, denied, shadowDenied, failOpen, failClosed, overloaded, unlimited prometheus.Counter
	// wouldDeny counts each of the limit's shadow_limits' would-denies,
	// in their order.
	wouldDeny []prometheus.Counter
}

func (m *metrics) forDescriptor(domain, path string, l *Limit) *descMetrics {
	c := func(out string) prometheus.Counter { return m.descriptors.WithLabelValues(domain, path, out) }
	dm := &descMetrics{allowed: c(engine.Allowed.String()), denied: c(engine.Denied.String()), shadowDenied: c(labelShadowDenied),
		failOpen: c(engine.FailOpen.String()), failClosed: c(engine.FailClosed.String()), overloaded: c(engine.Overloaded.String()),
		unlimited: c(labelUnlimited)}
	for _, s := range l.ShadowLimits {
		dm.wouldDeny = append(dm.wouldDeny, m.shadow.WithLabelValues(domain, path, s.Name))
	}
	return dm
}
