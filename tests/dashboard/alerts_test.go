package dashboard_test

import (
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

const (
	alertsFile     = "../../deploy/prometheus/alerts.yaml"
	alertsTestFile = "../../deploy/prometheus/alerts_test.yaml"
)

// alertRule is one alerting rule of alerts.yaml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&f))
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	require.NotEmpty(t, rules)
	return rules
}

// promtool checks the rules and runs their unit tests (input series and
// the alerts they must raise, or not).
func TestAlertRulesPromtool(t *testing.T) {
	promtool := tool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", alertsFile}, {"test", "rules", alertsTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
		require.Contains(t, string(out), "SUCCESS", "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// Every metric and label the rules query is one /metrics exports; every
// metric whose help text says to alert on it has a rule, and every rule's
// metric says so; each rule is per process (job, instance), has a severity,
// a summary and a description, and the unit tests show it firing and not.
func TestAlertRulesCoverMetrics(t *testing.T) {
	fams := exported(t)
	queried := map[string][]string{} // metric: alerts
	for _, r := range alertRules(t) {
		require.NotEmpty(t, r.Alert)
		require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], "%s: severity", r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], "%s: summary", r.Alert)
		require.NotEmpty(t, r.Annotations["description"], "%s: description", r.Alert)
		require.Contains(t, r.Annotations["summary"], "{{ $labels.instance }}", "%s: the summary names the process", r.Alert)
		p := parsePromQL(r.Expr)
		require.NotEmpty(t, p.metrics, "%s: no metric in %q", r.Alert, r.Expr)
		for _, l := range []string{"job", "instance"} {
			require.Contains(t, p.groupBy, l, "%s: alerts per process, by (job, instance, ...): %s", r.Alert, r.Expr)
		}
		for name, labels := range p.metrics {
			f, _ := metricOf(fams, name)
			if f == nil {
				t.Errorf("%s: %q is not a metric /metrics exports (%s)", r.Alert, name, r.Expr)
				continue
			}
			queried[name] = append(queried[name], r.Alert)
			for _, l := range append(labels, p.groupBy...) {
				if !f.labels[l] && !targetLabels[l] {
					t.Errorf("%s: %q has no label %q (%s)", r.Alert, name, l, r.Expr)
				}
			}
		}
	}
	var names []string
	for name := range fams {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		says := strings.Contains(strings.ToLower(fams[name].help), "alert")
		switch {
		case says && queried[name] == nil:
			t.Errorf("%s's help says to alert on it, and no rule of %s does: %s", name, alertsFile, fams[name].help)
		case !says && queried[name] != nil:
			t.Errorf("%s alerts on %s, whose help does not say to alert on it: %s", strings.Join(queried[name], ", "), name, fams[name].help)
		}
	}
	// What the metrics ask operators to watch, by name.
	for _, m := range []string{"rate_limiter_fail_open_total", "rl_store_errors_total", "rl_failover_active", "rl_overload_rejected_total",
		"rl_config_last_reload_success", "rl_settles_total", "rl_wasm_start_failed", "rl_rls_unknown_domain_total"} {
		require.Contains(t, queried, m, "a rule alerts on %s", m)
	}

	b, err := os.ReadFile(alertsTestFile)
	require.NoError(t, err)
	var ut struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(b, &ut))
	require.Equal(t, []string{"alerts.yaml"}, ut.RuleFiles)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range ut.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range alertRules(t) {
		require.True(t, fires[r.Alert], "%s has a unit test where it fires", r.Alert)
		require.True(t, quiet[r.Alert], "%s has a unit test where it does not", r.Alert)
	}
}

// ruleHealth is one rule of Prometheus's /api/v1/rules.
type ruleHealth struct {
	Name           string `json:"name"`
	Health         string `json:"health"`
	LastError      string `json:"lastError"`
	LastEvaluation string `json:"lastEvaluation"`
}

// rulesHealth returns the rules Prometheus loaded, with how their last
// evaluation went.
func (p *promServer) rulesHealth(t *testing.T) []ruleHealth {
	t.Helper()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Groups []struct {
				Rules []ruleHealth `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	p.get(t, "/api/v1/rules", &r)
	require.Equal(t, "success", r.Status)
	var out []ruleHealth
	for _, g := range r.Data.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// requireRulesHealthy waits until Prometheus has evaluated every alerting
// rule of alerts.yaml on the scraped series, and requires each evaluation
// to have succeeded.
func requireRulesHealthy(t *testing.T, p *promServer, until func(string, func() (bool, string))) {
	t.Helper()
	var want []string
	for _, r := range alertRules(t) {
		want = append(want, r.Alert)
	}
	until("Prometheus to evaluate every alerting rule", func() (bool, string) {
		var got, waiting []string
		for _, r := range p.rulesHealth(t) {
			got = append(got, r.Name)
			if r.Health == "err" {
				t.Fatalf("rule %s fails on the scraped series: %s", r.Name, r.LastError)
			}
			if r.Health != "ok" || strings.HasPrefix(r.LastEvaluation, "0001-") {
				waiting = append(waiting, r.Name+" ("+r.Health+")")
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			return false, "loaded: " + strings.Join(got, ", ")
		}
		return len(waiting) == 0, "not yet evaluated: " + strings.Join(waiting, ", ")
	})
}
