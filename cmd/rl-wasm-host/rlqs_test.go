package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/internal/testkit/pgtest"
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
	// /metrics: the server's stream, bucket, reports and assignments.
	metric := func(series string) float64 {
		_, _, m := call(t, "GET", p.api+"/metrics", "")
		for _, line := range strings.Split(m, "\n") {
			if v, ok := strings.CutPrefix(line, series+" "); ok {
				n, err := strconv.ParseFloat(v, 64)
				require.NoError(t, err)
				return n
			}
		}
		return -1
	}
	require.Equal(t, 2.0, metric(`rl_rlqs_server_reports_total{domain="envoy"}`))
	require.Equal(t, 1.0, metric("rl_rlqs_server_streams"))
	await.Until(t, "the assignments counted", func() bool {
		return metric(`rl_rlqs_server_assignments_total{domain="envoy",kind="token_bucket"}`) >= 1 &&
			metric(`rl_rlqs_server_assignments_total{domain="envoy",kind="deny_all"}`) >= 1
	})
	await.Until(t, "the bucket counted", func() bool { return metric("rl_rlqs_server_buckets") == 1 })
	require.NoError(t, s.CloseSend())
	await.Until(t, "the stream closed", func() bool { return metric("rl_rlqs_server_streams") == 0 })
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
		{"store without rlqs", []string{"-rlqs-store", "postgres"}, "-rlqs-store is for -rlqs-config"},
		{"unknown store", []string{"-grpc-listen", "127.0.0.1:0", "-rls-config", rlsPath, "-rlqs-config", rlqsPath, "-rlqs-store", "redis"}, `-rlqs-store "redis": want memory or postgres`},
		{"postgres without URL", []string{"-grpc-listen", "127.0.0.1:0", "-rls-config", rlsPath, "-rlqs-config", rlqsPath, "-rlqs-store", "postgres"}, "no database URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binary(t), append([]string{"-config", "sample.yaml", "-listen", "127.0.0.1:0", "-api-listen", "127.0.0.1:0"}, tc.args...)...)
			cmd.Env = append(os.Environ(), "DATABASE_URL=")
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, 2, ee.ExitCode(), "%s", out)
			require.Contains(t, string(out), tc.want)
		})
	}
}

// -store postgres: the RLQS server keeps its state in the database, so it
// grants at once after its start (no hold) and a restarted process
// continues the division where the first left it.
func TestRLQSPostgres(t *testing.T) {
	dir := t.TempDir()
	rlsPath := filepath.Join(dir, "ratelimit.yaml")
	writeFile(t, rlsPath, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	rlqsPath := filepath.Join(dir, "rlqs.yaml")
	// A long TTL: a memory store would hold every grant back for 61 s.
	writeFile(t, rlqsPath, "client_id_metadata: x-rlqs-client\nttl: 60s\nrules:\n  - domain: envoy\n    match: {name: api}\n    algorithm: token_bucket\n    limit: 100\n    window: 1s\n    rate: 100\n")
	db := pgtest.NewDatabase(t)
	run := func(migrate bool) (*proc, rlqsv3.RateLimitQuotaServiceClient) {
		args := []string{"-config", "sample.yaml", "-grpc-listen", "127.0.0.1:0", "-rls-config", rlsPath, "-rlqs-config", rlqsPath,
			"-store", "postgres", "-database-url", db}
		if migrate {
			args = append(args, "-migrate")
		}
		p := start(t, args...)
		var rec struct{ Addr string }
		require.NoError(t, json.Unmarshal([]byte(p.waitLog(t, `"role":"grpc"`)), &rec))
		conn, err := grpc.NewClient(rec.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		return p, rlqsv3.NewRateLimitQuotaServiceClient(conn)
	}
	// grant reports bucket api, then bucket other (no rule: DENY_ALL at
	// once), and returns the first answer: api's, or other's when api got
	// none.
	grant := func(c rlqsv3.RateLimitQuotaServiceClient, envoy string) (string, *typev3.TokenBucket) {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-rlqs-client", envoy), time.Minute)
		defer cancel()
		s, err := c.StreamRateLimitQuotas(ctx)
		require.NoError(t, err)
		for _, b := range []string{"api", "other"} {
			require.NoError(t, s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "envoy",
				BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
					BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"name": b}}, TimeElapsed: &durationpb.Duration{}, NumRequestsDenied: 1}}}))
		}
		r, err := s.Recv()
		require.NoError(t, err)
		require.Len(t, r.BucketAction, 1)
		require.NoError(t, s.CloseSend())
		a := r.BucketAction[0]
		return a.GetBucketId().GetBucket()["name"], a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	}

	p, c := run(true)
	name, tb := grant(c, "e1")
	require.Equal(t, "api", name, "granted at once: no hold with the state in PostgreSQL")
	require.Equal(t, uint32(6000), tb.TokensPerFill.GetValue())
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait(t))

	pool := pgtest.Pool(t, db)
	var clients int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM rl.quota_client WHERE client = 'id:e1'").Scan(&clients))
	require.Equal(t, 1, clients, "e1's row outlives the process")

	// The next process: e1 continues its grant; e2 gets nothing while
	// e1's may be in force (its cut not yet acknowledged).
	_, c = run(false)
	name, tb = grant(c, "e1")
	require.Equal(t, "api", name)
	require.Equal(t, uint32(6000), tb.TokensPerFill.GetValue(), "the first process's grant, extended")
	name, tb = grant(c, "e2")
	require.Equal(t, "other", name, "e2 was granted while e1's grant is committed")
	require.Nil(t, tb)
}
