// Package dashboard_test holds the committed Grafana dashboard
// (docs/grafana/rl-wasm-host.json), the alerting rules
// (deploy/prometheus/alerts.yaml) to what rl-wasm-host's /metrics
// exports: every metric a panel, variable, annotation or alert queries
// exists with every label the query names. (The metrics reference,
// docs/reference/metrics.md, is generated from the registry by
// tests/docs/docgen.) With Debian's package prometheus it also runs the
// dashboard's queries and the rules on a real Prometheus scraping the
// service, and the rules' unit tests with promtool.
package dashboard_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/frontend/rls"
	"github.com/rlcore/rl/internal/frontend/service"
	"github.com/rlcore/rl/memstore"
)

const dashboardFile = "../../docs/grafana/rl-wasm-host.json"

// family is one exported metric: its type, help text and label names.
type family struct {
	typ, help string
	labels    map[string]bool
}

// exported runs rl-wasm-host's service as the command wires it (rules, the
// WebAssembly pool's metrics, the gRPC rate limit service) and reads
// /metrics: every metric it exports, with its labels.
func exported(t *testing.T) map[string]*family {
	t.Helper()
	cfg, err := service.ParseConfig("c.yaml", "yaml", []byte(`
upstream: demo
rules:
  - name: r
    endpoint: /r
    limits:
      - {name: burst, strategy: token, limit: 10, window: 1s}
      - {name: daily, strategy: fixed, limit: 1000, window: 1d}
`))
	require.NoError(t, err)
	mem := memstore.New(nil)
	t.Cleanup(func() { mem.Close() })
	svc, err := service.New(cfg, service.Options{Store: mem, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, svc.MonitorPool(func() service.PoolStats { return service.PoolStats{Instances: 1, Idle: 1} }))
	require.NoError(t, svc.MonitorDecider(func() service.DeciderStats { return service.DeciderStats{Deciding: "wasm", CompileSeconds: 1.5} }))
	d, err := rls.ParseDomain("d.yaml", []byte("domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"+
		"  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 5, shadow_limits: [{name: candidate, unit: minute, requests_per_unit: 2}]}\n"))
	require.NoError(t, err)
	_, err = rls.New(svc, &rls.Config{Path: "d.yaml", Domains: map[string]*rls.Domain{"d": d}}, rls.Options{Trusted: true})
	require.NoError(t, err)
	srv := httptest.NewServer(svc.APIHandler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	return parseExposition(t, string(b))
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? `)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)

// parseExposition reads Prometheus's text format: the families, each
// sample's labels added to its family (a histogram's _bucket, _sum and
// _count samples to the histogram's).
func parseExposition(t *testing.T, text string) map[string]*family {
	fams := map[string]*family{}
	help := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if f, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, h, _ := strings.Cut(f, " ")
			help[name] = h
			continue
		}
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			fams[name] = &family{typ: typ, help: help[name], labels: map[string]bool{}}
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1]
		fam, bucket := fams[name], false
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suf); ok && fams[base] != nil && (fams[base].typ == "histogram" || fams[base].typ == "summary") {
				fam, bucket = fams[base], suf == "_bucket"
			}
		}
		if fam == nil {
			t.Fatalf("sample %q of no family", line)
		}
		for _, p := range labelPair.FindAllStringSubmatch(m[3], -1) {
			if !(bucket && p[1] == "le") { // a bucket's bound, not the histogram's label
				fam.labels[p[1]] = true
			}
		}
	}
	return fams
}

// query is one PromQL expression of the dashboard, where it is.
type query struct {
	where, expr string
}

// queries returns every expression of the dashboard: its panels' targets,
// its variables' label_values and its annotations.
func queries(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Annotations struct {
			List []struct {
				Name string `json:"name"`
				Expr string `json:"expr"`
			} `json:"list"`
		} `json:"annotations"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	require.Equal(t, "rl-wasm-host", d.Title)
	var qs []query
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			qs = append(qs, query{fmt.Sprintf("panel %q target %d", p.Title, i), tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			qs = append(qs, query{fmt.Sprintf("variable %q", v.Name), v.Definition})
		}
	}
	for _, a := range d.Annotations.List {
		qs = append(qs, query{fmt.Sprintf("annotation %q", a.Name), a.Expr})
	}
	require.NotEmpty(t, qs)
	for _, q := range qs {
		require.NotEmpty(t, q.expr, q.where)
	}
	return qs
}

// PromQL's words that are not metric names.
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "offset": true, "bool": true, "inf": true, "nan": true,
}

var (
	grafanaVar  = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?`)
	rangeSel    = regexp.MustCompile(`\[[^\]]*\]`)
	stringLit   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	grouping    = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	selector    = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	matcherName = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	identifier  = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*\s*(?:\{[^}]*\})?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)
)

// parsed is what an expression names: the metrics with the labels its
// selectors match on, and the labels it groups by.
type parsed struct {
	metrics map[string][]string
	groupBy []string
}

// parsePromQL finds the metric names and labels of an expression: a
// selector's matchers name the labels of its metric; by, without, on and
// ignoring name labels of the expression's metrics; any other identifier
// not followed by "(" (a function) nor a keyword is a metric.
func parsePromQL(expr string) parsed {
	p := parsed{metrics: map[string][]string{}}
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		p = parsePromQL(m[1])
		for name := range p.metrics {
			p.metrics[name] = append(p.metrics[name], m[2])
		}
		return p
	}
	s := rangeSel.ReplaceAllString(grafanaVar.ReplaceAllString(expr, "x"), "")
	for _, m := range selector.FindAllStringSubmatch(stringLitBlank(s), -1) {
		for _, mm := range matcherName.FindAllStringSubmatch(m[2], -1) {
			p.metrics[m[1]] = append(p.metrics[m[1]], mm[1])
		}
	}
	s = stringLit.ReplaceAllString(s, `""`)
	s = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(s, "")
	for _, m := range grouping.FindAllStringSubmatch(s, -1) {
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				p.groupBy = append(p.groupBy, l)
			}
		}
	}
	s = grouping.ReplaceAllString(s, "") // "sum by (x) (rate(...))" reads as the function sum
	for _, loc := range identifier.FindAllStringIndex(s, -1) {
		w := s[loc[0]:loc[1]]
		rest := strings.TrimLeft(s[loc[1]:], " \t\n")
		switch {
		case promqlWords[strings.ToLower(w)], strings.HasPrefix(rest, "("):
		case loc[0] > 0 && (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.'): // 1e-9, 0.99
		default:
			if _, ok := p.metrics[w]; !ok {
				p.metrics[w] = nil
			}
		}
	}
	return p
}

// stringLitBlank keeps string literals (matchers' values) but blanks "}"
// in them, so that a selector's braces are found whole.
func stringLitBlank(s string) string {
	return stringLit.ReplaceAllStringFunc(s, func(l string) string { return strings.ReplaceAll(l, "}", " ") })
}

// metricOf returns the exported family a queried name reads (a
// histogram's _bucket, _sum and _count read the histogram) and the labels
// that name has beyond the family's (le for _bucket).
func metricOf(fams map[string]*family, name string) (*family, []string) {
	if f := fams[name]; f != nil {
		return f, nil
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if f := fams[base]; f != nil && (f.typ == "histogram" || f.typ == "summary") {
				if suf == "_bucket" {
					return f, []string{"le"}
				}
				return f, nil
			}
		}
	}
	return nil, nil
}

// targetLabels are the labels Prometheus gives every series it scrapes:
// the target's job and instance.
var targetLabels = map[string]bool{"job": true, "instance": true}

// TestDashboardQueriesExportedMetrics: every metric the dashboard queries
// is one rl-wasm-host exports, with every label its selectors and
// groupings name.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	fams := exported(t)
	used := map[string]bool{}
	for _, q := range queries(t) {
		p := parsePromQL(q.expr)
		require.NotEmpty(t, p.metrics, "%s: no metric in %q", q.where, q.expr)
		var all []string
		for name, labels := range p.metrics {
			f, extra := metricOf(fams, name)
			if f == nil {
				t.Errorf("%s: %q is not a metric /metrics exports (%s)", q.where, name, q.expr)
				continue
			}
			used[name] = true
			for _, l := range labels {
				if !f.labels[l] && !slices.Contains(extra, l) && !targetLabels[l] {
					t.Errorf("%s: %q has no label %q (%s)", q.where, name, l, q.expr)
				}
			}
			for l := range f.labels {
				all = append(all, l)
			}
			all = append(all, extra...)
		}
		for _, l := range p.groupBy {
			if !slices.Contains(all, l) && !targetLabels[l] {
				t.Errorf("%s: groups by %q, a label of none of its metrics (%s)", q.where, l, q.expr)
			}
		}
	}
	// The dashboard covers what the issue asks of it.
	for _, m := range []string{"rl_decisions_total", "rl_limit_denials_total", "rate_limiter_fail_open_total", "rl_overload_rejected_total",
		"rl_store_duration_seconds_bucket", "rl_wasm_instances", "rl_config_reloads_total", "rl_rls_requests_total", "rl_settles_total"} {
		require.True(t, used[m], "the dashboard shows %s", m)
	}
}

// TestParsePromQL holds the test's own parser to a few expressions.
func TestParsePromQL(t *testing.T) {
	p := parsePromQL(`histogram_quantile(0.99, sum by (le, source) (rate(rl_decision_duration_seconds_bucket{source!="x"}[$__rate_interval]))) / clamp_min(sum(up), 1e-9)`)
	require.Equal(t, map[string][]string{"rl_decision_duration_seconds_bucket": {"source"}, "up": nil}, p.metrics)
	require.Equal(t, []string{"le", "source"}, p.groupBy)
	p = parsePromQL(`label_values(rl_decisions_total, rule)`)
	require.Equal(t, map[string][]string{"rl_decisions_total": {"rule"}}, p.metrics)
	p = parsePromQL(`label_values(rl_decisions_total{job=~"$job"}, rule)`)
	require.Equal(t, map[string][]string{"rl_decisions_total": {"job", "rule"}}, p.metrics)
	p = parsePromQL(`changes(rl_config_reloads_total{result="success",x=~"a}b"}[2m]) > 0`)
	require.Equal(t, map[string][]string{"rl_config_reloads_total": {"result", "x"}}, p.metrics)
}
