package service

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/rlcore/rl/internal/testkit/await"
)

// scrapeMetric is the value of the series (name and labels as exported)
// on h's /metrics; ok is false when it is absent.
func scrapeMetric(t *testing.T, h http.Handler, series string) (v float64, ok bool) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("/metrics: %d", w.Code)
	}
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if s, found := strings.CutPrefix(line, series+" "); found {
			n, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return n, true
		}
	}
	return 0, false
}

// TestGlobalRuleMetrics: /metrics says whether a global rule's stream is
// up and what decides it: the fallback before the first assignment, the
// assignment (its rate and burst) after, and the assignment still after
// the server is gone (until its TTL), the stream down.
func TestGlobalRuleMetrics(t *testing.T) {
	f, addr := startFakeRLQS(t)
	_, h := globalService(t, addr)
	client := func(name string) string {
		return fmt.Sprintf(`%s{domain=%q,server=%q}`, name, DefaultGlobalDomain, addr)
	}
	mode := func(m string) string { return fmt.Sprintf(`rl_rlqs_bucket_mode{mode=%q,rule="api"}`, m) }
	is := func(series string, want float64) func() bool {
		return func() bool { v, ok := scrapeMetric(t, h, series); return ok && v == want }
	}
	atLeast := func(series string, want float64) func() bool {
		return func() bool { v, ok := scrapeMetric(t, h, series); return ok && v >= want }
	}

	// The fake answers nothing yet: the stream is open, not up (no
	// answer), reports are sent, and the fallback decides.
	await.Until(t, "a report sent", atLeast(client("rl_rlqs_client_reports_total"), 1))
	for _, c := range []struct {
		series string
		want   float64
	}{
		{client("rl_rlqs_client_stream_up"), 0},
		{mode("fallback"), 1},
		{mode("assignment"), 0},
		{mode("deny_all"), 0},
		{`rl_rlqs_bucket_assigned_rate{rule="api"}`, 0},
		{`rl_rlqs_bucket_assigned_burst{rule="api"}`, 0},
		{`rl_rlqs_bucket_assignments_total{rule="api"}`, 0},
		{`rl_rlqs_bucket_mode{mode="fallback",rule="local"}`, -1}, // not a global rule: absent
	} {
		v, ok := scrapeMetric(t, h, c.series)
		if c.want < 0 {
			if ok {
				t.Fatalf("%s exported for a rule that is not global", c.series)
			}
			continue
		}
		if !ok || v != c.want {
			t.Fatalf("before any assignment: %s = %v (exported %v), want %v", c.series, v, ok, c.want)
		}
	}
	if c := serve(h, "POST", APIPrefix+"check", `{"rule":"api","key":"k"}`); c != http.StatusTooManyRequests {
		t.Fatalf("check without an assignment: %d, want 429", c)
	}
	if v, _ := scrapeMetric(t, h, `rl_rlqs_bucket_fallback_decisions_total{rule="api"}`); v != 1 {
		t.Fatalf("fallback decisions %v, want 1", v)
	}

	// Assigned: 5 tokens, 5 an hour.
	f.tokens.Store(5)
	await.Until(t, "the assignment in force", is(mode("assignment"), 1))
	await.Until(t, "the stream up", is(client("rl_rlqs_client_stream_up"), 1))
	for _, c := range []struct {
		series string
		want   float64
	}{
		{mode("fallback"), 0},
		{`rl_rlqs_bucket_assigned_burst{rule="api"}`, 5},
		{`rl_rlqs_bucket_assigned_rate{rule="api"}`, 5.0 / 3600},
		{client("rl_rlqs_client_stream_connects_total"), 1},
	} {
		if v, ok := scrapeMetric(t, h, c.series); !ok || math.Abs(v-c.want) > 1e-9 {
			t.Fatalf("assigned: %s = %v (exported %v), want %v", c.series, v, ok, c.want)
		}
	}
	if v, _ := scrapeMetric(t, h, `rl_rlqs_bucket_assignments_total{rule="api"}`); v < 1 {
		t.Fatalf("assignments %v, want at least 1", v)
	}

	// The server gone: the stream is down, the assignment holds (its
	// TTL is an hour).
	f.srv.Stop()
	await.Until(t, "the stream down", is(client("rl_rlqs_client_stream_up"), 0))
	if v, _ := scrapeMetric(t, h, mode("assignment")); v != 1 {
		t.Fatalf("mode assignment %v after the server went, want 1 (its TTL has not passed)", v)
	}
}
