package plproxy_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/sql/plproxy"
)

// pgCluster is a PostgreSQL server this test starts: its own data
// directory, port and processes.
type pgCluster struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	as   []string // the command prefix running as the postgres OS user
}

// pgBin finds the PostgreSQL 15 server programs.
func pgBin(t *testing.T) string {
	pgtest.SkipShort(t)
	for _, d := range []string{"/usr/lib/postgresql/15/bin"} {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	out, err := exec.Command("pg_config", "--bindir").Output()
	if err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	t.Fatal("initdb not found in /usr/lib/postgresql/15/bin nor pg_config --bindir: cannot start test clusters")
	return ""
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startCluster initdbs and starts a server in a temporary directory owned
// by the postgres OS user (the server refuses to run as root), stopped and
// removed when the test ends.
func startCluster(t *testing.T, bin string) *pgCluster {
	t.Helper()
	c := &pgCluster{t: t, bin: bin, port: freePort(t)}
	base, err := os.MkdirTemp("", "rl-plproxy-cluster-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root: the clusters run as the OS user postgres")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		require.NoError(t, os.Chown(base, uid, gid))
		c.as = []string{"runuser", "-u", "postgres", "--"}
	}
	c.dir = filepath.Join(base, "data")
	c.run("initdb", "-D", c.dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	t.Cleanup(func() { c.stop("immediate") })
	c.start()
	return c
}

func (c *pgCluster) run(prog string, args ...string) {
	c.t.Helper()
	argv := append(append(append([]string{}, c.as...), filepath.Join(c.bin, prog)), args...)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	require.NoError(c.t, err, "%s %s:\n%s", prog, strings.Join(args, " "), out)
}

func (c *pgCluster) start() {
	c.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=120 -c fsync=off -c synchronous_commit=off -c shared_buffers=16MB",
		c.port, filepath.Dir(c.dir))
	logFile := filepath.Join(filepath.Dir(c.dir), "log")
	argv := append(append([]string{}, c.as...), filepath.Join(c.bin, "pg_ctl"), "-D", c.dir, "-o", opts, "-l", logFile, "-w", "-t", "60", "start")
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(logFile)
		c.t.Fatalf("pg_ctl start: %v\n%s\nserver log:\n%s", err, out, log)
	}
}

func (c *pgCluster) stop(mode string) {
	c.t.Helper()
	if _, err := os.Stat(filepath.Join(c.dir, "postmaster.pid")); err != nil {
		return
	}
	c.run("pg_ctl", "-D", c.dir, "-m", mode, "-w", "stop")
}

func (c *pgCluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// TestSeparateClusters shards over two PostgreSQL servers this test starts
// on ports of their own, with the router on a third: keys spread
// over both, 32 connections contending for one key admit exactly the
// limit, and a stopped server fails only its keys while the other keeps
// deciding. It fails, never skips, when the servers cannot be started.
func TestSeparateClusters(t *testing.T) {
	bin := pgBin(t)
	clusters := []*pgCluster{startCluster(t, bin), startCluster(t, bin)}
	var shards []string
	for _, c := range clusters {
		u := c.url("postgres")
		require.NoError(t, migrations.Up(ctx, u))
		shards = append(shards, u)
	}
	// The router gets a server of its own too: its 32 sessions below stay
	// off the shared test server.
	rc := startCluster(t, bin)
	router := rc.url("postgres")
	require.NoError(t, plproxy.Apply(ctx, router, plproxy.Config{Shards: shards, Partitions: 8}))
	shardOf := func(k string) int { return plproxy.Partition(k, 8) % 2 }

	// Keys spread over both servers.
	rp := pool(t, router, 4)
	want := [2]int64{}
	for i := range 100 {
		k := fmt.Sprintf("sep:%d", i)
		want[shardOf(k)]++
		_, err := rp.Exec(ctx, "SELECT rl.rl_allow($1, 'gcra', 5, '1 minute')", k)
		require.NoError(t, err)
	}
	for i, c := range clusters {
		require.Equal(t, want[i], count(t, c.url("postgres"), "SELECT count(*) FROM rl.state"), "server %d", i)
		require.Greater(t, want[i], int64(25))
	}

	// 32 connections on one key, every algorithm, the servers in turn.
	for i, alg := range algorithms {
		s := i % 2
		{
			k := "hot:" + alg.String()
			for shardOf(k) != s {
				k += "+"
			}
			rp := pool(t, router, 32)
			var admitted, errs atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range 8 {
						var ok bool
						err := rp.QueryRow(ctx, "SELECT allowed FROM rl.rl_allow_us($1, $2, 100, 3600000000, now_us => $3)", k, alg.String(), t0).Scan(&ok)
						switch {
						case err != nil:
							errs.Add(1)
						case ok:
							admitted.Add(1)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			rp.Close()
			require.Zero(t, errs.Load())
			require.Equal(t, int64(100), admitted.Load(), "%s on server %d", k, s)
		}
	}

	// Server 1 stops: its keys fail, server 0's keep deciding.
	clusters[1].stop("fast")
	for i := range 40 {
		k := fmt.Sprintf("sep:%d", i)
		_, err := rp.Exec(ctx, "SELECT rl.rl_allow($1, 'gcra', 5, '1 minute')", k)
		if shardOf(k) == 1 {
			require.Error(t, err, k)
		} else {
			require.NoError(t, err, k)
		}
	}
	clusters[1].start()
	for i := range 40 {
		k := fmt.Sprintf("sep:%d", i)
		await.Until(t, "server 1, started again, to decide "+k, func() bool {
			_, err := rp.Exec(ctx, "SELECT rl.rl_allow($1, 'gcra', 5, '1 minute')", k)
			return err == nil
		})
	}
}
