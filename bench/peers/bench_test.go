package peers

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAllow runs one call of Allow per op on every peer, at a limit of
// 1e9 per second so every call takes the admission path:
//
//	BenchmarkAllow/peer=NAME/keys=1/serial
//	BenchmarkAllow/peer=NAME/keys=1/parallel      (b.RunParallel)
//	BenchmarkAllow/peer=NAME/keys=10000/serial
//	BenchmarkAllow/peer=NAME/keys=10000/parallel
//
// The admit/op metric is the fraction admitted (1 expected everywhere);
// err/op is the fraction of calls that returned an error (counted, not
// fatal: throttled gives up after 10 failed compare-and-swaps on a hot key).
func BenchmarkAllow(b *testing.B) {
	for _, p := range All {
		for _, n := range []int{1, 10_000} {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "user:" + strconv.Itoa(i)
			}
			name := "peer=" + p.Name + "/keys=" + strconv.Itoa(n)
			b.Run(name+"/serial", func(b *testing.B) { benchSerial(b, p, keys) })
			b.Run(name+"/parallel", func(b *testing.B) { benchParallel(b, p, keys) })
		}
	}
}

const (
	benchLimit  = 1_000_000_000
	benchWindow = time.Second
)

// benchParams returns the limit and window a peer is benchmarked with: 1e9
// per second, except where a peer cannot stay on the admission path with it.
//
// go-limiter refills floor(ticks × Interval/Tokens) tokens after each
// elapsed Interval (memorystore.availableTokens), which for Tokens = 1e9,
// Interval = 1s is one token per second: after its first second a bucket
// denies nearly everything (admit/op fell to 0.7–0.9 in 1s runs). The same
// average rate as 3.6e12 per hour keeps every call within the first interval.
func benchParams(p Peer) (int64, time.Duration) {
	if p.Name == "go-limiter" {
		return benchLimit * 3600, time.Hour
	}
	return benchLimit, benchWindow
}

func newWarm(b *testing.B, p Peer, keys []string) Limiter {
	limit, window := benchParams(p)
	l, err := p.New(limit, window)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	ctx := context.Background()
	for _, k := range keys {
		if _, err := l.Allow(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
	return l
}

func benchSerial(b *testing.B, p Peer, keys []string) {
	l := newWarm(b, p, keys)
	ctx := context.Background()
	admitted, errs, i := 0, 0, 0
	b.ReportAllocs()
	for b.Loop() {
		ok, err := l.Allow(ctx, keys[i])
		if err != nil {
			errs++
		}
		if ok {
			admitted++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	b.ReportMetric(float64(admitted)/float64(b.N), "admit/op")
	b.ReportMetric(float64(errs)/float64(b.N), "err/op")
}

func benchParallel(b *testing.B, p Peer, keys []string) {
	l := newWarm(b, p, keys)
	ctx := context.Background()
	var admitted, errs, calls, worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(worker.Add(1)*7919) % len(keys) // each goroutine from its own offset
		n, a, e := int64(0), int64(0), int64(0)
		for pb.Next() {
			ok, err := l.Allow(ctx, keys[i])
			if err != nil {
				e++
			}
			if ok {
				a++
			}
			n++
			if i++; i == len(keys) {
				i = 0
			}
		}
		admitted.Add(a)
		errs.Add(e)
		calls.Add(n)
	})
	if n := calls.Load(); n > 0 {
		b.ReportMetric(float64(admitted.Load())/float64(n), "admit/op")
		b.ReportMetric(float64(errs.Load())/float64(n), "err/op")
	}
}
