package rls

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// logBuffer is a log's output, written by the server's goroutines and read
// by the test.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the lines logged so far that contain s.
func (l *logBuffer) lines(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.SplitSeq(l.b.String(), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// metric is the value of the series (name and labels as exported) on the
// Service's /metrics, -1 if absent.
func (e *env) metric(t *testing.T, series string) float64 {
	t.Helper()
	w := httptest.NewRecorder()
	e.svc.APIHandler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, 200, w.Code)
	for line := range strings.SplitSeq(w.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return n
		}
	}
	return -1
}

// TestUnknownDomain: a call naming a domain the configuration lacks is
// answered OK, nothing limited (as envoyproxy/ratelimit answers it), and
// no longer silently: each such call is counted in
// rl_rls_unknown_domain_total (without the domain, the caller's string),
// and each unknown domain logged the first time, naming the configured
// domains, up to maxUnknownDomains per configuration; past them one line
// says the rest are only counted, so a caller naming a new domain each
// call grows neither memory nor the log. A reload starts again. Before, a
// typo in Envoy's domain admitted everything with no log line.
func TestUnknownDomain(t *testing.T) {
	logs := &logBuffer{}
	e := newEnv(t, hitsYAML, envOpts{logger: slog.New(slog.NewTextHandler(logs, nil))})
	const counter = "rl_rls_unknown_domain_total"
	const logged = "a call names a domain the configuration lacks"
	require.Equal(t, 0.0, e.metric(t, counter), "exported from the start")

	for range 3 {
		require.Equal(t, OK, e.call(t, "dd", d("k", "a")).OverallCode, "a typo of d")
	}
	require.Equal(t, 3.0, e.metric(t, counter))
	lines := logs.lines(logged)
	require.Len(t, lines, 1, "logged once per domain")
	require.Contains(t, lines[0], "domain=dd")
	require.Contains(t, lines[0], `configured="\"d\""`, "naming the domains Envoy's must match")

	// A known domain is neither counted nor logged.
	require.Equal(t, 10, e.admitted(t, 11, "d", d("k", "a")))
	require.Equal(t, 3.0, e.metric(t, counter))

	// A domain longer than maxLoggedDomain is logged cut.
	long := strings.Repeat("x", 10_000)
	require.Equal(t, OK, e.call(t, long, d("k", "a")).OverallCode)
	lines = logs.lines(logged)
	require.Len(t, lines, 2)
	require.Contains(t, lines[1], "domain="+strings.Repeat("x", maxLoggedDomain)+"...")
	require.NotContains(t, lines[1], strings.Repeat("x", maxLoggedDomain+1))

	// A caller naming a new domain each call.
	const flood = 3 * maxUnknownDomains
	for i := range flood {
		require.Equal(t, OK, e.call(t, "flood-"+strconv.Itoa(i), d("k", "a")).OverallCode)
	}
	require.Equal(t, float64(3+1+flood), e.metric(t, counter), "every call counted")
	require.Len(t, logs.lines(logged), maxUnknownDomains, "at most maxUnknownDomains logged")
	require.Len(t, logs.lines("too many unknown domains to log each"), 1)
	rs := e.srv.set.Load()
	rs.unknown.mu.Lock()
	require.Len(t, rs.unknown.seen, maxUnknownDomains, "memory bounded")
	rs.unknown.mu.Unlock()
	require.Equal(t, OK, e.call(t, "one-more", d("k", "a")).OverallCode)
	require.Len(t, logs.lines("too many unknown domains to log each"), 1, "said once")

	// A reload starts again: the domain may have been added, or still be
	// a typo.
	require.NoError(t, e.srv.SetConfig(e.srv.Config()))
	require.Equal(t, OK, e.call(t, "dd", d("k", "a")).OverallCode)
	require.Len(t, logs.lines("domain=dd "), 2)
}
