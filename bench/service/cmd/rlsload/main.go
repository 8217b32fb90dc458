// Command rlsload drives an Envoy rate limit service (ShouldRateLimit) as
// Envoy's rate limit filter does: a number of concurrent callers spread
// over a number of gRPC connections, one descriptor of one entry per call,
// keys round robin. It prints one line: calls/s, p50 and p99 latency in
// µs, and the calls that failed (a gRPC error or OVER_LIMIT: the
// benchmark's limits admit everything).
//
// The same program drives rl-wasm-host (envoy.service.ratelimit.v3) and
// envoyproxy/ratelimit v1.4.0, which serves the same messages on the v2
// method path (-api v2).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18083", "the rate limit service's gRPC address")
	api := flag.String("api", "v3", "method path: v3 (envoy.service.ratelimit.v3) or v2 (envoy.service.ratelimit.v2, envoyproxy/ratelimit v1.4.0)")
	conns := flag.Int("conns", 1, "gRPC connections; callers are spread over them round robin")
	callers := flag.Int("callers", 64, "concurrent callers")
	dur := flag.Duration("d", 5*time.Second, "measured duration")
	warm := flag.Duration("warmup", time.Second, "unmeasured run before, which also creates the keys")
	keys := flag.Int("keys", 1000, "distinct descriptor values")
	domain := flag.String("domain", "bench", "the request's domain")
	key := flag.String("key", "user", "the descriptor entry's key")
	flag.Parse()
	if *conns < 1 || *callers < 1 || *keys < 1 {
		log.Fatal("rlsload: -conns, -callers and -keys must be at least 1")
	}
	method := "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	switch *api {
	case "v3":
	case "v2":
		method = "/envoy.service.ratelimit.v2.RateLimitService/ShouldRateLimit"
	default:
		log.Fatalf("rlsload: -api %q: want v2 or v3", *api)
	}
	cc := make([]*grpc.ClientConn, *conns)
	for i := range cc {
		c, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			log.Fatal(err)
		}
		c.Connect()
		cc[i] = c
		defer c.Close()
	}
	reqs := make([]*rlsv3.RateLimitRequest, *keys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: *key, Value: fmt.Sprintf("user-%d", i)}}}}}
	}
	call := func(c *grpc.ClientConn, i int) error {
		var resp rlsv3.RateLimitResponse
		if err := c.Invoke(context.Background(), method, reqs[i%len(reqs)], &resp); err != nil {
			return err
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			return fmt.Errorf("overall code %v", resp.OverallCode)
		}
		return nil
	}
	run := func(d time.Duration, lat [][]int32) (calls, failed int64, elapsed time.Duration) {
		var n, bad atomic.Int64
		var logged atomic.Bool
		start := time.Now()
		deadline := start.Add(d)
		var wg sync.WaitGroup
		for g := range *callers {
			wg.Go(func() {
				c := cc[g%len(cc)]
				for i := g; ; i += *callers {
					t0 := time.Now()
					if !t0.Before(deadline) {
						return
					}
					err := call(c, i)
					if lat != nil {
						lat[g] = append(lat[g], int32(time.Since(t0).Microseconds()))
					}
					if err != nil {
						bad.Add(1)
						if logged.CompareAndSwap(false, true) {
							fmt.Fprintln(os.Stderr, "rlsload: first failure:", err)
						}
						continue
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		return n.Load(), bad.Load(), time.Since(start)
	}
	if *warm > 0 {
		run(*warm, nil)
	}
	lat := make([][]int32, *callers)
	n, bad, el := run(*dur, lat)
	all := slices.Concat(lat...)
	slices.Sort(all)
	q := func(p float64) int32 {
		if len(all) == 0 {
			return 0
		}
		return all[int(p*float64(len(all)-1))]
	}
	fmt.Printf("calls_per_s=%.0f p50_us=%d p99_us=%d calls=%d failed=%d\n", float64(n)/el.Seconds(), q(0.50), q(0.99), n, bad)
}
