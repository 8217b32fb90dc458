package rlqs

import (
	"slices"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcore/rl/internal/request/quota"
)

// OtherDomain is the "domain" label of the server's metrics for a report
// in a domain no rule names (a rule of any domain matched it, or none
// did): a label per client-chosen string would be unbounded.
const OtherDomain = "_other"

// ActionKinds are the values of rl_rlqs_server_assignments_total's "kind"
// label: a token bucket, a blanket DENY_ALL (a bucket no rule matches, one
// beyond MaxBuckets, or a grant of nothing), an abandon_action.
func ActionKinds() []string { return []string{"token_bucket", "deny_all", "abandon"} }

// metrics are a Server's, exported by Collectors. Label values come from
// the configuration (the domains the rules name) or fixed lists, never
// from a client (its ID, a bucket's entries).
type metrics struct {
	reports     map[string]prometheus.Counter     // by domain label
	sent        map[string]*[3]prometheus.Counter // by domain label, then ActionKinds' index
	undelivered prometheus.Counter
	// buckets is the count of the store's buckets, as last counted.
	buckets atomic.Int64
	cs      []prometheus.Collector
}

// newMetrics makes the metrics of a server whose rules name the domains
// domains; every series exists, at 0, from the start.
func newMetrics(s *Server, domains []string) *metrics {
	reports := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_rlqs_server_reports_total",
		Help: "Usage reports the RLQS server (-rlqs-config) received, by domain (the report's, when a rule names it; \"_other\" for the others).",
	}, []string{"domain"})
	sent := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rl_rlqs_server_assignments_total",
		Help: "Bucket actions the RLQS server sent on its clients' streams, by domain (as rl_rlqs_server_reports_total's) and kind: token_bucket (a grant, changed or re-sent to extend it), deny_all (a bucket no rule matches, one past the bucket bound, or no share left), abandon (a client that reported no usage for 5 minutes).",
	}, []string{"domain", "kind"})
	m := &metrics{reports: map[string]prometheus.Counter{}, sent: map[string]*[3]prometheus.Counter{},
		undelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rl_rlqs_server_undelivered_total",
			Help: "Assignments the RLQS server could not hand to their client's stream (the client is on another server sharing the database, or gone; its send buffer was full; the send failed): each is sent again in answer to the client's next report. Alert when it keeps growing.",
		})}
	for _, d := range append(slices.Clone(domains), OtherDomain) {
		m.reports[d] = reports.WithLabelValues(d)
		var byKind [3]prometheus.Counter
		for i, k := range ActionKinds() {
			byKind[i] = sent.WithLabelValues(d, k)
		}
		m.sent[d] = &byKind
	}
	m.cs = []prometheus.Collector{reports, sent, m.undelivered,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "rl_rlqs_server_streams",
			Help: "Clients with a stream open to the RLQS server (an Envoy, or a replica of rl-wasm-host with global rules; with client_id_metadata, one per client however often it reconnects).",
		}, func() float64 { return float64(s.streams()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "rl_rlqs_server_buckets",
			Help: "Buckets the RLQS server's store holds, each a global limit being divided (with -rlqs-store postgres, those of every server on the database), as counted at the last report or tick (every second).",
		}, func() float64 { return float64(m.buckets.Load()) }),
	}
	return m
}

// domain returns the domain label of a report's domain d.
func (m *metrics) domain(d string) string {
	if _, ok := m.reports[d]; ok {
		return d
	}
	return OtherDomain
}

// sentOne counts an action sent on a stream in the domain labelled d.
func (m *metrics) sentOne(d string, a quota.Action) {
	k := 0
	switch {
	case a.Kind == quota.Abandon:
		k = 2
	case a.Grant.IsZero():
		k = 1
	}
	byKind := m.sent[d]
	if byKind == nil {
		byKind = m.sent[OtherDomain]
	}
	byKind[k].Inc()
}

// keyDomain is the domain of a bucket's key (the domain, a 0 byte, the
// bucket_id's canonical form).
func keyDomain(key string) string {
	d, _, _ := strings.Cut(key, "\x00")
	return d
}

// Collectors returns the server's metrics, read at each scrape where they
// are not counted as they happen: rl_rlqs_server_streams,
// rl_rlqs_server_buckets, rl_rlqs_server_reports_total{domain},
// rl_rlqs_server_assignments_total{domain,kind} and
// rl_rlqs_server_undelivered_total. Register them once, on one registry.
func (s *Server) Collectors() []prometheus.Collector { return slices.Clone(s.m.cs) }

// streams counts the clients with a stream open.
func (s *Server) streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
