package service

import (
	"github.com/prometheus/client_golang/prometheus"
)

// BucketModes are the values of rl_rlqs_bucket_mode's "mode" label: what
// decides a global rule now. assignment: a token bucket the RLQS server
// assigned (ALLOW_ALL: the rule's own limit); deny_all: the server's
// DENY_ALL; fallback: no live assignment (none yet, expired, abandoned),
// so the rule's global.fallback decides, or nothing is admitted.
func BucketModes() []string { return []string{"assignment", "deny_all", "fallback"} }

// desc is the description of a metric of globalCollector: its name and
// help as a vector's options give them.
func desc(o prometheus.Opts, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(o.Name, o.Help, labels, nil)
}

// The global rules' metrics (globalCollector). The client's carry the
// server's address and the domain (configuration), the buckets' the rule's
// name: never a request's key.
var (
	rlqsStreamUp = desc(prometheus.Opts{
		Name: "rl_rlqs_client_stream_up",
		Help: "1 while the global rules' stream to the RLQS server (by server address and domain) is open and has answered, else 0: alert when it stays 0 (the assignments in force expire into the rules' fallback).",
	}, "server", "domain")
	rlqsConnects = desc(prometheus.Opts{
		Name: "rl_rlqs_client_stream_connects_total",
		Help: "Streams opened to the RLQS server, the first and every reopening after a failure (with backoff), by server and domain: a steady rise is a flapping stream.",
	}, "server", "domain")
	rlqsReports = desc(prometheus.Opts{
		Name: "rl_rlqs_client_reports_total",
		Help: "Usage reports sent to the RLQS server (one every report interval, and one when a stream opens), by server and domain.",
	}, "server", "domain")
	rlqsRefused = desc(prometheus.Opts{
		Name: "rl_rlqs_client_refused_total",
		Help: "Bucket actions of the RLQS server refused (malformed, unsupported, or for a bucket no rule takes), by server and domain; the assignment in force holds until its TTL. Alert when it grows.",
	}, "server", "domain")
	rlqsMode = desc(prometheus.Opts{
		Name: "rl_rlqs_bucket_mode",
		Help: "1 for what decides the global rule now, 0 for the others: mode assignment (the RLQS server's token bucket), deny_all (the server's DENY_ALL) or fallback (no live assignment: global.fallback decides, or nothing is admitted). Alert when fallback stays 1.",
	}, "rule", "mode")
	rlqsRate = desc(prometheus.Opts{
		Name: "rl_rlqs_bucket_assigned_rate",
		Help: "Tokens per second of the global rule's live assignment, as in force (clamped to the rule's own limit); 0 under deny_all or the fallback. Summed over the replicas it is at most the rule's rate.",
	}, "rule")
	rlqsBurst = desc(prometheus.Opts{
		Name: "rl_rlqs_bucket_assigned_burst",
		Help: "Tokens (max_tokens) of the global rule's live assignment, as in force; 0 under deny_all or the fallback.",
	}, "rule")
	rlqsAssignments = desc(prometheus.Opts{
		Name: "rl_rlqs_bucket_assignments_total",
		Help: "Assignments of the RLQS server applied to the global rule's bucket (token buckets, blanket rules and abandons; an unchanged one re-sent to extend its TTL counts too).",
	}, "rule")
	rlqsFallback = desc(prometheus.Opts{
		Name: "rl_rlqs_bucket_fallback_decisions_total",
		Help: "Requests of the global rule decided without a live assignment (by global.fallback, or denied without one).",
	}, "rule")
)

// globalCollector exports the global rules' RLQS clients and buckets, read
// at each scrape from the clients' and buckets' counters: nothing on the
// decision path. A service without global rules exports none of them.
type globalCollector struct{ s *Service }

// Describe implements prometheus.Collector.
func (gc globalCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{rlqsStreamUp, rlqsConnects, rlqsReports, rlqsRefused, rlqsMode, rlqsRate, rlqsBurst, rlqsAssignments, rlqsFallback} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Clients of one server and
// domain (another report interval or client_id_metadata) are summed, and
// their stream is up only when every one's is.
func (gc globalCollector) Collect(ch chan<- prometheus.Metric) {
	type serverDomain struct{ server, domain string }
	type sums struct {
		up                         bool
		connects, reports, refused int64
	}
	byServer := map[serverDomain]*sums{}
	for _, c := range gc.s.global.stats() {
		k := serverDomain{c.server, c.domain}
		sm := byServer[k]
		if sm == nil {
			sm = &sums{up: true}
			byServer[k] = sm
		}
		sm.up = sm.up && c.Connected
		sm.connects += c.Streams
		sm.reports += c.Reports
		sm.refused += c.Refused
	}
	for k, sm := range byServer {
		up := 0.0
		if sm.up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(rlqsStreamUp, prometheus.GaugeValue, up, k.server, k.domain)
		ch <- prometheus.MustNewConstMetric(rlqsConnects, prometheus.CounterValue, float64(sm.connects), k.server, k.domain)
		ch <- prometheus.MustNewConstMetric(rlqsReports, prometheus.CounterValue, float64(sm.reports), k.server, k.domain)
		ch <- prometheus.MustNewConstMetric(rlqsRefused, prometheus.CounterValue, float64(sm.refused), k.server, k.domain)
	}
	rs := gc.s.rules.Load()
	if rs == nil {
		return
	}
	now := gc.s.eng.Clock()()
	modes := BucketModes()
	for _, spec := range rs.cfg.Rules {
		r := rs.byName[spec.Name]
		if r == nil || r.global == nil {
			continue
		}
		st := r.global.Stats(now)
		mode := modes[2]
		switch {
		case st.Live && st.Deny:
			mode = modes[1]
		case st.Live:
			mode = modes[0]
		}
		for _, m := range modes {
			v := 0.0
			if m == mode {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(rlqsMode, prometheus.GaugeValue, v, spec.Name, m)
		}
		rate, burst := 0.0, 0.0
		if a := st.Assigned; a.Window > 0 {
			rate, burst = float64(a.Rate)*1e6/float64(a.Window), float64(a.Limit)
		}
		ch <- prometheus.MustNewConstMetric(rlqsRate, prometheus.GaugeValue, rate, spec.Name)
		ch <- prometheus.MustNewConstMetric(rlqsBurst, prometheus.GaugeValue, burst, spec.Name)
		ch <- prometheus.MustNewConstMetric(rlqsAssignments, prometheus.CounterValue, float64(st.Assignments), spec.Name)
		ch <- prometheus.MustNewConstMetric(rlqsFallback, prometheus.CounterValue, float64(st.Fallback), spec.Name)
	}
}
