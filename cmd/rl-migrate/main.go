// Command rl-migrate applies the PostgreSQL migrations of rl (package
// github.com/rlcore/rl/sql/migrations) to a database, or to every shard of
// a sharded setup, and installs the PL/Proxy router of one (package
// github.com/rlcore/rl/sql/plproxy). The router logs in to the shards as the
// user of the shard URLs, the shard login, mapped for the owner of the
// router's functions alone: make it an ordinary role on the shards (see
// plproxy.Apply).
//
//	rl-migrate [-database URL] [-timeout 10s] [-allow-superuser] up | down [N] | goto V | version | force V
//	rl-migrate -shards URL,URL,... [-allow-superuser] up | down [N] | goto V | version | force V
//	rl-migrate [-database ROUTER_URL] -shards URL,URL,... [-partitions N] router
//	rl-migrate -version
//
// The URL comes from -database or DATABASE_URL: postgres://, postgresql://
// (converted to golang-migrate's pgx5://) or pgx5://. The applied version is
// kept in the table rl_schema_migrations. "up" with nothing to do prints
// "no change" and exits 0. up, down and goto refuse to run as a superuser
// (the role that runs the migrations owns schema rl and its definer-rights
// functions: make it an ordinary role) unless -allow-superuser is given, and
// then warn. Exit status: 0 success, 1 failure, 2 usage.
//
// -version prints the build: the module version, then one line each for
// the commit, modified, go, schema (the newest migration, the version "up"
// migrates to), extension (the extension rl's default version) and
// wasm-abi; package internal/request/version documents each line.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rlcore/rl/internal/request/version"
	"github.com/rlcore/rl/internal/util/flagdoc"
	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/sql/plproxy"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: rl-migrate [-database URL] [-shards URL,...] [-partitions N] [-timeout 10s] [-allow-superuser] command
       rl-migrate -version

commands:
  up         apply every pending migration
  down [N]   revert every migration, or the last N
  goto V     migrate up or down to version V
  version    print the applied version
  force V    record version V (-1: none) as applied and clean, running nothing;
             use it after repairing a migration that failed part-way
  router     install the PL/Proxy router schema in the -database database and
             define its cluster: the server rl_shards with -partitions
             partitions (a power of two; default: the shard count rounded up),
             partition i on shard i mod the shard count; again: repoints them.
             The user of the shard URLs is the shard login, mapped for the
             owner of the router's functions only (a PUBLIC mapping of an
             earlier version is dropped): make it an ordinary role on the
             shards (GRANT rl_app only); GRANT rl_admin to it there to have
             the router's trusted callers' request times honoured. PL/Proxy
             needs a superuser to run it; -router-owner names the ordinary
             role that owns the router's schema (its definer functions run
             as it), by default the schema's owner, or the role running it

The URL (postgres://user:password@host:port/dbname?sslmode=disable) comes from
-database or the DATABASE_URL environment variable. With -shards (comma-
separated URLs; a comma inside one is written %2C), up, down, goto, version
and force run on every shard in turn instead; the router command takes the
router's URL from -database or DATABASE_URL and the shards from -shards.

up, down and goto refuse to run as a superuser: the role that runs the
migrations owns schema rl, and every SECURITY DEFINER function of rl runs with
its rights. Run them as an ordinary role that owns the database (sql/README.md,
"Installing without a superuser"); -allow-superuser runs them anyway, warning.

flags:
`

// run is the command; it returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rl-migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("database", "", "PostgreSQL URL (default $DATABASE_URL)")
	timeout := fs.Duration("timeout", migrations.DefaultConnectTimeout, "how long to try to connect")
	shardList := fs.String("shards", "", "comma-separated URLs of the shard databases")
	partitions := fs.Int("partitions", 0, "router: the partition count, a power of two (default: the shard count rounded up)")
	routerOwner := fs.String("router-owner", "", "router: the ordinary role that owns the router's schema (default: its current owner, or the role running the command)")
	allowSuperuser := fs.Bool("allow-superuser", false, "up, down, goto: run as a superuser anyway, warning (rl's definer-rights functions then run with superuser rights)")
	showVersion := fs.Bool("version", false, "print the version and exit: the module version, then one line each for the commit, modified, go, schema (the newest migration), extension (its default version) and wasm-abi")
	if len(args) == 1 && args[0] == flagdoc.Arg {
		if err := flagdoc.Write(stdout, "rl-migrate", "Every flag of rl-migrate, from the command's own definitions; `rl-migrate -h` prints:\n\n```\n"+
			strings.TrimRight(strings.TrimSuffix(usage, "flags:\n"), "\n")+"\n```", fs); err != nil {
			return 1
		}
		return 0
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "rl-migrate: "+format+"\n", a...)
		fmt.Fprintln(stderr, "run rl-migrate -h for help")
		return 2
	}
	rest := fs.Args()
	if *showVersion {
		if len(rest) != 0 {
			return usageErr("-version takes no command")
		}
		if err := version.Get().Write(stdout, "rl-migrate"); err != nil {
			return 1
		}
		return 0
	}
	if len(rest) == 0 {
		return usageErr("no command")
	}
	cmd, rest := rest[0], rest[1:]
	var n int
	switch cmd {
	case "router":
		if len(rest) != 0 {
			return usageErr("router takes no argument")
		}
	case "up", "version":
		if len(rest) != 0 {
			return usageErr("%s takes no argument", cmd)
		}
	case "down":
		if len(rest) > 1 {
			return usageErr("down takes at most one argument")
		}
		if len(rest) == 1 {
			v, err := strconv.Atoi(rest[0])
			if err != nil || v < 1 {
				return usageErr("down N: N must be a positive integer, not %q", rest[0])
			}
			n = v
		}
	case "goto", "force":
		if len(rest) != 1 {
			return usageErr("%s takes one argument: the version", cmd)
		}
		v, err := strconv.Atoi(rest[0])
		if err != nil || v < 0 && !(cmd == "force" && v == -1) {
			return usageErr("%s V: V must be a version number, not %q", cmd, rest[0])
		}
		n = v
	default:
		return usageErr("unknown command %q", cmd)
	}
	if *timeout <= 0 {
		return usageErr("-timeout must be positive")
	}
	var shards []string
	if *shardList != "" {
		for _, s := range strings.Split(*shardList, ",") {
			if s = strings.TrimSpace(s); s == "" {
				return usageErr("-shards: an empty URL in the list")
			}
			shards = append(shards, s)
		}
	}
	databaseSet := false
	fs.Visit(func(f *flag.Flag) { databaseSet = databaseSet || f.Name == "database" })
	switch {
	case cmd == "router" && len(shards) == 0:
		return usageErr("router needs -shards")
	case cmd != "router" && *partitions != 0:
		return usageErr("-partitions is for the router command")
	case cmd != "router" && *routerOwner != "":
		return usageErr("-router-owner is for the router command")
	case cmd != "router" && len(shards) > 0 && databaseSet:
		return usageErr("give -database or -shards, not both: %s runs on one database or on every shard", cmd)
	}
	u := *dbURL
	if u == "" {
		u = getenv("DATABASE_URL")
	}
	if cmd == "router" {
		return router(ctx, u, plproxy.Config{Shards: shards, Partitions: *partitions, Owner: *routerOwner}, *timeout, stdout, stderr)
	}
	if len(shards) == 0 {
		return migrate(ctx, u, cmd, n, *timeout, *allowSuperuser, stdout, stderr)
	}
	code := 0
	for i, s := range shards {
		fmt.Fprintf(stdout, "shard %d (%s): ", i, migrations.Redact(s))
		var out bytes.Buffer
		c := migrate(ctx, s, cmd, n, *timeout, *allowSuperuser, &out, stderr)
		if out.Len() == 0 {
			out.WriteString("failed\n")
		}
		stdout.Write(out.Bytes())
		code = max(code, c)
	}
	return code
}

// router installs the router schema and the cluster definition, and maps
// the owner of the router's functions to the shard login (plproxy.Apply).
func router(ctx context.Context, routerURL string, cfg plproxy.Config, timeout time.Duration, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		msg := err.Error()
		for _, u := range append([]string{routerURL}, cfg.Shards...) {
			if pu, perr := url.Parse(u); perr == nil {
				if pw, ok := pu.User.Password(); ok && pw != "" {
					msg = strings.ReplaceAll(msg, pw, "xxxxx")
				}
				if pw := pu.Query().Get("password"); pw != "" {
					msg = strings.ReplaceAll(msg, pw, "xxxxx")
				}
			}
		}
		fmt.Fprintf(stderr, "rl-migrate: %s\n", msg)
		return 1
	}
	parts, _, _, err := cfg.Layout()
	if err != nil {
		return fail(err)
	}
	if _, _, err := migrations.DriverURL(routerURL); err != nil {
		return fail(err)
	}
	pu, _ := url.Parse(routerURL)
	if q := pu.Query(); q.Get("connect_timeout") == "" {
		q.Set("connect_timeout", strconv.Itoa(int((timeout+time.Second-1)/time.Second)))
		pu.RawQuery = q.Encode()
	}
	if pu.Scheme == "pgx5" {
		pu.Scheme = "postgres"
	}
	if err := plproxy.Apply(ctx, pu.String(), cfg); err != nil {
		return fail(fmt.Errorf("router %s: %w", migrations.Redact(routerURL), err))
	}
	fmt.Fprintf(stdout, "router ready: %d partitions on %d shards (server %s)\n", len(parts), len(cfg.Shards), plproxy.Cluster)
	for i, p := range parts {
		fmt.Fprintf(stdout, "  p%d: %s\n", i, p)
	}
	return 0
}

// migrate runs cmd on the database at u. up, down and goto refuse a
// superuser unless allowSuperuser, and then warn (migrations.CheckOwner).
func migrate(ctx context.Context, u, cmd string, n int, timeout time.Duration, allowSuperuser bool, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "rl-migrate: %v\n", err)
		return 1
	}
	start := time.Now()
	octx, cancel := context.WithTimeout(ctx, timeout)
	m, err := migrations.Open(octx, u)
	// Either octx or the driver's connect_timeout (set from octx's deadline,
	// rounded up) ended the attempt; the driver does not always wrap that.
	expired := octx.Err() == context.DeadlineExceeded || time.Since(start) >= timeout
	cancel()
	if err != nil {
		if expired || errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("cannot open database %s: no answer within %v", migrations.Redact(u), timeout)
		}
		return fail(err)
	}
	defer m.Close()

	if cmd == "up" || cmd == "down" || cmd == "goto" {
		var se *migrations.SuperuserError
		switch err := m.CheckOwner(ctx); {
		case errors.As(err, &se) && allowSuperuser:
			fmt.Fprintf(stderr, "rl-migrate: warning: running as the superuser %q (-allow-superuser): every SECURITY DEFINER function of rl "+
				"will run with superuser rights for any caller; the owner of schema rl should be an ordinary role "+
				"(sql/README.md, \"Installing without a superuser\")\n", se.Role)
		case errors.As(err, &se):
			return fail(fmt.Errorf("%w; -allow-superuser runs %s as a superuser anyway", err, cmd))
		case err != nil:
			return fail(err)
		}
	}

	version := func() string {
		v, dirty, err := m.Version(ctx)
		switch {
		case err != nil:
			return "unknown (" + err.Error() + ")"
		case v == 0 && !dirty:
			return "none"
		case dirty:
			return fmt.Sprintf("%d (dirty)", v)
		}
		return strconv.FormatUint(uint64(v), 10)
	}
	report := func(err error, done string) int {
		if errors.Is(err, migrations.ErrNoChange) {
			fmt.Fprintf(stdout, "no change: version %s\n", version())
			return 0
		}
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%s: version %s\n", done, version())
		return 0
	}
	switch cmd {
	case "up":
		return report(m.Up(ctx), "migrated up")
	case "down":
		if n == 0 {
			return report(m.Down(ctx), "migrated down")
		}
		return report(m.Steps(ctx, -n), "migrated down")
	case "goto":
		return report(m.Goto(ctx, uint(n)), "migrated")
	case "force":
		return report(m.Force(ctx, n), "forced")
	default: // version
		v, dirty, err := m.Version(ctx)
		if err != nil {
			return fail(err)
		}
		switch {
		case dirty:
			fmt.Fprintf(stdout, "%d (dirty)\n", v)
			fmt.Fprintf(stderr, "rl-migrate: %v\n", &migrations.DirtyError{Version: int(v)})
			return 1
		case v == 0:
			fmt.Fprintln(stdout, "none")
		default:
			fmt.Fprintln(stdout, v)
		}
		return 0
	}
}
