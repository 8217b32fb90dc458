package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

// -rlqs-config: the RLQS server on -grpc-listen's gRPC server, beside the
// rate limit service, over a real stream sending what Envoy sends.
func TestRLQS(t *testing.T) {
	dir := t.TempDir()
	rlsPath := filepath.Join(dir, "ratelimit.yaml")
	writeFile(t, rlsPath, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	rlqsPath := filepath.Join(dir, "rlqs.yaml")
	// A short TTL so that the start's hold (TTL + guard) is 3 s.
	writeFile(t, rlqsPath, "report_interval: 1s\nttl: 2s\nrules:\n  - domain: envoy\n    match: {name: api}\n    algorithm: token_bucket\n    limit: 100\n    window: 1s\n    rate: 100\n")
	p := start(t, "-config", "sample.yaml", "-grpc-listen", "127.0.0.1:0", "-rls-config", rlsPath, "-rlqs-config", rlqsPath)
	var rec struct{ Addr string }
	require.NoError(t, json.Unmarshal([]byte(p.waitLog(t, `"role":"grpc"`)), &rec))
	conn, err := grpc.NewClient(rec.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	require.NoError(t, err)
	send := func(bucket string) {
		require.NoError(t, s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "envoy",
			BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
				BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"name": bucket}}, TimeElapsed: &durationpb.Duration{}, NumRequestsDenied: 1}}}))
	}
	send("api")
	send("other")
	// Unmatched: denied at once. The matched bucket is answered once the
	// start's hold (TTL + guard, from the flags' parsing) has passed: at
	// once, or at a later tick of the server's one-second clock.
	got := map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction{}
	for len(got) < 2 {
		r, err := s.Recv()
		require.NoError(t, err)
		for _, a := range r.BucketAction {
			got[a.GetBucketId().GetBucket()["name"]] = a
		}
	}
	require.Nil(t, got["other"].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket(), "DENY_ALL")
	qa := got["api"].GetQuotaAssignmentAction()
	tb := qa.GetRateLimitStrategy().GetTokenBucket()
	require.NotNil(t, tb, "%v", got["api"])
	require.Equal(t, uint32(6000), tb.TokensPerFill.GetValue())
	require.Equal(t, uint32(75), tb.MaxTokens)
	require.Equal(t, 60*time.Second, tb.FillInterval.AsDuration())
	require.Equal(t, 2*time.Second, qa.GetAssignmentTimeToLive().AsDuration())
	require.NoError(t, s.CloseSend())
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait(t))

	writeFile(t, filepath.Join(dir, "bad.yaml"), "rules: [{algorithm: gcra, limit: 1, window: soon}]\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no listener", []string{"-rlqs-config", rlqsPath}, "-rlqs-config needs -grpc-listen"},
		{"invalid", []string{"-grpc-listen", "127.0.0.1:0", "-rls-config", rlsPath, "-rlqs-config", filepath.Join(dir, "bad.yaml")}, `rules[0].window "soon"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command(binary(t), append([]string{"-config", "sample.yaml", "-listen", "127.0.0.1:0", "-api-listen", "127.0.0.1:0"}, tc.args...)...).CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, 2, ee.ExitCode(), "%s", out)
			require.Contains(t, string(out), tc.want)
		})
	}
}
