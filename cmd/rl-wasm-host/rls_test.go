package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlcore/rl/internal/frontend/rls"
)

// -grpc-listen and -rls-config: the Envoy rate limit service served by the
// binary, reloaded on SIGHUP; its mistakes stop the start with exit 2.
func TestRateLimitService(t *testing.T) {
	dir := t.TempDir()
	rlsPath := filepath.Join(dir, "ratelimit.yaml")
	writeFile(t, rlsPath, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	p := start(t, "-config", "sample.yaml", "-grpc-listen", "127.0.0.1:0", "-rls-config", rlsPath)
	var rec struct{ Addr string }
	require.NoError(t, json.Unmarshal([]byte(p.waitLog(t, `"role":"grpc"`)), &rec))
	conn, err := grpc.NewClient(rec.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	ask := func() *rlsv3.RateLimitResponse {
		r, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}})
		require.NoError(t, err)
		return r
	}
	require.Equal(t, rlsv3.RateLimitResponse_OK, ask().OverallCode)
	require.Equal(t, rlsv3.RateLimitResponse_OK, ask().OverallCode)
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, ask().OverallCode)

	writeFile(t, rlsPath, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	p.waitLog(t, "rate limit service config reloaded")
	r := ask()
	require.Equal(t, rlsv3.RateLimitResponse_OK, r.OverallCode, "the count was kept, the limit raised")
	require.Equal(t, uint32(3), r.Statuses[0].CurrentLimit.RequestsPerUnit)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait(t))

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"invalid", []string{"-grpc-listen", "127.0.0.1:0", "-rls-config", filepath.Join(dir, "bad.yaml")},
			`bad.yaml: domain "d": descriptors[0].rate_limit.unit: unknown unit "fortnight"`},
		{"no config", []string{"-grpc-listen", "127.0.0.1:0"}, "-grpc-listen needs -rls-config"},
		{"no listener", []string{"-rls-config", rlsPath}, "-rls-config needs -grpc-listen"},
		{"metadata without listener", []string{"-rls-response-metadata"}, "-rls-response-metadata needs -grpc-listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, filepath.Join(dir, "bad.yaml"), "domain: d\ndescriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n")
			cmd := exec.Command(binary(t), append([]string{"-config", "sample.yaml", "-listen", "127.0.0.1:0", "-api-listen", "127.0.0.1:0"}, tc.args...)...)
			done := make(chan struct{})
			time.AfterFunc(30*time.Second, func() {
				select {
				case <-done:
				default:
					cmd.Process.Kill()
				}
			})
			out, err := cmd.CombinedOutput()
			close(done)
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, 2, ee.ExitCode(), "%s", out)
			require.Contains(t, string(out), tc.want)
		})
	}
	out, err := exec.Command(binary(t), "-config", "sample.yaml", "-listen", "127.0.0.1:0", "-api-listen", "127.0.0.1:0",
		"-grpc-listen", "0.0.0.0:0", "-rls-config", rlsPath).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "is not a loopback address")
}

// -rls-check-config says whether envoyproxy/ratelimit loads a file too:
// 0 portable, 1 valid with rl's extensions (listed), 2 invalid.
func TestRLSCheckConfig(t *testing.T) {
	dir := t.TempDir()
	ext := filepath.Join(dir, "ext")
	require.NoError(t, os.Mkdir(ext, 0o755))
	writeFile(t, filepath.Join(ext, "a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra, fail_open: true}\n")
	writeFile(t, filepath.Join(ext, "b.yaml"), "domain: b\ndescriptors:\n  - key: k\n    descriptors: [{key: j, rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 1}}]\n")
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n")
	erl := filepath.Join("..", "..", "internal", "frontend", "rls", "testdata", "envoyproxy-ratelimit", "example.yaml")
	for _, tc := range []struct {
		name, path string
		code       int
		out        []string
	}{
		{"portable", erl, 0, []string{"example.yaml: valid (1 domain); portable: uses no rl extension"}},
		{"extensions", ext, 1, []string{
			"ext: valid (2 domains); not portable: envoyproxy/ratelimit refuses rl's extensions (algorithm, fail_open, shadow_limits, unit_multiplier), used 3 time(s):",
			`  ` + filepath.Join(ext, "a.yaml") + `: domain "a": descriptors[0].rate_limit.algorithm`,
			`  ` + filepath.Join(ext, "a.yaml") + `: domain "a": descriptors[0].rate_limit.fail_open`,
			`  ` + filepath.Join(ext, "b.yaml") + `: domain "b": descriptors[0].descriptors[0].rate_limit.unit_multiplier`,
		}},
		{"invalid", bad, 2, []string{`bad.yaml: domain "d": descriptors[0].rate_limit.unit: unknown unit "fortnight"`}},
		{"missing", filepath.Join(dir, "nope.yaml"), 2, []string{"no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			require.Equal(t, tc.code, checkRLSConfig(tc.path, &out, &out))
			for _, want := range tc.out {
				require.Contains(t, out.String(), want)
			}
		})
	}
	// The flag runs it, with its exit status, and needs nothing else.
	out, err := exec.Command(binary(t), "-rls-check-config", ext).CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 1, ee.ExitCode(), "%s", out)
	require.Contains(t, string(out), "rate_limit.unit_multiplier")
	out, err = exec.Command(binary(t), "-rls-check-config", erl).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// docs/envoy.md names exactly rl's extensions of envoyproxy/ratelimit's
// format, in its sentence and in its table of fields, so that a file
// without them moves both ways.
func TestReadmeListsRLSExtensions(t *testing.T) {
	readme, err := os.ReadFile("../../docs/envoy.md")
	require.NoError(t, err)
	sentence := regexp.MustCompile("rl's extensions are exactly \\w+ fields of `rate_limit`: ([^.]*)\\.").FindSubmatch(readme)
	require.NotNil(t, sentence)
	var named, rows []string
	for _, m := range regexp.MustCompile("`(\\w+)`").FindAllSubmatch(sentence[1], -1) {
		named = append(named, string(m[1]))
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `rate_limit\\.(\\w+)` \\| extension: ").FindAllSubmatch(readme, -1) {
		rows = append(rows, string(m[1]))
	}
	sort.Strings(named)
	sort.Strings(rows)
	require.Equal(t, rls.ExtensionFields(), named)
	require.Equal(t, rls.ExtensionFields(), rows)
}
