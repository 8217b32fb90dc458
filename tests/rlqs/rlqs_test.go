// Package rlqs runs one global limit across real processes: an RLQS server
// (rl-wasm-host -rlqs-config) and three rl-wasm-host replicas whose rule
// takes its limit from it (a rule's "global" field), on loopback, under
// load. It checks the bound of docs/rlqs.md on what the replicas admit
// together, through a replica killed and restarted, a server restarted and
// a server link 50 ms late or stalled, during which no decision waits on
// the server; and, with the server's state in PostgreSQL, through a server
// restarted that continues the division at once.
package rlqs

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/internal/testkit/tcpproxy"
)

// The global limit: a token bucket of burst B refilled at L per second,
// as the server's rule and the replicas' rule both state it.
const (
	limitL = 100 // per second
	burstB = 40
	// reserveR is the server's burst reserve (quota.Config.BurstReserve,
	// default a quarter of B): never handed out.
	reserveR = burstB / 4
)

// serverRules: the bound's second condition is a round trip under the
// guard; a guard of 2 s keeps it on a loaded machine.
const serverRules = `report_interval: 1s
client_id_metadata: x-rlqs-client
ttl: 3s
guard: 2s
rules:
  - domain: rl-wasm-host
    match: {name: api}
    algorithm: token_bucket
    limit: 40
    rate: 100
    window: 1s
`

const replicaRules = `rules:
  - name: api
    key_by: global
    strategy: token
    limit: 40
    rate: 100
    window: 1s
    global:
      rlqs: %s
      bucket: {name: api}
      report_interval: 1s
      client_id_metadata: x-rlqs-client
`

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds rl-wasm-host once for the package's tests.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rl-rlqs-e2e")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "rl-wasm-host")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/rlcore/rl/cmd/rl-wasm-host").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// proc is a running rl-wasm-host.
type proc struct {
	name   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	logs   []string
	addrs  map[string]string // role → address, from the "listening" lines
	exited chan error
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(binary(t), append([]string{"-listen", "127.0.0.1:0", "-api-listen", "127.0.0.1:0", "-decider", "native"}, args...)...),
		addrs: map[string]string{}, exited: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), "DATABASE_URL=")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			var rec struct{ Msg, Role, Addr string }
			_ = json.Unmarshal([]byte(line), &rec)
			p.mu.Lock()
			p.logs = append(p.logs, line)
			if rec.Msg == "listening" {
				p.addrs[rec.Role] = rec.Addr
			}
			p.mu.Unlock()
		}
		p.exited <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%s's logs:\n%s", p.name, p.log())
		}
	})
	return p
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.logs, "\n")
}

// addr waits for the address of the listener of role.
func (p *proc) addr(t *testing.T, role string) string {
	t.Helper()
	var a string
	await.Until(t, p.name+"'s "+role+" listener", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		a = p.addrs[role]
		return a != ""
	})
	return a
}

// fresh is the sum of the fresh tokens the replica's assignments have
// added so far (the "fresh_total" of its last "assignment changed" line):
// its part of ε.
func (p *proc) fresh() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range slices.Backward(p.logs) {
		var rec struct {
			Msg   string
			Fresh int64 `json:"fresh_total"`
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Msg == "rlqs client: assignment changed" {
			return rec.Fresh
		}
	}
	return 0
}

// changes counts the replica's "assignment changed" lines.
func (p *proc) changes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.logs {
		if strings.Contains(l, `"msg":"rlqs client: assignment changed"`) {
			n++
		}
	}
	return n
}

func (p *proc) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Kill()
	await.Recv(t, p.name+" to exit", p.exited)
}

// replica is one slot of the fleet: its current process and API URL.
type replica struct {
	p   atomic.Pointer[proc]
	api atomic.Pointer[string]
	// gone holds the processes this slot ran before, for their ε.
	gone []*proc
	// started is closed when the slot's next process is stored.
	mu      sync.Mutex
	started chan struct{}
}

// next is closed when the slot has a new process.
func (r *replica) next() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started == nil {
		r.started = make(chan struct{})
	}
	return r.started
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}

// check decides one request on the replica: true if admitted.
func check(url string) (allowed bool, err error) {
	resp, err := client.Post(url+"/v1/ratelimit/check", "application/json", strings.NewReader(`{"rule":"api","key":"k"}`))
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusTooManyRequests:
		return false, nil
	}
	return false, fmt.Errorf("check: status %d", resp.StatusCode)
}

// tally counts what a load phase admitted; first and last bound the
// instants of every decision counted (a send before the first, a response
// after the last).
type tally struct {
	admitted, decided, failed atomic.Int64
	byReplica                 []atomic.Int64 // admitted, by fleet slot
	mu                        sync.Mutex
	first, last               time.Time
	latencies                 []time.Duration
}

// load runs workers goroutines per replica, each sending checks in a loop,
// until stop is closed; decisions on a replica being restarted fail and are
// counted apart.
func load(fleet []*replica, workers int, stop <-chan struct{}) (*tally, func()) {
	tl := &tally{first: time.Now(), byReplica: make([]atomic.Int64, len(fleet))}
	var wg sync.WaitGroup
	for i, r := range fleet {
		for range workers {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					next := r.next()
					t0 := time.Now()
					ok, err := check(*r.api.Load())
					d := time.Since(t0)
					switch {
					case err != nil:
						// The replica is down: wait for its next
						// process rather than spin.
						tl.failed.Add(1)
						select {
						case <-next:
						case <-stop:
						}
						continue
					case ok:
						tl.admitted.Add(1)
						tl.byReplica[i].Add(1)
					}
					tl.decided.Add(1)
					tl.mu.Lock()
					tl.latencies = append(tl.latencies, d)
					tl.mu.Unlock()
				}
			})
		}
	}
	return tl, func() {
		wg.Wait()
		tl.last = time.Now()
	}
}

// p99 is the tally's 99th percentile latency, for the log only.
func (tl *tally) p99() time.Duration {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.latencies) == 0 {
		return 0
	}
	l := slices.Clone(tl.latencies)
	slices.Sort(l)
	return l[len(l)*99/100]
}

// freshAll sums ε's parts over every process the fleet ran.
func freshAll(fleet []*replica) int64 {
	var n int64
	for _, r := range fleet {
		n += r.p.Load().fresh()
		for _, g := range r.gone {
			n += g.fresh()
		}
	}
	return n
}

// checkBound asserts admitted ≤ L·W + (B − R) + ε over the phase, W from
// its first send to its last response (rounded up to a millisecond), ε the
// fresh tokens the replicas' assignments added meanwhile (read before the
// phase and after it: a change read late only widens ε).
func checkBound(t *testing.T, phase string, tl *tally, freshBefore, freshAfter int64) {
	t.Helper()
	w := tl.last.Sub(tl.first)
	ms := (w.Milliseconds() + 1)
	eps := freshAfter - freshBefore
	bound := limitL*ms/1000 + 1 + burstB - reserveR + eps
	got := tl.admitted.Load()
	t.Logf("%s: W %v, admitted %d of %d decided (%d failed: a replica down), bound L·W + (B−R) + ε = %d (ε %d), p99 %v",
		phase, w.Round(time.Millisecond), got, tl.decided.Load(), tl.failed.Load(), bound, eps, tl.p99())
	if got > bound {
		t.Errorf("%s: admitted %d > L·W + (B−R) + ε = %d·%v + %d + %d", phase, got, limitL, w, burstB-reserveR, eps)
	}
	if got == 0 {
		t.Errorf("%s: nothing admitted", phase)
	}
}

// admits waits until the replica admits a request: it holds an assignment.
func admits(t *testing.T, r *replica) {
	t.Helper()
	await.Until(t, r.p.Load().name+" to admit a request", func() bool {
		ok, _ := check(*r.api.Load())
		return ok
	})
}

func startServer(t *testing.T, dir, name string, args ...string) (*proc, string) {
	t.Helper()
	s := start(t, name, append([]string{"-config", filepath.Join(dir, "server.yaml"), "-grpc-listen", "127.0.0.1:0",
		"-rls-config", filepath.Join(dir, "rls.yaml"), "-rlqs-config", filepath.Join(dir, "rlqs.yaml")}, args...)...)
	return s, s.addr(t, "grpc")
}

func startReplica(t *testing.T, dir, name string, r *replica) {
	t.Helper()
	p := start(t, name, "-config", filepath.Join(dir, "replica.yaml"))
	api := "http://" + p.addr(t, "api")
	r.p.Store(p)
	r.api.Store(&api)
	r.mu.Lock()
	if r.started != nil {
		close(r.started)
		r.started = nil
	}
	r.mu.Unlock()
}

// e2e is a running setup: the server behind a proxy, and the fleet of
// replicas whose rule takes its limit from it.
type e2e struct {
	t          *testing.T
	dir        string
	serverArgs []string
	server     *proc
	link       *tcpproxy.Proxy
	fleet      []*replica
}

// newE2E starts the server (RLQS configuration rlqsYAML, serverArgs added
// to its command line) and three replicas, and waits until each replica
// admits a request.
func newE2E(t *testing.T, rlqsYAML string, serverArgs ...string) *e2e {
	t.Helper()
	e := &e2e{t: t, dir: t.TempDir(), serverArgs: serverArgs}
	// The server's process serves RLQS on its gRPC listener, which needs
	// a rate limit service configuration and an HTTP rule of its own.
	e.write("server.yaml", "rules: [{name: unused, strategy: fixed, limit: 1, window: 1s}]\n")
	e.write("rls.yaml", "domain: unused\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	e.write("rlqs.yaml", rlqsYAML)

	// The replicas reach the server through a proxy: a stable address
	// across server restarts, and a link the test can slow or stall.
	var addr string
	e.server, addr = startServer(t, e.dir, "server", serverArgs...)
	link, err := tcpproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	e.link = link
	e.write("replica.yaml", fmt.Sprintf(replicaRules, link.Addr()))
	e.fleet = []*replica{{}, {}, {}}
	for i, r := range e.fleet {
		startReplica(t, e.dir, fmt.Sprintf("replica%d", i), r)
	}
	// A server with state in memory holds its first grants back for TTL
	// + guard after it starts: wait for them.
	for _, r := range e.fleet {
		admits(t, r)
	}
	return e
}

func (e *e2e) write(name, text string) {
	if err := os.WriteFile(filepath.Join(e.dir, name), []byte(text), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// phase runs load until during returns, then checks the bound.
func (e *e2e) phase(name string, during func(tl *tally)) *tally {
	e.t.Helper()
	before := freshAll(e.fleet)
	stop := make(chan struct{})
	tl, wait := load(e.fleet, 4, stop)
	during(tl)
	close(stop)
	wait()
	checkBound(e.t, name, tl, before, freshAll(e.fleet))
	return tl
}

// more waits until replica i has admitted n more requests in the phase: a
// stretch of load measured in admissions, not in time.
func (e *e2e) more(tl *tally, i int, n int64) {
	e.t.Helper()
	from := tl.byReplica[i].Load()
	await.Until(e.t, fmt.Sprintf("replica%d to admit %d more", i, n), func() bool { return tl.byReplica[i].Load() >= from+n })
}

func (e *e2e) everyone(tl *tally, n int64) {
	e.t.Helper()
	for i := range e.fleet {
		e.more(tl, i, n)
	}
}

// restartServer kills the server and starts another with the same
// command line, the replicas' links moved to it.
func (e *e2e) restartServer(name string) {
	e.t.Helper()
	e.server.kill(e.t)
	var addr string
	e.server, addr = startServer(e.t, e.dir, name, e.serverArgs...)
	e.link.SetTarget(addr)
	e.link.Cut() // the replicas' streams to the old server, if any are left
	e.link.Restore()
}

func TestGlobalLimitAcrossProcesses(t *testing.T) {
	e := newE2E(t, serverRules)
	fleet, link, dir := e.fleet, e.link, e.dir
	phase, more, everyone := e.phase, e.more, e.everyone
	steady := phase("steady", func(tl *tally) { everyone(tl, 40) })

	phase("a replica killed and restarted", func(tl *tally) {
		everyone(tl, 20)
		r := fleet[1]
		old := r.p.Load()
		old.kill(t)
		r.gone = append(r.gone, old)
		startReplica(t, dir, "replica1'", r)
		more(tl, 1, 20) // the new process has its own assignment
		everyone(tl, 20)
	})

	phase("the server restarted (state in memory)", func(tl *tally) {
		everyone(tl, 20)
		changes := make([]int, len(fleet))
		for i, r := range fleet {
			changes[i] = r.p.Load().changes()
		}
		// With its state in PostgreSQL the server needs no hold:
		// TestServerRestartPostgres.
		e.restartServer("server'")
		// A server with memory state holds its grants back for TTL +
		// guard, by which the old ones have expired: each replica
		// receives a new assignment, then admits on it.
		for i, r := range fleet {
			await.Until(t, fmt.Sprintf("replica%d's new assignment", i), func() bool { return r.p.Load().changes() > changes[i] })
		}
		everyone(tl, 20)
	})

	delayed := phase("the server 50 ms late", func(tl *tally) {
		link.SetDelay(50 * time.Millisecond)
		everyone(tl, 40)
	})
	t.Logf("p99 of a decision: %v steady, %v with the server 50 ms late (logged, not asserted)", steady.p99(), delayed.p99())

	// A stalled link: nothing reaches the server or comes back. Every
	// decision still completes, locally; one that waited on the server
	// would hang until the link is released, after the phase.
	link.Hold()
	stalled := phase("the server link stalled", func(tl *tally) {
		from := tl.decided.Load()
		await.Until(t, "300 decisions with the link stalled", func() bool { return tl.decided.Load() >= from+300 })
	})
	link.Release()
	if stalled.decided.Load() < 300 {
		t.Fatalf("%d decisions completed with the link stalled, want 300", stalled.decided.Load())
	}
	t.Logf("with the link stalled: %d decisions completed, %d admitted (until the assignments' TTL; then the fallback, none: deny)",
		stalled.decided.Load(), stalled.admitted.Load())
}

// probe is an RLQS client in the test process, under an identity of its
// own (client_id_metadata), reporting for the replicas' bucket: a fourth
// client that admits nothing, and whose answers the test reads.
type probe struct {
	t       *testing.T
	stream  grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	answers chan *rlqsv3.RateLimitQuotaResponse_BucketAction
}

// openProbe opens a stream to addr as client id.
func openProbe(t *testing.T, addr, id string) *probe {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-rlqs-client", id))
	t.Cleanup(func() { cancel(); conn.Close() })
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := &probe{t: t, stream: s, answers: make(chan *rlqsv3.RateLimitQuotaResponse_BucketAction, 64)}
	go func() {
		defer close(p.answers)
		for {
			r, err := s.Recv()
			if err != nil {
				return
			}
			for _, a := range r.GetBucketAction() {
				p.answers <- a
			}
		}
	}()
	return p
}

// report reports usage of the bucket {name: bucket} in the replicas'
// domain.
func (p *probe) report(bucket string, allowed, denied uint64) {
	p.t.Helper()
	if err := p.stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "rl-wasm-host",
		BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"name": bucket}}, TimeElapsed: &durationpb.Duration{},
			NumRequestsAllowed: allowed, NumRequestsDenied: denied}}}); err != nil {
		p.t.Fatal(err)
	}
}

// keepReporting reports 5 requests of bucket api, all allowed, every
// second, as an Envoy reports, until the test ends or the stream breaks:
// the probe keeps a small grant of its own, and the server takes its
// reports as acknowledging the cuts it sends it (a silent client's cut
// counts until its grant expires, holding back the raises it pays for).
func (p *probe) keepReporting() {
	done := make(chan struct{})
	p.t.Cleanup(func() { close(done) })
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if p.stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "rl-wasm-host",
					BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
						BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"name": "api"}}, TimeElapsed: &durationpb.Duration{Seconds: 1}, NumRequestsAllowed: 5}}}) != nil {
					return
				}
			}
		}
	}()
}

// next returns the probe's next answer: the bucket's name and its token
// bucket (nil for DENY_ALL).
func (p *probe) next(what string) (string, *typev3.TokenBucket) {
	p.t.Helper()
	a := await.Recv(p.t, what, p.answers)
	if a == nil {
		p.t.Fatalf("%s: the probe's stream ended", what)
	}
	return a.GetBucketId().GetBucket()["name"], a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
}

// The server keeps its state in PostgreSQL, is killed and restarted: the
// replicas hold the global limit within the bound throughout, and the new
// server continues the division where the old one left it, answering a
// client's report with its grant at once. A server with state in memory
// would hold every grant back for TTL + guard (32 s here): the probe's
// report of the divided bucket would go unanswered, and the answer to its
// report of an undivided one, sent after it, would come first.
func TestServerRestartPostgres(t *testing.T) {
	db := pgtest.NewMigrated(t)
	// A TTL of 30 s: the probe's grant outlives any restart on a loaded
	// machine; a held server would answer it only after 32 s.
	rules := strings.Replace(serverRules, "ttl: 3s", "ttl: 30s", 1)
	e := newE2E(t, rules, "-rlqs-store", "postgres", "-database-url", db)
	e.phase("steady (state in PostgreSQL)", func(tl *tally) { e.everyone(tl, 40) })

	// The probe joins, under load: the replicas are cut, and it is raised
	// once their cuts are acknowledged (a push on its stream).
	e.phase("a probe joins (state in PostgreSQL)", func(tl *tally) {
		e.everyone(tl, 20)
		p := openProbe(t, e.link.Addr(), "probe")
		p.report("api", 0, 1)
		for {
			name, tb := p.next("the probe's grant")
			if name == "api" && tb != nil {
				break
			}
		}
		p.keepReporting()
		e.everyone(tl, 20)
	})

	e.phase("the server restarted (state in PostgreSQL)", func(tl *tally) {
		e.everyone(tl, 20)
		e.restartServer("server'")
		// The probe reconnects under its identity and reports the
		// divided bucket, then one no rule matches (DENY_ALL at once).
		p := openProbe(t, e.link.Addr(), "probe")
		p.report("api", 5, 0)
		p.report("other", 0, 1)
		name, tb := p.next("the restarted server's first answer")
		if name != "api" || tb == nil {
			t.Errorf("the restarted server's first answer is for bucket %q, token bucket %v: want the probe's grant on bucket api, at once", name, tb)
		}
		p.keepReporting()
		e.everyone(tl, 20)
	})
}
