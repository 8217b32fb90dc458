package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocsSample429: the 429 docs/envoy.md shows is the filter's, field
// for field and byte for byte, for the rule it names (the example's
// /v1/pay rule, drained). Field names as a client of Envoy sees them:
// Envoy keeps them in lower case.
func TestDocsSample429(t *testing.T) {
	b, err := os.ReadFile("../docs/envoy.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(b), "```\nHTTP/1.1 429 Too Many Requests\n")
	require.True(t, ok, "docs/envoy.md shows no 429")
	sample, _, ok := strings.Cut(after, "```\n")
	require.True(t, ok)
	head, body, ok := strings.Cut(sample, "\n\n")
	require.True(t, ok, "the sample has no body")

	host := emulate(t, `{"rules": [{"endpoint": "/v1/pay", "strategy": "token_bucket", "key_by": "api_key", "limit": 100, "window": "10s"}]}`)
	key := [2]string{"authorization", "Bearer k-123"}
	for i := range 100 {
		_, local, _ := roundTrip(host, get("/v1/pay", key))
		require.Nil(t, local, "request %d", i+1)
	}
	_, local, _ := roundTrip(host, get("/v1/pay", key))
	require.NotNil(t, local)
	require.Equal(t, uint32(429), local.StatusCode)
	var got []string
	for _, h := range local.Headers {
		got = append(got, fmt.Sprintf("%s: %s", strings.ToLower(h[0]), h[1]))
	}
	require.Equal(t, strings.Split(head, "\n"), got, "docs/envoy.md's sample 429: its header fields")
	require.Equal(t, body, string(local.Data), "docs/envoy.md's sample 429: its body")
}
