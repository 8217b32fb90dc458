// Command overadmit measures over-admission under a burst: for every peer,
// many trials of G goroutines × C calls released at once on a fresh key of a
// limiter admitting L per (long) window. An exact limiter admits exactly L
// every trial (when G×C ≥ L). It prints a markdown table.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlcore/rl/bench/peers"
	"github.com/rlcore/rl/core"
)

func main() {
	trials := flag.Int("trials", 200, "trials per peer")
	goroutines := flag.Int("goroutines", 32, "goroutines per trial")
	calls := flag.Int("calls", 10, "calls per goroutine")
	limit := flag.Int64("limit", 100, "limit per window")
	window := flag.Duration("window", time.Hour, "window (long, so nothing refills during a trial)")
	only := flag.String("peers", "", "comma-separated peer names (default: all, plus rl with every algorithm)")
	flag.Parse()

	list := append([]peers.Peer(nil), peers.All...)
	for _, a := range core.Algorithms() {
		list = append(list, peers.RLAlgorithm(a))
	}
	if *only != "" {
		want := map[string]bool{}
		for _, n := range strings.Split(*only, ",") {
			want[n] = true
		}
		var sel []peers.Peer
		for _, p := range list {
			if want[p.Name] {
				sel = append(sel, p)
			}
		}
		list = sel
	}

	fmt.Printf("Over-admission: limit %d per %s, %d goroutines × %d calls released at once on a fresh key, %d trials, GOMAXPROCS=%d.\n\n",
		*limit, *window, *goroutines, *calls, *trials, runtime.GOMAXPROCS(0))
	fmt.Println("| peer | trials | min admitted | max admitted | trials over limit | trials under limit | errors |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	failed := false
	for _, p := range list {
		r, err := run(p, *trials, *goroutines, *calls, *limit, *window)
		if err != nil {
			fmt.Printf("| %s | — | — | — | — | — | could not run: %v |\n", p.Name, err)
			failed = true
			continue
		}
		fmt.Printf("| %s | %d | %d | %d | %d | %d | %d |\n", p.Name, r.trials, r.min, r.max, r.over, r.under, r.errs)
	}
	for _, u := range peers.Unavailable {
		fmt.Printf("| %s | — | — | — | — | — | not run: %s |\n", u.Name, u.Reason)
	}
	if failed {
		os.Exit(1)
	}
}

type result struct {
	trials, over, under int
	min, max, errs      int64
}

func run(p peers.Peer, trials, goroutines, calls int, limit int64, window time.Duration) (result, error) {
	l, err := p.New(limit, window)
	if err != nil {
		return result{}, err
	}
	defer l.Close()
	ctx := context.Background()
	r := result{trials: trials, min: -1}
	for t := range trials {
		key := "trial:" + strconv.Itoa(t)
		var admitted, errs atomic.Int64
		var ready, done sync.WaitGroup
		start := make(chan struct{})
		for range goroutines {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				ready.Done()
				<-start
				for range calls {
					ok, err := l.Allow(ctx, key)
					if err != nil {
						errs.Add(1)
					} else if ok {
						admitted.Add(1)
					}
				}
			}()
		}
		ready.Wait()
		close(start)
		done.Wait()
		a := admitted.Load()
		if r.min < 0 || a < r.min {
			r.min = a
		}
		r.max = max(r.max, a)
		want := min(limit, int64(goroutines*calls))
		if a > want {
			r.over++
		} else if a < want {
			r.under++
		}
		r.errs += errs.Load()
	}
	return r, nil
}
