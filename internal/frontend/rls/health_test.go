package rls

import (
	"context"
	"net"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestHealthFollowsDraining: the gRPC health service answers SERVING until
// the Service drains, then NOT_SERVING (for the whole server and for the
// rate limit service), while calls still arriving are decided.
func TestHealthFollowsDraining(t *testing.T) {
	e := newEnv(t, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 5}}]", envOpts{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := NewGRPCServer(e.srv)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	hc := healthpb.NewHealthClient(conn)
	status := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		require.NoError(t, err)
		return r.Status
	}
	name := rlsv3.RateLimitService_ServiceDesc.ServiceName
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, status(""))
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, status(name))

	e.svc.SetDraining()
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, status(""))
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, status(name))
	require.Equal(t, rlsv3.RateLimitResponse_OK, e.call(t, "d", d("k", "v")).OverallCode, "calls still arriving are decided")
}
