package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/frontend/service"
)

// TestExplainFlag: -explain prints how the proxy would answer a request
// (the rule tried and chosen, the key and cost as derived), deciding
// nothing.
func TestExplainFlag(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, explainRequest("sample.yaml", "GET https://api.example.com/v1/export?x=1", []string{"X-Cost: 5", "X-User: u"}, "192.0.2.4", &out, &errb), errb.String())
	var ex service.ExplainJSON
	require.NoError(t, json.Unmarshal(out.Bytes(), &ex))
	require.Equal(t, "export", ex.Rule.Name)
	require.Equal(t, "x=1", ex.Request.Query)
	require.Equal(t, &service.ExplainKeyJSON{Source: "ip", Key: "192.0.2.4", Stored: "export:192.0.2.4"}, ex.Key)
	require.Equal(t, &service.ExplainCostJSON{Cost: 5, Source: "the X-Cost header"}, ex.Cost)
	require.Equal(t, "sliding_log", ex.Limits[0].Strategy)
	require.Nil(t, ex.Limits[0].Result)
	require.Contains(t, ex.Decision, "not decided")

	out.Reset()
	require.Equal(t, 0, explainRequest("sample.yaml", "https://api.example.com/hooks/x?tenant=t1", nil, "", &out, &errb))
	require.NoError(t, json.Unmarshal(out.Bytes(), &ex))
	require.Equal(t, "webhooks", ex.Rule.Name)
	require.Equal(t, "t1", ex.Key.Key, "key_by: query:tenant")

	for _, bad := range []string{"GET /relative", "GET ftp://x/y", "G(T https://x/", "GET"} {
		errb.Reset()
		require.Equal(t, 2, explainRequest("sample.yaml", bad, nil, "", &out, &errb), bad)
		require.Contains(t, errb.String(), "-explain:")
	}
	require.Equal(t, 2, explainRequest("sample.yaml", "GET https://x/", []string{"no colon"}, "", &out, &errb))
}

// The flags end to end: exit statuses, and -explain needing -config.
func TestExplainAndCheckFlagsExit(t *testing.T) {
	status := func(args ...string) (int, string) {
		out, err := exec.Command(binary(t), args...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		require.NoError(t, err)
		return 0, string(out)
	}
	code, out := status("-check-config", "sample.yaml")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "\nrules:\n  - name: /v1/pay\n", "a YAML file's canonical form is YAML")
	code, out = status("-check-config", "sample.yaml", "-check-config-format", "json")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, `"rules": [`)
	code, out = status("-check-config", "sample.yaml", "-q")
	require.Equal(t, 0, code, out)
	require.Empty(t, out, "-q: the exit status alone")
	code, out = status("-q")
	require.Equal(t, 2, code)
	require.Contains(t, out, "-q is for -check-config")
	code, out = status("-config", "sample.yaml", "-explain", "GET https://api.example.com/v1/search", "-H", "X-User: u")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, `"name": "search"`)
	code, out = status("-explain", "GET https://api.example.com/v1/search")
	require.Equal(t, 2, code)
	require.Contains(t, out, "-explain needs -config")
	code, _ = status("-config", "sample.yaml", "-H", "X-User: u")
	require.Equal(t, 2, code, "-H without -explain")
}
