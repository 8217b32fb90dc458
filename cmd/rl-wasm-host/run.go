package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/redact"
	"github.com/rlcore/rl/internal/service"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/store"
	"github.com/rlcore/rl/wasm"
)

// RunConfig is the process configuration: what the flags set. Zero fields
// take the documented defaults.
type RunConfig struct {
	// ConfigPath is the rules file (YAML or JSON); required.
	ConfigPath string
	// Listen is the address of the main listener. Default ":8080".
	Listen string
	// APIListen is the listener of the decision API, /healthz, /readyz and
	// /metrics; Listen then serves the proxy alone (every path is proxied,
	// none is shadowed). Default DefaultAPIListen, a loopback address.
	// An address that is not loopback needs api_tokens in the
	// configuration. "main" serves the API on Listen beside the proxy,
	// which proxy clients reach, so it needs api_tokens too; without them
	// Run refuses to start.
	APIListen string
	// MaxInFlight and MaxInFlightPerKey: see service.Options. MaxInFlightPerKey
	// defaults to half the PostgreSQL pool with Store "postgres"
	// (negative: no bound) and to no bound in memory.
	MaxInFlight, MaxInFlightPerKey int
	// Decider is "wasm" (default: the embedded WebAssembly core hosted by
	// wazero) or "native" (the same core compiled into the binary).
	Decider string
	// WasmInstances bounds the WebAssembly instances; 0: 2 × GOMAXPROCS.
	WasmInstances int
	// Store is "memory" (default) or "postgres".
	Store string
	// MaxKeys caps the in-memory store's keys (also the failover store's);
	// 0 means 1,000,000, negative means no cap.
	MaxKeys int
	// MaxBytes is the in-memory store's byte budget (also the failover
	// store's); 0 means memstore.DefaultMaxBytes. A key that does not fit
	// is a store failure, answered by the rule's fail policy; keys already
	// held are never locked out.
	MaxBytes int64
	// Postgres configures Store "postgres".
	Postgres PostgresConfig
	// Timeouts of the HTTP servers. Defaults: 5s, 30s, 60s, 120s.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown. Default 15s.
	ShutdownTimeout time.Duration
	// DrainDelay is how long /readyz answers 503 before the listeners
	// close on shutdown, for load balancers to notice. Default 0.
	DrainDelay time.Duration
	// MaxBodyBytes and ProxyMaxBodyBytes: see service.Options.
	MaxBodyBytes, ProxyMaxBodyBytes int64
	// Logger; default slog.Default().
	Logger *slog.Logger
	// OnListen, if set, hears each listener's role ("all", "proxy", "api")
	// and bound address, once it is listening.
	OnListen func(role, addr string)
	// PprofListen, if set, serves the Go profiler (net/http/pprof, under
	// /debug/pprof/) on a listener of its own: a loopback address only, as
	// a profile shows the process's memory, keys included. Off by default.
	PprofListen string
	// Extensions are front ends served beside the HTTP listeners over the
	// same Service (the command's Envoy rate limit service): started once
	// the Service exists, reloaded after it, shut down with it.
	Extensions []Extension
}

// Run runs the service until ctx is done, then shuts it down gracefully.
// Each value on reload reloads the configuration file (the command sends
// SIGHUP there). It returns a *service.ConfigError when the file is invalid at
// start, and any other error that prevents serving.
func Run(ctx context.Context, rc RunConfig, reload <-chan os.Signal) error {
	log := rc.Logger
	if log == nil {
		log = slog.Default()
	}
	if rc.ConfigPath == "" {
		return errors.New("no configuration file (-config)")
	}
	cfg, err := service.LoadConfig(rc.ConfigPath)
	if err != nil {
		return err
	}
	apiListen := rc.APIListen
	if apiListen == "" {
		apiListen = DefaultAPIListen
	}
	if err := checkAPIListen(apiListen, len(cfg.APITokens) > 0); err != nil {
		return err
	}
	if rc.PprofListen != "" && !isLoopback(rc.PprofListen) {
		return fmt.Errorf("-pprof-listen %q is not a loopback address: a profile shows the process's memory (keys, tokens): listen on 127.0.0.1 or [::1]", rc.PprofListen)
	}
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()

	var decider core.Decider
	switch rc.Decider {
	case "", "wasm":
		pool, err := wasm.New(ctx, wasm.Config{MaxInstances: rc.WasmInstances})
		if err != nil {
			return fmt.Errorf("WebAssembly decider: %w", err)
		}
		closers = append(closers, func() {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			pool.Close(cctx)
		})
		decider = pool
		log.Info("decider: WebAssembly core hosted by wazero", "abi_version", wasm.ABIVersion)
	case "native":
		decider = core.Native{}
		log.Info("decider: native Go core")
	default:
		return fmt.Errorf("-decider %q: want wasm or native", rc.Decider)
	}

	// The failover store reports to the service, which exists only later.
	var svcRef struct {
		sync.Mutex
		s *service.Service
	}
	hooks := storeHooks{failover: func(to string) {
		svcRef.Lock()
		s := svcRef.s
		svcRef.Unlock()
		if s != nil {
			s.FailoverEvent(to)
		}
	}}
	maxKeys := rc.MaxKeys
	switch {
	case maxKeys == 0:
		maxKeys = 1_000_000
	case maxKeys < 0:
		maxKeys = 0
	}
	var st store.Store
	var ready func(context.Context) error
	perKey := rc.MaxInFlightPerKey
	switch rc.Store {
	case "", "memory":
		m := memstore.New(&memstore.Config{MaxKeys: maxKeys, MaxBytes: rc.MaxBytes, Clock: rl.CoarseClock, Decider: decider})
		closers = append(closers, func() { m.Close() })
		st = m
		log.Info("store: in memory", "max_keys", maxKeys, "max_bytes", cmp.Or(rc.MaxBytes, memstore.DefaultMaxBytes))
	case "postgres":
		h, err := openPostgres(ctx, rc.Postgres, decider, &memstore.Config{MaxKeys: maxKeys, MaxBytes: rc.MaxBytes, Decider: decider}, log, hooks)
		if err != nil {
			return err
		}
		closers = append(closers, h.close)
		st, ready = h.store, h.ready
		if perKey == 0 {
			perKey = max(1, int(h.maxConns)/2)
		}
	default:
		return fmt.Errorf("-store %q: want memory or postgres", rc.Store)
	}

	svc, err := service.New(cfg, service.Options{Store: st, Logger: log, MaxBodyBytes: rc.MaxBodyBytes,
		ProxyMaxBodyBytes: rc.ProxyMaxBodyBytes, Ready: ready, MaxInFlight: rc.MaxInFlight, MaxInFlightPerKey: max(perKey, 0)})
	if err != nil {
		return err
	}
	svcRef.Lock()
	svcRef.s = svc
	svcRef.Unlock()
	if pool, ok := decider.(*wasm.Pool); ok {
		if err := svc.MonitorPool(func() service.PoolStats {
			st := pool.Stats()
			return service.PoolStats{Instances: st.Instances, Idle: st.Idle, Started: st.Started, Discarded: st.Discarded}
		}); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	// The API listener was checked against the configuration at start; a
	// reload must not make it unsafe (removing api_tokens from a
	// decision API other hosts reach).
	svc.AddReloadCheck(func(c *service.Config) error { return checkAPIListen(apiListen, len(c.APITokens) > 0) })
	log.Info("config loaded", "file", rc.ConfigPath, "rules", len(cfg.Rules), "upstream", redact.String(cfg.Upstream), "api_tokens", len(cfg.APITokens))
	if ut, wt := cmp.Or(cfg.UpstreamTimeout, service.DefaultUpstreamTimeout), orDefault(rc.WriteTimeout, 60*time.Second); cfg.Upstream != "" && ut >= wt {
		log.Warn("upstream_timeout is not below -write-timeout: a slow upstream's answer is cut off as an empty reply before the proxy can answer 504",
			"upstream_timeout", ut, "write_timeout", wt)
	}

	listen := rc.Listen
	if listen == "" {
		listen = ":8080"
	}
	type server struct {
		role string
		srv  *http.Server
		ln   net.Listener
	}
	var servers []server
	add := func(role, addr string, h http.Handler) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
		srv := &http.Server{
			Handler:           h,
			ReadHeaderTimeout: orDefault(rc.ReadHeaderTimeout, 5*time.Second),
			ReadTimeout:       orDefault(rc.ReadTimeout, 30*time.Second),
			WriteTimeout:      orDefault(rc.WriteTimeout, 60*time.Second),
			IdleTimeout:       orDefault(rc.IdleTimeout, 120*time.Second),
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}
		servers = append(servers, server{role, srv, ln})
		return nil
	}
	if apiListen == "main" {
		err = add("all", listen, svc.Handler())
	} else {
		err = add("proxy", listen, svc.ProxyHandler())
		if err == nil {
			err = add("api", apiListen, svc.APIHandler())
		}
	}
	if err == nil && rc.PprofListen != "" {
		err = add("pprof", rc.PprofListen, pprofHandler())
	}
	if err != nil {
		for _, s := range servers {
			s.ln.Close()
		}
		return err
	}
	for i, ext := range rc.Extensions {
		role, addr, err := ext.Start(svc)
		if err != nil {
			for _, s := range servers {
				s.ln.Close()
			}
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			for _, started := range rc.Extensions[:i] { // they bound listeners: release them
				started.Shutdown(sctx)
			}
			cancel()
			return err
		}
		log.Info("listening", "role", role, "addr", addr)
		if rc.OnListen != nil {
			rc.OnListen(role, addr)
		}
	}
	errc := make(chan error, len(servers)+len(rc.Extensions))
	for _, ext := range rc.Extensions {
		go func() {
			if err := ext.Serve(); err != nil {
				errc <- err
			}
		}()
	}
	for _, s := range servers {
		log.Info("listening", "role", s.role, "addr", s.ln.Addr().String())
		if rc.OnListen != nil {
			rc.OnListen(s.role, s.ln.Addr().String())
		}
		go func() {
			if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve %s: %w", s.role, err)
			}
		}()
	}

	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-errc:
			runErr = err
			break loop
		case <-reload:
			svc.Reload(rc.ConfigPath)
			for _, ext := range rc.Extensions {
				ext.Reload()
			}
		}
	}

	log.Info("shutting down", "drain_delay", rc.DrainDelay)
	svc.SetDraining()
	if rc.DrainDelay > 0 {
		time.Sleep(rc.DrainDelay)
	}
	sctx, cancel := context.WithTimeout(context.Background(), orDefault(rc.ShutdownTimeout, 15*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	for _, ext := range rc.Extensions {
		wg.Go(func() { ext.Shutdown(sctx) })
	}
	for _, s := range servers {
		wg.Go(func() {
			if err := s.srv.Shutdown(sctx); err != nil {
				log.Warn("shutdown cut short; closing connections", "role", s.role, "err", err)
				s.srv.Close()
			}
		})
	}
	wg.Wait()
	log.Info("stopped")
	return runErr
}

// Extension is a front end Run serves beside the HTTP listeners, over the
// Service it built (RunConfig.Extensions): the Envoy rate limit service,
// *rls.Extension.
type Extension interface {
	// Start loads what the extension needs and binds its listener, once
	// the Service exists. It returns the listener's role and address for
	// the logs and RunConfig.OnListen. An error (a *service.ConfigError
	// for an invalid configuration file) stops Run before anything is
	// served.
	Start(svc *service.Service) (role, addr string, err error)
	// Serve serves until Shutdown; it returns nil after a Shutdown.
	Serve() error
	// Reload reloads the extension's configuration (SIGHUP), after the
	// Service's. An invalid file keeps the configuration in force; the
	// extension logs and counts it.
	Reload()
	// Shutdown stops serving gracefully within ctx.
	Shutdown(ctx context.Context)
}

// DefaultAPIListen is the default address of the decision API's listener:
// loopback, so only the host's own processes reach it.
const DefaultAPIListen = "127.0.0.1:8081"

// checkAPIListen refuses an API that untrusted clients could reach without
// a token: on the main listener, or on an address that is not loopback.
func checkAPIListen(addr string, tokens bool) error {
	if tokens {
		return nil
	}
	if addr == "main" {
		return errors.New("-api-listen main serves the decision API (reset, inline limits, everyone's usage) to every proxy client: configure api_tokens first")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("-api-listen %q: %w", addr, err)
	}
	if isLoopback(addr) {
		return nil
	}
	return fmt.Errorf("-api-listen %q is not a loopback address, so other hosts could reset keys and read usage: configure api_tokens, or listen on 127.0.0.1 or [::1]", addr)
}

// isLoopback reports whether addr (host:port) is a loopback address or
// localhost.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// pprofHandler serves net/http/pprof's handlers under /debug/pprof/
// (-pprof-listen).
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// storeHooks connect the stores to the service's metrics.
type storeHooks struct {
	failover func(to string)
}

type storeHandle struct {
	maxConns int32
	store    store.Store
	ready    func(context.Context) error
	close    func()
}
