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
	"github.com/rlcore/rl/internal/frontend/rls"
	"github.com/rlcore/rl/internal/frontend/service"
	"github.com/rlcore/rl/internal/util/redact"
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
	// WasmWait compiles the WebAssembly module before serving, as the
	// only decider: a start then takes the compilation's seconds, and a
	// module that cannot start stops the start. By default (false) the
	// native core decides from the start while the module compiles in the
	// background, and the module takes over once compiled (wasm.Handoff);
	// should it fail to start, the native core keeps deciding, the failure
	// logged and in /metrics.
	WasmWait bool
	// WasmCacheDir, if set, is where wazero keeps the compiled module
	// across starts (checkCacheDir says what it must be); later starts
	// then load it instead of compiling, so the module takes over sooner.
	// "" (the default): no cache on disk.
	WasmCacheDir string
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

	// newPool builds the WebAssembly pool; nil means wasm.New. Tests set
	// one that blocks, to observe the native phase of the handoff, or
	// fails.
	newPool func(context.Context, wasm.Config) (*wasm.Pool, error)
}

// Run runs the service until ctx is done, then shuts it down gracefully.
// Each value on reload reloads the configuration file (the command sends
// SIGHUP there). It returns a *service.ConfigError when the file is invalid at
// start, and any other error that prevents serving.
//
// Run goes through the phases of a host in order: the configuration, the
// decider, the store, the Service, the listeners (HTTP, then the
// extensions); then it serves until the end and shuts down. What a phase
// opened is closed, in reverse order, when Run returns.
func Run(ctx context.Context, rc RunConfig, reload <-chan os.Signal) error {
	h := &host{rc: rc, log: cmp.Or(rc.Logger, slog.Default())}
	if err := h.loadConfig(); err != nil {
		return err
	}
	defer h.close()
	if err := h.openDecider(ctx); err != nil {
		return err
	}
	if err := h.openStore(ctx); err != nil {
		return err
	}
	if err := h.newService(); err != nil {
		return err
	}
	if err := h.listen(); err != nil {
		return err
	}
	if err := h.startExtensions(); err != nil {
		return err
	}
	errc := h.serve()
	err := h.wait(ctx, reload, errc)
	h.shutdown()
	return err
}

// host is one Run of the service: each phase of Run fills in what it
// builds, for the phases after it.
type host struct {
	rc  RunConfig
	log *slog.Logger

	// loadConfig
	cfg       *service.Config
	apiListen string // rc.APIListen or its default
	// closers run in reverse order when Run returns (close).
	closers []func()

	// openDecider
	decider core.Decider
	// deciderStats says which core decides, for /metrics and /readyz;
	// poolStats, if set, are the WebAssembly pool's.
	deciderStats func() service.DeciderStats
	poolStats    func() wasm.Stats

	// openStore
	store  store.Store
	ready  func(context.Context) error // nil: ready while serving
	perKey int                         // MaxInFlightPerKey; negative: no bound
	// noShadow is why the store cannot decide shadow limits (nil: it
	// can): pgstore's ModeSQL.
	noShadow error

	// newService
	svcRef serviceRef
	svc    *service.Service

	// listen
	servers []server
}

// server is one HTTP listener of Run and its server.
type server struct {
	role string // "all", "proxy" or "api"
	srv  *http.Server
	ln   net.Listener
}

// serviceRef hands the Service to the stores' hooks, which are made before
// it exists (the failover store reports to the service): events before set
// are dropped.
type serviceRef struct {
	mu sync.Mutex
	s  *service.Service
}

// set makes s the service that hears the events.
func (r *serviceRef) set(s *service.Service) {
	r.mu.Lock()
	r.s = s
	r.mu.Unlock()
}

// failoverEvent reports a switch of the failover store to the service, once
// there is one.
func (r *serviceRef) failoverEvent(to string) {
	r.mu.Lock()
	s := r.s
	r.mu.Unlock()
	if s != nil {
		s.FailoverEvent(to)
	}
}

// loadConfig is Run's first phase: it loads the configuration file and
// refuses a decision API address that needs api_tokens the file does not
// set (checkAPIListen).
func (h *host) loadConfig() error {
	if h.rc.ConfigPath == "" {
		return errors.New("no configuration file (-config)")
	}
	cfg, err := service.LoadConfig(h.rc.ConfigPath)
	if err != nil {
		return err
	}
	h.cfg = cfg
	h.apiListen = cmp.Or(h.rc.APIListen, DefaultAPIListen)
	if err := checkAPIListen(h.apiListen, len(cfg.APITokens) > 0); err != nil {
		return err
	}
	if h.rc.PprofListen != "" && !isLoopback(h.rc.PprofListen) {
		return fmt.Errorf("-pprof-listen %q is not a loopback address: a profile shows the process's memory (keys, tokens): listen on 127.0.0.1 or [::1]", h.rc.PprofListen)
	}
	return nil
}

// close runs the closers in reverse order.
func (h *host) close() {
	for i := len(h.closers) - 1; i >= 0; i-- {
		h.closers[i]()
	}
}

// openDecider is Run's decider phase, as rc.Decider says: the native
// core, or the WebAssembly core hosted by wazero (closed when Run returns).
// The WebAssembly core takes over from the native core once compiled
// (wasm.Handoff), unless rc.WasmWait, which compiles it first.
func (h *host) openDecider(ctx context.Context) error {
	switch h.rc.Decider {
	case "", "wasm":
	case "native":
		h.decider = core.Native{}
		h.deciderStats = func() service.DeciderStats { return service.DeciderStats{Deciding: "native"} }
		h.log.Info("decider: native Go core")
		return nil
	default:
		return fmt.Errorf("-decider %q: want wasm or native", h.rc.Decider)
	}
	if err := checkCacheDir(h.rc.WasmCacheDir); err != nil {
		return err
	}
	cfg := wasm.Config{MaxInstances: h.rc.WasmInstances, CacheDir: h.rc.WasmCacheDir}
	closeWithin := func(close func(context.Context) error) func() {
		return func() {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			close(cctx)
		}
	}
	if h.rc.WasmWait {
		start := time.Now()
		pool, err := h.openPool(ctx, cfg)
		if err != nil {
			return fmt.Errorf("WebAssembly decider: %w", err)
		}
		took := time.Since(start)
		h.closers = append(h.closers, closeWithin(pool.Close))
		h.decider, h.poolStats = pool, pool.Stats
		h.deciderStats = func() service.DeciderStats {
			return service.DeciderStats{Deciding: "wasm", CompileSeconds: took.Seconds()}
		}
		h.log.Info("decider: WebAssembly core hosted by wazero", "abi_version", wasm.ABIVersion, "compile", took.Round(time.Millisecond).String())
		return nil
	}
	hd := wasm.NewHandoff(wasm.HandoffConfig{Pool: cfg, Open: h.openPool, OnDone: h.handedOver})
	h.closers = append(h.closers, closeWithin(hd.Close))
	h.decider, h.poolStats = hd, hd.Stats
	h.deciderStats = func() service.DeciderStats {
		select {
		case <-hd.Ready():
		default:
			return service.DeciderStats{Deciding: "native", Compiling: true}
		}
		return service.DeciderStats{Deciding: hd.Deciding(), CompileSeconds: hd.Took().Seconds(), Failed: hd.Err() != nil}
	}
	h.log.Info("decider: native Go core while the WebAssembly module compiles; the WebAssembly core takes over once it is ready",
		"cache_dir", h.rc.WasmCacheDir)
	return nil
}

// handedOver logs the end of the handoff: the WebAssembly core deciding,
// or why it could not (the native core then keeps deciding).
func (h *host) handedOver(took time.Duration, err error) {
	if err != nil {
		h.log.Error("decider: the WebAssembly module did not start; the native core keeps deciding (its decisions are the same): restart to retry, or run with -decider native",
			"err", err, "after", took.Round(time.Millisecond).String())
		return
	}
	h.log.Info("decider: the WebAssembly core hosted by wazero takes over from the native core", "abi_version", wasm.ABIVersion,
		"compile", took.Round(time.Millisecond).String())
}

// openPool builds the WebAssembly pool. With a cache directory, a failure
// is retried without it: wazero fails a compilation whose cache entry
// cannot be read or written (a corrupt file, a full disk), and the cache
// only saves time.
func (h *host) openPool(ctx context.Context, cfg wasm.Config) (*wasm.Pool, error) {
	newPool := h.rc.newPool
	if newPool == nil {
		newPool = wasm.New
	}
	pool, err := newPool(ctx, cfg)
	if err != nil && cfg.CacheDir != "" {
		h.log.Warn("WebAssembly compilation cache failed; compiling without it (if this repeats at every start, empty the directory)", "cache_dir", cfg.CacheDir, "err", err)
		cfg.CacheDir = ""
		pool, err = newPool(ctx, cfg)
	}
	return pool, err
}

// openStore is Run's store phase: the in-memory store or PostgreSQL (with
// its options: batching, failover to memory), deciding with the decider,
// closed when Run returns. It also settles the per-key in-flight bound,
// which defaults to half the PostgreSQL pool.
func (h *host) openStore(ctx context.Context) error {
	maxKeys := h.rc.MaxKeys
	switch {
	case maxKeys == 0:
		maxKeys = 1_000_000
	case maxKeys < 0:
		maxKeys = 0
	}
	h.perKey = h.rc.MaxInFlightPerKey
	switch h.rc.Store {
	case "", "memory":
		m := memstore.New(&memstore.Config{MaxKeys: maxKeys, MaxBytes: h.rc.MaxBytes, Clock: rl.CoarseClock, Decider: h.decider})
		h.closers = append(h.closers, func() { m.Close() })
		h.store = m
		h.log.Info("store: in memory", "max_keys", maxKeys, "max_bytes", cmp.Or(h.rc.MaxBytes, memstore.DefaultMaxBytes))
	case "postgres":
		mem := &memstore.Config{MaxKeys: maxKeys, MaxBytes: h.rc.MaxBytes, Decider: h.decider}
		pg, err := openPostgres(ctx, h.rc.Postgres, h.decider, mem, h.log, storeHooks{failover: h.svcRef.failoverEvent})
		if err != nil {
			return err
		}
		h.closers = append(h.closers, pg.close)
		h.store, h.ready, h.noShadow = pg.store, pg.ready, pg.noShadow
		if h.perKey == 0 {
			h.perKey = max(1, int(pg.maxConns)/2)
		}
	default:
		return fmt.Errorf("-store %q: want memory or postgres", h.rc.Store)
	}
	return nil
}

// newService is Run's service phase: the Service over the store, which
// the store's hooks then report to, with the WebAssembly pool's metrics
// and a reload check that keeps the decision API's listener safe. It logs
// the configuration, and warns of an upstream timeout the write timeout
// would cut short.
func (h *host) newService() error {
	svc, err := service.New(h.cfg, service.Options{Store: h.store, Logger: h.log, MaxBodyBytes: h.rc.MaxBodyBytes,
		ProxyMaxBodyBytes: h.rc.ProxyMaxBodyBytes, Ready: h.ready, MaxInFlight: h.rc.MaxInFlight, MaxInFlightPerKey: max(h.perKey, 0),
		ShadowUnsupported: h.noShadow})
	if err != nil {
		return err
	}
	h.svc = svc
	h.closers = append(h.closers, svc.Close) // the global rules' RLQS streams
	h.svcRef.set(svc)
	if err := svc.MonitorDecider(h.deciderStats); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if poolStats := h.poolStats; poolStats != nil {
		if err := svc.MonitorPool(func() service.PoolStats {
			st := poolStats()
			return service.PoolStats{Instances: st.Instances, Idle: st.Idle, Started: st.Started, Discarded: st.Discarded}
		}); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	// The API listener was checked against the configuration at start; a
	// reload must not make it unsafe (removing api_tokens from a
	// decision API other hosts reach).
	apiListen := h.apiListen
	svc.AddReloadCheck(func(c *service.Config) error { return checkAPIListen(apiListen, len(c.APITokens) > 0) })
	cfg := h.cfg
	h.log.Info("config loaded", "file", h.rc.ConfigPath, "rules", len(cfg.Rules), "upstream", redact.String(cfg.Upstream), "api_tokens", len(cfg.APITokens))
	if ut, wt := cmp.Or(cfg.UpstreamTimeout, service.DefaultUpstreamTimeout), orDefault(h.rc.WriteTimeout, 60*time.Second); cfg.Upstream != "" && ut >= wt {
		h.log.Warn("upstream_timeout is not below -write-timeout: a slow upstream's answer is cut off as an empty reply before the proxy can answer 504",
			"upstream_timeout", ut, "write_timeout", wt)
	}
	return nil
}

// listen is Run's first listener phase: it binds the HTTP listeners, one
// for everything (-api-listen main) or the proxy's and the decision API's,
// with their servers' timeouts. If one cannot be bound, it closes those it
// bound.
func (h *host) listen() error {
	listen := cmp.Or(h.rc.Listen, ":8080")
	var err error
	if h.apiListen == "main" {
		err = h.addServer("all", listen, h.svc.Handler())
	} else {
		err = h.addServer("proxy", listen, h.svc.ProxyHandler())
		if err == nil {
			err = h.addServer("api", h.apiListen, h.svc.APIHandler())
		}
	}
	if err == nil && h.rc.PprofListen != "" {
		err = h.addServer("pprof", h.rc.PprofListen, pprofHandler())
	}
	if err != nil {
		h.closeListeners()
		return err
	}
	return nil
}

// addServer binds addr and adds a server of h for it, serving handler.
func (h *host) addServer(role, addr string, handler http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: orDefault(h.rc.ReadHeaderTimeout, 5*time.Second),
		ReadTimeout:       orDefault(h.rc.ReadTimeout, 30*time.Second),
		WriteTimeout:      orDefault(h.rc.WriteTimeout, 60*time.Second),
		IdleTimeout:       orDefault(h.rc.IdleTimeout, 120*time.Second),
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
	}
	h.servers = append(h.servers, server{role, srv, ln})
	return nil
}

// closeListeners closes the HTTP listeners, which are not yet served.
func (h *host) closeListeners() {
	for _, s := range h.servers {
		s.ln.Close()
	}
}

// startExtensions is Run's second listener phase: it starts each
// extension over the Service (binding its listener) and reports where it
// listens. If one fails, it releases every listener bound so far, the HTTP
// ones and the started extensions', and returns the error.
func (h *host) startExtensions() error {
	for i, ext := range h.rc.Extensions {
		role, addr, err := ext.Start(h.svc)
		if err != nil {
			h.closeListeners()
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			for _, started := range h.rc.Extensions[:i] { // they bound listeners: release them
				started.Shutdown(sctx)
			}
			cancel()
			return err
		}
		h.log.Info("listening", "role", role, "addr", addr)
		if h.rc.OnListen != nil {
			h.rc.OnListen(role, addr)
		}
	}
	return nil
}

// serve starts serving every extension and HTTP listener, each in a
// goroutine, reporting the HTTP listeners' addresses. A server that stops
// other than by shutdown sends its error on the returned channel, which
// has room for all of them.
func (h *host) serve() <-chan error {
	errc := make(chan error, len(h.servers)+len(h.rc.Extensions))
	for _, ext := range h.rc.Extensions {
		go func() {
			if err := ext.Serve(); err != nil {
				errc <- err
			}
		}()
	}
	for _, s := range h.servers {
		h.log.Info("listening", "role", s.role, "addr", s.ln.Addr().String())
		if h.rc.OnListen != nil {
			h.rc.OnListen(s.role, s.ln.Addr().String())
		}
		go func() {
			if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve %s: %w", s.role, err)
			}
		}()
	}
	return errc
}

// wait serves until ctx is done (returning nil) or a server fails
// (returning its error), reloading the Service's configuration and then
// each extension's on every value of reload.
func (h *host) wait(ctx context.Context, reload <-chan os.Signal, errc <-chan error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-reload:
			h.svc.Reload(h.rc.ConfigPath)
			for _, ext := range h.rc.Extensions {
				ext.Reload()
			}
		}
	}
}

// shutdown is Run's last phase: /readyz answers 503 for the drain delay,
// then the extensions and HTTP servers shut down gracefully, all at once,
// within the shutdown timeout; a server that cannot finish in time has its
// connections closed.
func (h *host) shutdown() {
	h.log.Info("shutting down", "drain_delay", h.rc.DrainDelay)
	h.svc.SetDraining()
	if h.rc.DrainDelay > 0 {
		time.Sleep(h.rc.DrainDelay)
	}
	sctx, cancel := context.WithTimeout(context.Background(), orDefault(h.rc.ShutdownTimeout, 15*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	for _, ext := range h.rc.Extensions {
		wg.Go(func() { ext.Shutdown(sctx) })
	}
	for _, s := range h.servers {
		wg.Go(func() {
			if err := s.srv.Shutdown(sctx); err != nil {
				h.log.Warn("shutdown cut short; closing connections", "role", s.role, "err", err)
				s.srv.Close()
			}
		})
	}
	wg.Wait()
	h.log.Info("stopped")
}

// Extension is a front end Run serves beside the HTTP listeners, over the
// Service it built (RunConfig.Extensions): the Envoy rate limit service,
// *rls.Extension.
type Extension interface {
	// Start loads what the extension needs and binds its listener, once
	// the Service exists, over the Service as its host (its engine, logs,
	// metrics, api_tokens and drain: the *service.Service is an
	// rls.Host). It returns the listener's role and address for the logs
	// and RunConfig.OnListen. An error (a *service.ConfigError for an
	// invalid configuration file) stops Run before anything is served.
	Start(host rls.Host) (role, addr string, err error)
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
	// noShadow is why the store cannot decide shadow limits (nil: it
	// can): pgstore's ModeSQL.
	noShadow error
}
