package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/frontend/service"
)

// TestCheckConfig: -check-config prints a valid configuration in
// canonical form, in the file's own format (YAML for a YAML file, JSON for
// a JSON file, either on request), which is itself a configuration that
// loads the same, and exits 0; quiet prints nothing; an invalid one exits
// 2 listing every mistake by rule and field, quiet or not.
func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	check := func(path, format string, quiet bool) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := checkConfig(path, format, quiet, &out, &errb)
		return code, out.String(), errb.String()
	}
	// The canonical JSON of path, as -check-config-format json prints it.
	canonical := func(path string) string {
		t.Helper()
		code, out, errs := check(path, "json", false)
		require.Equal(t, 0, code, errs)
		return out
	}

	code, js, errs := check("sample.yaml", "json", false)
	require.Equal(t, 0, code, errs)
	var n service.NormalizedJSON
	require.NoError(t, json.Unmarshal([]byte(js), &n))
	require.Equal(t, "demo", n.Upstream)
	require.Equal(t, "auto", n.ProblemDetails)
	require.Equal(t, "search", n.Rules[1].Name)
	require.Equal(t, "token_bucket", n.Rules[1].Limits[0].Strategy)

	code, y, errs := check("sample.yaml", "auto", false)
	require.Equal(t, 0, code, errs)
	require.Contains(t, y, "upstream: demo\n")
	require.Contains(t, y, "\nrules:\n  - name: /v1/pay\n    endpoint: /v1/pay\n")
	require.NotContains(t, y, "{", "block style, not JSON")
	code, y2, _ := check("sample.yaml", "yaml", false)
	require.Equal(t, 0, code)
	require.Equal(t, y, y2)

	// Each form loads to the same rules: its canonical form is the same.
	asYAML := filepath.Join(dir, "normalized.yaml")
	require.NoError(t, os.WriteFile(asYAML, []byte(y), 0o600))
	require.Equal(t, js, canonical(asYAML), "the YAML form loads to the same configuration")
	code, y3, _ := check(asYAML, "auto", false)
	require.Equal(t, 0, code)
	require.Equal(t, y, y3, "the YAML form is a fixed point")
	asJSON := filepath.Join(dir, "normalized.json")
	require.NoError(t, os.WriteFile(asJSON, []byte(js), 0o600))
	code, js2, _ := check(asJSON, "auto", false)
	require.Equal(t, 0, code)
	require.Equal(t, js, js2, "a JSON file's canonical form is JSON, a fixed point")

	// Strings that plain YAML would read as something else stay strings.
	tricky := filepath.Join(dir, "tricky.yaml")
	require.NoError(t, os.WriteFile(tricky, []byte(`rules:
  - {name: "123", strategy: fixed, limit: 1, window: 1s}
  - {name: "true", strategy: fixed, limit: 1, window: 1s}
  - {name: "null", strategy: fixed, limit: 1, window: 1s}
  - {name: "#x", strategy: fixed, limit: 1, window: 1s}
  - {name: "0x1F", endpoint: "/a%20b", key_by: "query:t", strategy: fixed, limit: 1, window: 1s}
  - {name: "1e3", key_by: "header:X-User", limits: [{name: "~", strategy: fixed, limit: 1, window: 1s}]}
`), 0o600))
	code, ty, errs := check(tricky, "auto", false)
	require.Equal(t, 0, code, errs)
	back := filepath.Join(dir, "tricky-normalized.yaml")
	require.NoError(t, os.WriteFile(back, []byte(ty), 0o600))
	require.Equal(t, canonical(tricky), canonical(back), "the YAML form of tricky names loads the same:\n%s", ty)

	code, out, errs := check("sample.yaml", "auto", true)
	require.Equal(t, 0, code, errs)
	require.Empty(t, out, "quiet")
	require.Empty(t, errs)

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("rules:\n  - {name: a, strategy: tokn, limit: 1, window: 1s, ratelimit_fields: some}\n  - {name: b, strategy: fixed, limit: 0, window: 1s}\n"), 0o600))
	for _, quiet := range []bool{false, true} {
		code, out, errs = check(bad, "auto", quiet)
		require.Equal(t, 2, code)
		require.Empty(t, out)
		require.Contains(t, errs, `rules[0] "a": strategy: unknown strategy "tokn"`)
		require.Contains(t, errs, `rules[0] "a": ratelimit_fields: "some"`)
		require.Contains(t, errs, `rules[1] "b": limit 0: outside`)
	}
	code, _, _ = check(filepath.Join(dir, "missing.yaml"), "auto", false)
	require.Equal(t, 2, code)
	code, _, errs = check("sample.yaml", "toml", false)
	require.Equal(t, 2, code)
	require.Contains(t, errs, `-check-config-format "toml": want one of auto, yaml, json`)
}
