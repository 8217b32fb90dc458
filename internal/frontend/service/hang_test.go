package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/request/outage"
	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/internal/testkit/pgtest"
)

// hangProxy forwards TCP to a target and can freeze: bytes stop flowing
// both ways and new connections wait, without any connection being closed,
// as with a database that hangs or a network that drops packets silently.
type hangProxy struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newHangProxy(t *testing.T, target string) *hangProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &hangProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.frozen.Store(false)
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

func (p *hangProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *hangProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		go func() {
			for p.frozen.Load() {
				time.Sleep(5 * time.Millisecond)
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				return
			}
			p.track(u)
			go p.pipe(u, c)
			p.pipe(c, u)
		}()
	}
}

func (p *hangProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for p.frozen.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// A database that hangs (no error, no answer) costs each request at most
// -store-timeout, then the rule's fail policy answers; when it answers
// again, decisions resume.
//
// Nothing here depends on how fast the machine is: the healthy phase
// decides through a store with generous timeouts, and the short timeout is
// only ever met while the database cannot answer, so that it must fire.
// Every answer of the hang comes while the proxy is still frozen (it thaws
// only once all have come): only the store's timeouts can have ended those
// calls, and a call that stalled would never end.
func TestPostgresHang(t *testing.T) {
	dbURL := pgtest.NewMigrated(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	hp := newHangProxy(t, u.Host)
	u.Host = hp.ln.Addr().String()
	pool, err := pgxpool.New(context.Background(), u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	cfg, err := ParseConfig("hang.yaml", "yaml", []byte(`
rules:
  - {name: open, strategy: token, limit: 1000000, window: 1s, fail_open: true}
  - {name: closed, strategy: token, limit: 1000000, window: 1s}
`))
	require.NoError(t, err)
	// Two stores on one pool through the proxy: the healthy phase's, with
	// the default timeouts (a minute), and the one under test.
	warm, _ := openPGStore(t, pgStoreConfig{URL: u.String(), Pool: pool})
	const timeout = 300 * time.Millisecond
	st, ready := openPGStore(t, pgStoreConfig{URL: u.String(), Pool: pool, Timeout: timeout, QueueTimeout: timeout})
	ws, err := New(cfg, Options{Store: warm, Logger: quietLogger()})
	require.NoError(t, err)
	we := &env{svc: ws, srv: newServer(t, ws)}
	for i := range 10 {
		require.Equal(t, 200, we.post(t, "check", fmt.Sprintf(`{"rule":"closed","key":"w%d"}`, i)).code)
	}
	s, err := New(cfg, Options{Store: st, Ready: ready, Logger: quietLogger()})
	require.NoError(t, err)
	e := &env{svc: s, srv: newServer(t, s)}

	hp.frozen.Store(true)
	var wg sync.WaitGroup
	var mu sync.Mutex
	slowest := time.Duration(0)
	codes := map[string]int{}
	for w := range 8 {
		wg.Go(func() {
			rule := []string{"open", "closed"}[w%2]
			for i := range 4 {
				start := time.Now()
				code := tryCheck(e.srv.URL, fmt.Sprintf(`{"rule":%q,"key":"h%d-%d"}`, rule, w, i))
				d := time.Since(start)
				mu.Lock()
				codes[rule+" "+code]++
				slowest = max(slowest, d)
				mu.Unlock()
			}
		})
	}
	answered := make(chan struct{})
	go func() { wg.Wait(); close(answered) }()
	await.Done(t, "every request to be answered while the database hangs (a stall: a call the store's timeouts did not end)", answered)
	require.True(t, hp.frozen.Load(), "still frozen: the answers came without the database")
	t.Logf("while the database hangs: %v, slowest answer %s (timeout %s)", codes, slowest.Round(time.Millisecond), timeout)
	// The first timeouts may come before the store counts as down
	// (outage.Timeouts with no decision completing): those are refused,
	// never admitted.
	require.Equal(t, 16, codes["closed 503"])
	require.Equal(t, 16, codes["open 200 fail_open"]+codes["open 503"], "%v", codes)
	require.Less(t, codes["open 503"], outage.Timeouts, "%v", codes)

	hp.frozen.Store(false)
	await.Until(t, "a decision on PostgreSQL once it answers again", func() bool {
		return e.post(t, "check", `{"rule":"closed","key":"probe"}`).code == 200
	})
}

// tryCheck posts a check and sorts the answer: "200", "200 fail_open",
// "503", ..., or "error"; it is safe off the test's goroutine.
func tryCheck(base, body string) string {
	resp, err := http.Post(base+APIPrefix+"check", "application/json", strings.NewReader(body))
	if err != nil {
		return "error"
	}
	defer resp.Body.Close()
	code := fmt.Sprint(resp.StatusCode)
	var d DecisionJSON
	if json.NewDecoder(resp.Body).Decode(&d) == nil && resp.StatusCode == 200 && d.FailOpen {
		code += " fail_open"
	}
	return code
}
