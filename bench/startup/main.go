// Command startup measures how long rl-wasm-host takes to serve: the wall
// time from exec to the first successful answer on the proxy's listener
// (GET / through the built-in demo upstream: 200) and on the decision API's
// (POST /v1/ratelimit/check of a rule: 200), and, when the WebAssembly
// decider hands over from the native core, to its log line. Each run starts
// the binary afresh with its own HOME and temporary directory, as in a fresh
// container; flags after -- go to rl-wasm-host.
//
//	go build -o /tmp/rl-wasm-host ./cmd/rl-wasm-host
//	/work/shared/bin/quiet go run ./bench/startup -bin /tmp/rl-wasm-host -runs 10
//	go run ./bench/startup -bin /tmp/rl-wasm-host -runs 5 -- -decider native
//
// It polls each listener every millisecond, so a figure is late by at most
// that much plus one request. Run it alone (through a quiet-machine lock on a
// shared host): compilation competes for the same cores.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// config is the rules file of every run: the demo upstream and one rule
// for the decision API.
const config = `upstream: demo
rules:
  - {name: login, strategy: gcra, limit: 1000000, window: 1s}
  - {name: all, endpoint: /, key_by: ip, strategy: token, limit: 1000000, window: 1s}
`

func main() {
	bin := flag.String("bin", "", "the rl-wasm-host binary (required)")
	runs := flag.Int("runs", 5, "starts to measure")
	timeout := flag.Duration("timeout", 30*time.Second, "give up on a start after this long")
	keepHome := flag.Bool("keep-home", false, "share one HOME between the runs (a warm cache under it survives), instead of a fresh one each")
	flag.Parse()
	if *bin == "" || *runs < 1 {
		fmt.Fprintln(os.Stderr, "startup: want -bin PATH and -runs >= 1")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "rl-startup-")
	check(err)
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "rules.yaml")
	check(os.WriteFile(cfg, []byte(config), 0o600))

	var proxy, api, handover []time.Duration
	fmt.Printf("args: %s\n", strings.Join(flag.Args(), " "))
	fmt.Printf("%-4s %10s %10s %12s\n", "run", "proxy", "api", "wasm decides")
	for i := range *runs {
		home := filepath.Join(dir, "home")
		if !*keepHome {
			home = filepath.Join(dir, fmt.Sprintf("home%d", i))
		}
		check(os.MkdirAll(filepath.Join(home, "tmp"), 0o700))
		r, err := measure(*bin, cfg, home, flag.Args(), *timeout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "startup:", err)
			os.Exit(1)
		}
		proxy, api = append(proxy, r.proxy), append(api, r.api)
		h := "-"
		if r.handover > 0 {
			handover = append(handover, r.handover)
			h = ms(r.handover)
		}
		fmt.Printf("%-4d %10s %10s %12s\n", i+1, ms(r.proxy), ms(r.api), h)
	}
	fmt.Printf("%-4s %10s %10s %12s\n", "med", ms(median(proxy)), ms(median(api)), ms(median(handover)))
	fmt.Printf("%-4s %10s %10s %12s\n", "max", ms(slices.Max(proxy)), ms(slices.Max(api)), ms(maxOr0(handover)))
}

// result is one start's figures, from exec.
type result struct {
	proxy, api, handover time.Duration
}

// measure starts bin once and times its first answers.
func measure(bin, cfg, home string, args []string, timeout time.Duration) (result, error) {
	proxyAddr, apiAddr := freeAddr(), freeAddr()
	argv := append([]string{"-config", cfg, "-listen", proxyAddr, "-api-listen", apiAddr}, args...)
	cmd := exec.Command(bin, argv...)
	cmd.Env = append(os.Environ(), "HOME="+home, "TMPDIR="+filepath.Join(home, "tmp"), "XDG_CACHE_HOME=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()

	var r result
	var wg sync.WaitGroup
	handoff := make(chan bool, 1) // whether the native core stands in while the module compiles
	handover := make(chan time.Duration, 1)
	var logTail lockedBuffer
	go func() { // the log: the handover line, and the tail for errors
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Bytes()
			logTail.add(line)
			var rec struct{ Msg string }
			if json.Unmarshal(line, &rec) != nil {
				continue
			}
			switch {
			case strings.Contains(rec.Msg, "takes over from the native core"):
				handover <- time.Since(start)
			case strings.HasPrefix(rec.Msg, "decider:"): // logged before the listeners bind
				handoff <- strings.Contains(rec.Msg, "while the WebAssembly module compiles")
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	var perr, aerr error
	wg.Go(func() {
		r.proxy, perr = firstOK(ctx, start, func() (*http.Request, error) {
			return http.NewRequest(http.MethodGet, "http://"+proxyAddr+"/", nil)
		})
	})
	wg.Go(func() {
		r.api, aerr = firstOK(ctx, start, func() (*http.Request, error) {
			return http.NewRequest(http.MethodPost, "http://"+apiAddr+"/v1/ratelimit/check", strings.NewReader(`{"rule":"login","key":"k"}`))
		})
	})
	wg.Wait()
	if err := errors.Join(perr, aerr); err != nil {
		return r, fmt.Errorf("%w; log:\n%s", err, logTail.String())
	}
	select {
	case h := <-handoff:
		if !h { // a decider that does not hand over: native, or compiled before serving
			return r, nil
		}
	case <-ctx.Done():
		return r, fmt.Errorf("no decider line in the log:\n%s", logTail.String())
	}
	select {
	case r.handover = <-handover:
	case <-ctx.Done():
		return r, fmt.Errorf("the WebAssembly core did not take over:\n%s", logTail.String())
	}
	return r, nil
}

// firstOK sends the request every millisecond until one is answered 200,
// and returns the time since start.
func firstOK(ctx context.Context, start time.Time, req func() (*http.Request, error)) (time.Duration, error) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	var last string
	for ctx.Err() == nil {
		rq, err := req()
		if err != nil {
			return 0, err
		}
		resp, err := client.Do(rq.WithContext(ctx))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start), nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(time.Millisecond)
	}
	rq, _ := req()
	return 0, fmt.Errorf("%s %s: no 200 before the timeout (last: %s)", rq.Method, rq.URL, last)
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer ln.Close()
	return ln.Addr().String()
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func maxOr0(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "startup:", err)
		os.Exit(1)
	}
}

// lockedBuffer keeps the first 64 KiB of the log, written by one goroutine
// and read by another.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) add(line []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() < 1<<16 {
		b.buf.Write(line)
		b.buf.WriteByte('\n')
	}
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
