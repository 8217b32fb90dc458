// Command rl-wasm-host is the rate-limiting HTTP service: a JSON decision
// API (check, peek, reset, batch) and a reverse proxy filter in front of an
// upstream, deciding with the WebAssembly build of the core hosted by wazero
// (or the native core), over an in-memory or PostgreSQL store. See README.md.
//
//	go run ./cmd/rl-wasm-host -config cmd/rl-wasm-host/sample.yaml
//
// -version prints the build (the module version, the commit, and the
// schema, extension and WebAssembly ABI versions; package
// internal/request/version documents each line). -health URL is a health check for
// images without a shell: it asks URL (such as
// http://127.0.0.1:8081/readyz) and exits 0 on 200, 1 otherwise.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rlcore/rl/internal/frontend/rls"
	"github.com/rlcore/rl/internal/frontend/service"
	"github.com/rlcore/rl/internal/request/decisionlog"
	"github.com/rlcore/rl/internal/request/version"
	"github.com/rlcore/rl/internal/util/flagdoc"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// flagsIntro opens the flags reference page (flagdoc.Arg).
const flagsIntro = "Every flag of rl-wasm-host, from the command's own definitions. What the service does with them: " +
	"[service.md](../service.md); reload, logs and start-up: [operations.md](../operations.md)."

func run(args []string) int {
	fs := flag.NewFlagSet("rl-wasm-host", flag.ContinueOnError)
	var rc RunConfig
	var (
		showVersion bool
		logFormat   string
		logLevel    string
	)
	fs.StringVar(&rc.ConfigPath, "config", "", "rules file, YAML (.yaml, .yml) or JSON (.json); reloaded on SIGHUP (required)")
	watch := fs.Duration("watch-config", 0, "also reload -config and -rls-config when their content changes, read this often (e.g. 2s; a Kubernetes ConfigMap's update is seen); 0: on SIGHUP only")
	fs.StringVar(&rc.Listen, "listen", ":8080", "address of the proxy listener (every path proxied)")
	fs.StringVar(&rc.APIListen, "api-listen", DefaultAPIListen, "address of the decision API, /healthz, /readyz and /metrics; not loopback, or \"main\" (on -listen), only with api_tokens in the config")
	fs.IntVar(&rc.MaxInFlight, "max-in-flight", service.DefaultMaxInFlight, "requests served at once; beyond: 503 with Retry-After (-1: no bound)")
	fs.IntVar(&rc.MaxInFlightPerKey, "max-in-flight-per-key", 0, "decisions on one key waiting for the store at once; beyond: 503 (0: half the PostgreSQL pool, none in memory; -1: no bound)")
	grpcListen := fs.String("grpc-listen", "", "address of the Envoy rate limit service (gRPC, envoy.service.ratelimit.v3; off by default); not loopback only with api_tokens in the config")
	rlqsConfig := fs.String("rlqs-config", "", "serve Envoy's rate limit quota service (RLQS, envoy.service.rate_limit_quota.v3) on -grpc-listen (loopback only), dividing each bucket's global limit among the Envoys that report for it: the rules file (docs/rlqs.md); not reloaded")
	rlqsStore := fs.String("rlqs-store", "", "where the RLQS server keeps its state: memory (a restart holds grants back for one TTL) or postgres (-database-url, tables of migration 0021, role rl_admin or the owner: a restarted server or another replica continues the division); default: -store's")
	rlsConfig := fs.String("rls-config", "", "the rate limit service's configuration in envoyproxy/ratelimit's format: a YAML file, or a directory of them (one domain each); reloaded on SIGHUP")
	rlsMetadata := fs.Bool("rls-response-metadata", false, "the rate limit service sets each response's dynamic_metadata (the domain, the descriptors, and the configured metadata of those that passed), as envoyproxy/ratelimit with RESPONSE_DYNAMIC_METADATA=true")
	rlsCheck := fs.String("rls-check-config", "", "check a rate limit service configuration (a file or a directory, as -rls-config) and exit: 0 valid and portable to envoyproxy/ratelimit, 1 valid but using rl's extensions (listed), 2 invalid (every mistake listed)")
	hashToken := fs.Bool("hash-token", false, "read an API token on stdin, print the sha256 to put in api_tokens, and exit")
	checkCfg := fs.String("check-config", "", "check a configuration file and print it in canonical form (every default written out), in the file's format, then exit: 0 valid, 2 invalid (every mistake listed on stderr)")
	checkFormat := fs.String("check-config-format", "auto", "with -check-config: the canonical form's format, auto (the file's: YAML for .yaml and .yml, JSON for .json), yaml or json")
	quiet := fs.Bool("q", false, "with -check-config or -rls-check-config: print nothing on stdout, answer by the exit status alone (mistakes still on stderr)")
	explain := fs.String("explain", "", "explain how the proxy would answer a request under -config, deciding nothing, and exit: 'METHOD URL' (e.g. 'GET https://api.example.com/v1/search'); see -H and -peer")
	var explainHeader []string
	fs.Func("H", "with -explain: a request header field 'Name: value' (repeatable)", func(v string) error {
		explainHeader = append(explainHeader, v)
		return nil
	})
	explainPeer := fs.String("peer", "127.0.0.1", "with -explain: the client's address, as key_by: ip reads it")
	fs.StringVar(&rc.Decider, "decider", "wasm", "decision core: wasm (the embedded WebAssembly module hosted by wazero) or native")
	fs.IntVar(&rc.WasmInstances, "wasm-instances", 0, "most WebAssembly instances (0: 2 × GOMAXPROCS)")
	fs.BoolVar(&rc.WasmWait, "wasm-wait", false, "compile the WebAssembly module before serving, and fail the start if it cannot start (default: the native core decides while it compiles, then it takes over)")
	fs.StringVar(&rc.WasmCacheDir, "wasm-cache-dir", "", "keep the compiled WebAssembly module in this directory across starts (owned by the service's user, not writable by group or others; created 0700); off by default")
	fs.StringVar(&rc.Store, "store", "memory", "state store: memory or postgres")
	fs.IntVar(&rc.MaxKeys, "max-keys", 0, "cap on keys held in memory (0: 1000000; -1: no cap); a new key beyond it is a store failure")
	fs.Int64Var(&rc.MaxBytes, "max-bytes", 0, "byte budget of the state held in memory (0: 256 MiB); a new key beyond it is a store failure, existing keys keep being decided")
	fs.StringVar(&rc.Postgres.URL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL for -store postgres (default $DATABASE_URL)")
	fs.BoolVar(&rc.Postgres.Migrate, "migrate", false, "apply the database migrations before serving (-store postgres)")
	fs.StringVar(&rc.Postgres.Decide, "pg-decide", "sql", "with -store postgres: sql (the PL/pgSQL port decides, one round trip; pgstore's default too) or go (lock the rows, the -decider core decides; needs the owner or rl_admin)")
	fs.BoolVar(&rc.Postgres.Durable, "pg-durable", false, "commit every decision synchronously (default: synchronous_commit off)")
	fs.BoolVar(&rc.Postgres.Batch, "pg-batch", true, "with -store postgres: decide concurrent requests in batches, one statement and one commit each (more decisions/s under load; -pg-batch=false: one statement per decision)")
	maxConns := fs.Int("pg-max-conns", 0, "PostgreSQL pool size (0: pgx's default)")
	fs.DurationVar(&rc.Postgres.Timeout, "store-timeout", 250*time.Millisecond, "bound on one PostgreSQL decision once it has a connection; slower counts as a store failure")
	fs.DurationVar(&rc.Postgres.QueueTimeout, "store-queue-timeout", time.Second, "bound on waiting for a PostgreSQL connection; when all are busy this is load: 503, never fail_open")
	fs.BoolVar(&rc.Postgres.Failover, "failover", false, "while PostgreSQL fails, decide in memory behind a circuit breaker; return when it recovers")
	fs.IntVar(&rc.Postgres.FailoverThreshold, "failover-threshold", 3, "store failures in a row that open the breaker")
	fs.DurationVar(&rc.Postgres.FailoverCooldown, "failover-cooldown", 5*time.Second, "time the breaker stays open before probing PostgreSQL")
	fs.DurationVar(&rc.ReadHeaderTimeout, "read-header-timeout", 5*time.Second, "HTTP server: time to read a request's headers")
	fs.DurationVar(&rc.ReadTimeout, "read-timeout", 30*time.Second, "HTTP server: time to read a whole request")
	fs.DurationVar(&rc.WriteTimeout, "write-timeout", 60*time.Second, "HTTP server: time to write a response (includes proxying)")
	fs.DurationVar(&rc.IdleTimeout, "idle-timeout", 120*time.Second, "HTTP server: keep-alive idle time")
	fs.DurationVar(&rc.ShutdownTimeout, "shutdown-timeout", 15*time.Second, "bound on the graceful shutdown after SIGTERM/SIGINT")
	fs.DurationVar(&rc.DrainDelay, "drain-delay", 0, "on shutdown, answer /readyz 503 this long before closing the listeners")
	fs.Int64Var(&rc.MaxBodyBytes, "max-body", 64<<10, "largest decision-API request body in bytes")
	fs.Int64Var(&rc.ProxyMaxBodyBytes, "proxy-max-body", 0, "largest proxied request body in bytes (0: no limit)")
	fs.StringVar(&rc.PprofListen, "pprof-listen", "", "serve the Go profiler (net/http/pprof, /debug/pprof/) on this loopback address (off by default)")
	fs.StringVar(&logFormat, "log-format", "json", "log format: json or text")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error; debug adds a line per decision (rule, key digest, cost, outcome, deciding limit, store time)")
	fs.IntVar(&rc.LogDenials, "log-denials", 0, "log each denied request at info level (rule, limit, key digest, retry-after), at most this many lines a second, counting those left out (in the next line and rl_denial_log_suppressed_total); 0: off")
	fs.BoolVar(&showVersion, "version", false, "print the version and exit: the module version, then one line each for the commit, modified, go, schema (the newest migration), extension (its default version) and wasm-abi")
	health := fs.String("health", "", "health check, for a container's HEALTHCHECK: GET this http(s) URL (e.g. http://127.0.0.1:8081/readyz) and exit 0 on 200, 1 otherwise")
	healthTimeout := fs.Duration("health-timeout", 3*time.Second, "with -health: how long to wait for the answer")
	if len(args) == 1 && args[0] == flagdoc.Arg {
		if err := flagdoc.Write(os.Stdout, "rl-wasm-host", flagsIntro, fs); err != nil {
			return 1
		}
		return 0
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if showVersion {
		if err := version.Get().Write(os.Stdout, "rl-wasm-host"); err != nil {
			return 1
		}
		return 0
	}
	if *health != "" {
		if fs.NArg() > 0 {
			fmt.Fprintf(os.Stderr, "rl-wasm-host: unexpected arguments %q\n", fs.Args())
			return 2
		}
		return healthCheck(*health, *healthTimeout, os.Stderr)
	}
	if *hashToken {
		tok, err := io.ReadAll(io.LimitReader(os.Stdin, 4096))
		if err != nil {
			fmt.Fprintln(os.Stderr, "rl-wasm-host: -hash-token:", err)
			return 1
		}
		t := strings.TrimRight(string(tok), "\r\n")
		if len(t) < 16 {
			fmt.Fprintln(os.Stderr, "rl-wasm-host: -hash-token: want a token of at least 16 bytes on stdin (e.g. openssl rand -hex 32)")
			return 2
		}
		sum := sha256.Sum256([]byte(t))
		fmt.Println(hex.EncodeToString(sum[:]))
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "rl-wasm-host: unexpected arguments %q\n", fs.Args())
		return 2
	}
	stdout := io.Writer(os.Stdout)
	if *quiet {
		stdout = io.Discard
	}
	if *rlsCheck != "" {
		return checkRLSConfig(*rlsCheck, stdout, os.Stderr)
	}
	if *checkCfg != "" {
		return checkConfig(*checkCfg, *checkFormat, *quiet, stdout, os.Stderr)
	}
	if *quiet {
		fmt.Fprintln(os.Stderr, "rl-wasm-host: -q is for -check-config and -rls-check-config")
		return 2
	}
	if *explain != "" {
		if rc.ConfigPath == "" {
			fmt.Fprintln(os.Stderr, "rl-wasm-host: -explain needs -config (the rules to explain the request under)")
			return 2
		}
		return explainRequest(rc.ConfigPath, *explain, explainHeader, *explainPeer, os.Stdout, os.Stderr)
	}
	if len(explainHeader) > 0 {
		fmt.Fprintln(os.Stderr, "rl-wasm-host: -H is for -explain")
		return 2
	}
	if rc.ConfigPath == "" {
		fmt.Fprintln(os.Stderr, "rl-wasm-host: -config is required (try -config cmd/rl-wasm-host/sample.yaml)")
		fs.Usage()
		return 2
	}
	rc.Postgres.MaxConns = int32(*maxConns)
	switch {
	case *grpcListen != "" && *rlsConfig == "":
		fmt.Fprintln(os.Stderr, "rl-wasm-host: -grpc-listen needs -rls-config (the rate limit service's configuration)")
		return 2
	case *grpcListen != "":
		var companions []rls.Companion
		if *rlqsConfig != "" {
			kind := *rlqsStore
			if kind == "" && rc.Store == "postgres" {
				kind = "postgres"
			} else if kind == "" {
				kind = "memory"
			}
			q, closeStore, err := newRLQS(*rlqsConfig, kind, rc.Postgres)
			if err != nil {
				fmt.Fprintf(os.Stderr, "rl-wasm-host: -rlqs-config: %v\n", err)
				return 2
			}
			defer closeStore()
			companions = append(companions, q)
		}
		rc.Extensions = append(rc.Extensions, rls.NewExtension(rls.ExtensionConfig{Listen: *grpcListen, ConfigPath: *rlsConfig,
			Options: rls.Options{ResponseMetadata: *rlsMetadata}, Companions: companions}))
	case *rlsConfig != "":
		fmt.Fprintln(os.Stderr, "rl-wasm-host: -rls-config needs -grpc-listen (the rate limit service's address)")
		return 2
	}
	if *rlqsStore != "" && *rlqsConfig == "" {
		fmt.Fprintln(os.Stderr, "rl-wasm-host: -rlqs-store is for -rlqs-config (the RLQS server's state)")
		return 2
	}
	if *rlqsConfig != "" && *grpcListen == "" {
		fmt.Fprintln(os.Stderr, "rl-wasm-host: -rlqs-config needs -grpc-listen (the address RLQS is served on)")
		return 2
	}
	if *rlsMetadata && *grpcListen == "" {
		fmt.Fprintln(os.Stderr, "rl-wasm-host: -rls-response-metadata needs -grpc-listen (the rate limit service's address)")
		return 2
	}

	if *watch < 0 {
		fmt.Fprintf(os.Stderr, "rl-wasm-host: -watch-config %v: want a positive duration such as 2s, or 0 (SIGHUP only)\n", *watch)
		return 2
	}
	if rc.LogDenials < 0 || rc.LogDenials > decisionlog.MaxDenialsPerSecond {
		fmt.Fprintf(os.Stderr, "rl-wasm-host: -log-denials %d: want 0 (off) to %d lines a second\n", rc.LogDenials, decisionlog.MaxDenialsPerSecond)
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "rl-wasm-host: -log-level %q: want debug, info, warn or error\n", logLevel)
		return 2
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch logFormat {
	case "json":
		h = slog.NewJSONHandler(os.Stderr, opts)
	case "text":
		h = slog.NewTextHandler(os.Stderr, opts)
	default:
		fmt.Fprintf(os.Stderr, "rl-wasm-host: -log-format %q: want json or text\n", logFormat)
		return 2
	}
	rc.Logger = slog.New(h)
	slog.SetDefault(rc.Logger)
	v := version.Get()
	rc.Logger.Info("starting", "version", v.Module, "commit", v.Commit, "modified", v.Modified, "pid", os.Getpid())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	if *watch > 0 {
		w := newConfigWatcher(rc.Logger, rc.ConfigPath, *rlsConfig)
		tick := time.NewTicker(*watch)
		defer tick.Stop()
		go w.run(ctx, tick.C, hup)
		rc.Logger.Info("-watch-config: reloading when the configuration changes", "every", watch.String())
	}

	if err := Run(ctx, rc, hup); err != nil {
		var ce *service.ConfigError
		if errors.As(err, &ce) {
			rc.Logger.Error("invalid configuration", "file", ce.File, "problems", len(ce.Problems))
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		rc.Logger.Error("exiting", "err", err)
		return 1
	}
	return 0
}

// healthCheck is -health: it asks rawURL once, within timeout, following
// no redirect, and returns the exit status: 0 when the answer is 200 OK, 1
// when it is anything else or none (said on stderr), 2 when rawURL is not
// an http or https URL.
func healthCheck(rawURL string, timeout time.Duration, stderr io.Writer) int {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "rl-wasm-host: -health %q: want an http or https URL such as http://127.0.0.1:8081/readyz\n", rawURL)
		return 2
	}
	if timeout <= 0 {
		fmt.Fprintf(stderr, "rl-wasm-host: -health-timeout %v: want a positive duration such as 3s\n", timeout)
		return 2
	}
	client := &http.Client{
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Get(u.String())
	if err != nil {
		fmt.Fprintln(stderr, "rl-wasm-host: -health:", err)
		return 1
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "rl-wasm-host: -health: %s answered %s\n", u.Redacted(), resp.Status)
		return 1
	}
	return 0
}
