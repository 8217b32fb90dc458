package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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
