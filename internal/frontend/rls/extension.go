package rls

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// ExtensionConfig configures the rate limit service as rl-wasm-host runs it
// (flags -grpc-listen and -rls-config).
type ExtensionConfig struct {
	// Listen is the gRPC listener's address. A loopback address serves
	// every local caller; any other needs api_tokens in the service's
	// configuration, and then every call a token.
	Listen string
	// ConfigPath is the envoyproxy/ratelimit configuration: a file, or a
	// directory of .yaml files; reloaded on SIGHUP.
	ConfigPath string
	// Options of the Server (Trusted is set from Listen).
	Options Options
	// Companions are further gRPC services served on the same listener
	// (rl-wasm-host's -rlqs-config: the RLQS server). Having no
	// authentication of their own, they are served on a loopback Listen
	// only.
	Companions []Companion
}

// Companion is a gRPC service served beside the rate limit service. One
// that also has a method Collectors() []prometheus.Collector (Monitored)
// has them exported on the host's /metrics.
type Companion interface {
	// Register adds the service to the gRPC server.
	Register(grpc.ServiceRegistrar)
	// Run does the service's background work until ctx ends.
	Run(ctx context.Context) error
}

// Monitored is a Companion with metrics of its own.
type Monitored interface {
	// Collectors returns the metrics, registered once on the host's
	// registry.
	Collectors() []prometheus.Collector
}

// Extension is the rate limit service as rl-wasm-host runs it beside its
// HTTP listeners over the same Service: Start once the Service exists,
// Serve, Reload on SIGHUP after the Service's, Shutdown with it.
type Extension struct {
	cfg  ExtensionConfig
	srv  *Server
	grpc *grpc.Server
	ln   net.Listener
	stop chan struct{} // closed by Shutdown: the companions' Run ends
	once sync.Once
}

// NewExtension returns the rate limit service configured by cfg, to Start.
func NewExtension(cfg ExtensionConfig) *Extension { return &Extension{cfg: cfg} }

// Start loads the configuration, checks the listener's trust and binds it.
func (e *Extension) Start(host Host) (string, string, error) {
	if e.cfg.ConfigPath == "" {
		return "", "", errors.New("-grpc-listen needs -rls-config (the rate limit service's configuration)")
	}
	cfg, err := LoadConfig(e.cfg.ConfigPath)
	if err != nil {
		return "", "", err
	}
	trusted, err := CheckListen(e.cfg.Listen, host.HasAPITokens())
	if err != nil {
		return "", "", err
	}
	// A reload of the service's configuration must keep the listener
	// safe: a gRPC listener others reach keeps needing api_tokens.
	host.AddTokensCheck(func(tokens bool) error {
		_, err := CheckListen(e.cfg.Listen, tokens)
		return err
	})
	if len(e.cfg.Companions) > 0 && !trusted {
		return "", "", fmt.Errorf("-grpc-listen %q is not loopback: the RLQS server (-rlqs-config) has no authentication; serve it on a loopback address", e.cfg.Listen)
	}
	opts := e.cfg.Options
	opts.Trusted = trusted
	if e.srv, err = New(host, cfg, opts); err != nil {
		return "", "", err
	}
	if e.ln, err = net.Listen("tcp", e.cfg.Listen); err != nil {
		return "", "", fmt.Errorf("rls: listen %s: %w", e.cfg.Listen, err)
	}
	e.grpc = NewGRPCServer(e.srv)
	for _, c := range e.cfg.Companions {
		c.Register(e.grpc)
		if m, ok := c.(Monitored); ok {
			if err := host.Register(m.Collectors()...); err != nil {
				e.ln.Close()
				return "", "", fmt.Errorf("grpc companion's metrics: %w", err)
			}
		}
	}
	e.stop = make(chan struct{})
	host.Logger().Info("rate limit service config loaded", "path", e.cfg.ConfigPath, "domains", len(cfg.Domains))
	return "grpc", e.ln.Addr().String(), nil
}

// streamWorkers is the number of goroutines that run calls: enough for a
// store that waits (PostgreSQL) under Envoy's usual concurrency.
const streamWorkers = 64

// NewGRPCServer returns a gRPC server serving s as
// envoy.service.ratelimit.v3.RateLimitService and the standard health
// service (grpc.health.v1, for Envoy's gRPC health checks). Requests are
// small: messages are bounded to 64 KiB. The health service reports
// NOT_SERVING once the Service drains (Service.SetDraining), so Envoy stops
// sending while calls in flight finish.
func NewGRPCServer(s *Server) *grpc.Server {
	g := grpc.NewServer(
		grpc.MaxRecvMsgSize(64<<10),
		grpc.MaxConcurrentStreams(1024),
		// Calls run on long-lived worker goroutines (a call beyond them on
		// a goroutine of its own): a goroutine per call grew its stack on
		// every call, copying it, a fifth of the service's CPU.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	rlsv3.RegisterRateLimitServiceServer(g, s)
	hs := health.NewServer()
	hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	s.host.OnDrain(hs.Shutdown)
	return g
}

// Serve serves until Shutdown; it returns nil after a Shutdown.
func (e *Extension) Serve() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-e.stop
		cancel()
	}()
	for _, c := range e.cfg.Companions {
		go func() {
			if err := c.Run(ctx); err != nil {
				e.srv.log.Error("grpc companion stopped", "err", err)
			}
		}()
	}
	if err := e.grpc.Serve(e.ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("rls: serve grpc: %w", err)
	}
	return nil
}

// Reload reads the configuration again; an invalid one keeps the one in
// force, logged and counted in rl_rls_config_reloads_total.
func (e *Extension) Reload() {
	cfg, err := LoadConfig(e.cfg.ConfigPath)
	if err == nil {
		err = e.srv.SetConfig(cfg)
	}
	if err != nil {
		e.srv.m.reloads.WithLabelValues("failure").Inc()
		e.srv.log.Error("rate limit service config reload failed; keeping the one in force", "path", e.cfg.ConfigPath, "err", err)
		return
	}
	e.srv.m.reloads.WithLabelValues("success").Inc()
	e.srv.log.Info("rate limit service config reloaded", "path", e.cfg.ConfigPath, "domains", len(cfg.Domains))
}

// Shutdown stops gracefully (calls in flight finish), or at once when ctx
// ends first. It closes the listener Start bound even when Serve never ran.
func (e *Extension) Shutdown(ctx context.Context) {
	if e.grpc == nil {
		return
	}
	e.once.Do(func() { close(e.stop) })
	defer e.ln.Close() // grpc closes it too once Serve has it; the second close is harmless
	done := make(chan struct{})
	go func() {
		e.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		e.grpc.Stop()
		<-done
	}
}

// CheckListen reports whether addr is a loopback address (trusted), and
// refuses any other unless the service's configuration has api_tokens:
// Envoy's rate limit protocol has no authentication of its own, so on a
// reachable address a caller must send a token (Envoy: the grpc_service's
// initial_metadata), as on the decision API.
func CheckListen(addr string, tokens bool) (trusted bool, err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("-grpc-listen %q: %w", addr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
		return true, nil
	}
	if !tokens {
		return false, fmt.Errorf("-grpc-listen %q is not a loopback address, so other hosts could spend any descriptor's quota: configure api_tokens (Envoy sends one in its grpc_service initial_metadata), or listen on 127.0.0.1 or [::1]", addr)
	}
	return false, nil
}
