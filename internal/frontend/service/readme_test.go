package service

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeServiceQuickStart: the README's quick start for the service
// loads, admits its burst of 5 from one client, and answers the next with
// the 429 the README shows, field for field (the upstream replaced by the
// demo one: only the denial is compared).
func TestReadmeServiceQuickStart(t *testing.T) {
	b, err := os.ReadFile("../../../README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## The service in front of your app\n")
	require.True(t, ok, "README.md has no section \"The service in front of your app\"")
	section, _, _ = strings.Cut(section, "\n## ")
	_, rules, ok := strings.Cut(section, "cat > rules.yaml <<'EOF'\n")
	require.True(t, ok, "the quick start writes no rules.yaml")
	rules, _, ok = strings.Cut(rules, "\nEOF\n")
	require.True(t, ok)
	require.Contains(t, rules, "upstream: http://127.0.0.1:3000\n")
	e := newEnv(t, strings.Replace(rules, "upstream: http://127.0.0.1:3000\n", "upstream: demo\n", 1), nil)

	for i := range 5 {
		require.Equal(t, 200, e.do(t, "GET", "/", "").code, "request %d", i+1)
	}
	r := e.do(t, "GET", "/", "")
	require.Equal(t, 429, r.code)

	_, sample, ok := strings.Cut(section, "```\nHTTP/1.1 429 Too Many Requests\n")
	require.True(t, ok, "the quick start shows no 429")
	sample, _, ok = strings.Cut(sample, "```\n")
	require.True(t, ok)
	for _, line := range strings.Split(strings.TrimSuffix(sample, "\n"), "\n") {
		name, value, ok := strings.Cut(line, ": ")
		require.True(t, ok, "%q is not a header field", line)
		require.Equal(t, value, r.h.Get(name), "the README's 429: %s", name)
	}
}

// TestDocsConfigurations: every configuration docs/service.md shows (a
// YAML block of rules, or a bare list of them) loads.
func TestDocsConfigurations(t *testing.T) {
	b, err := os.ReadFile("../../../docs/service.md")
	require.NoError(t, err)
	n := 0
	for _, part := range strings.Split(string(b), "```yaml\n")[1:] {
		block, _, ok := strings.Cut(part, "```\n")
		require.True(t, ok)
		_, err := ParseConfig("docs/service.md", "yaml", []byte(block))
		require.NoError(t, err, "docs/service.md:\n%s", block)
		n++
	}
	require.GreaterOrEqual(t, n, 3, "docs/service.md shows its configurations in yaml blocks")
}
