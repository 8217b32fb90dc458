package rls

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlcore/rl/internal/frontend/service"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/store"
)

// t0 is the tests' base instant (µs): the start of a UTC day, so that every
// fixed window up to a day starts there.
const t0 int64 = 1_767_225_600_000_000 // 2026-01-01T00:00:00Z

// env is a Service, a Server over it on 127.0.0.1:0, and a real gRPC client
// on one connection.
type env struct {
	svc    *service.Service
	srv    *Server
	client rlsv3.RateLimitServiceClient
	now    atomic.Int64
}

type envOpts struct {
	store    store.Store
	mainYAML string // the service's configuration; default one API-only rule
	opts     Options
	native   bool
	logger   *slog.Logger // default quietLogger
}

func quietLogger() *slog.Logger {
	if os.Getenv("RLS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newEnv(t testing.TB, rlsYAML string, o envOpts) *env {
	t.Helper()
	e := &env{}
	e.now.Store(t0)
	if o.store == nil {
		m := memstore.New(nil)
		t.Cleanup(func() { m.Close() })
		o.store = m
	}
	if o.mainYAML == "" {
		o.mainYAML = `rules: [{name: api, strategy: fixed, limit: 10, window: 1s}]`
	}
	cfg, err := service.ParseConfig("main.yaml", "yaml", []byte(o.mainYAML))
	require.NoError(t, err)
	if o.logger == nil {
		o.logger = quietLogger()
	}
	e.svc, err = service.New(cfg, service.Options{Store: o.store, Clock: e.now.Load, Logger: o.logger})
	require.NoError(t, err)
	d, err := ParseDomain("rls.yaml", []byte(rlsYAML))
	require.NoError(t, err)
	if o.opts == (Options{}) {
		o.opts.Trusted = true
	}
	e.srv, err = New(e.svc, &Config{Path: "rls.yaml", Domains: map[string]*Domain{d.Name: d}}, o.opts)
	require.NoError(t, err)
	e.client = serve(t, e.srv)
	return e
}

// serve runs s on 127.0.0.1:0 and returns a client of it.
func serve(t testing.TB, s *Server) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := NewGRPCServer(s)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// d builds a descriptor from key, value pairs.
func d(kv ...string) *commonv3.RateLimitDescriptor {
	out := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Entries = append(out.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func (e *env) call(t testing.TB, domain string, descs ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs})
	require.NoError(t, err)
	require.Len(t, resp.Statuses, len(descs))
	return resp
}

// admitted calls n times and counts the OK answers.
func (e *env) admitted(t testing.TB, n int, domain string, descs ...*commonv3.RateLimitDescriptor) int {
	t.Helper()
	ok := 0
	for range n {
		if e.call(t, domain, descs...).OverallCode == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}
