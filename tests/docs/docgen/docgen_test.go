package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/util/flagdoc"
)

// TestPagesCurrent: each reference page this command builds itself is
// committed as it builds it (the flags pages: each command's
// TestFlagsReference).
func TestPagesCurrent(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	pages, err := inProcess(root)
	require.NoError(t, err)
	for path, want := range pages {
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
		require.NoError(t, err, "run %s", flagdoc.Command)
		require.Equal(t, want, string(got), "%s is stale: run %s", path, flagdoc.Command)
	}
}

func TestParseFamilies(t *testing.T) {
	fams, err := parseFamilies("# HELP rl_x_seconds Time.\n# TYPE rl_x_seconds histogram\n" +
		"rl_x_seconds_bucket{source=\"api\",le=\"0.1\"} 0\nrl_x_seconds_sum{source=\"api\"} 0\nrl_x_seconds_count{source=\"api\"} 0\n" +
		"# HELP go_goroutines G.\n# TYPE go_goroutines gauge\ngo_goroutines 3\n" +
		"# HELP rl_y_total Y \\\\ z.\n# TYPE rl_y_total counter\nrl_y_total{rule=\"a\",outcome=\"b\"} 1\n")
	require.NoError(t, err)
	require.Len(t, fams, 2)
	require.Equal(t, family{name: "rl_x_seconds", typ: "histogram", help: "Time.", labels: []string{"source"}}, *fams[0])
	require.Equal(t, family{name: "rl_y_total", typ: "counter", help: `Y \ z.`, labels: []string{"rule", "outcome"}}, *fams[1])
}

var metricName = regexp.MustCompile(`Name:\s+"((?:rl|rate_limiter)_[a-z_]+)"`)

// TestMetricsPageComplete: every metric named in the front ends' source is
// on the metrics page (a vector with no series would not be exported, so
// the page's service must create one of each).
func TestMetricsPageComplete(t *testing.T) {
	page, err := metricsPage()
	require.NoError(t, err)
	n := 0
	err = filepath.WalkDir(filepath.Join("..", "..", "..", "internal", "frontend"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range metricName.FindAllStringSubmatch(string(b), -1) {
			n++
			require.Contains(t, page, "| `"+m[1]+"` |", "%s: metric %s is not on the metrics page: give metricsPage's service a series of it", p, m[1])
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, n, 20, "the metric names found in the source")
}
