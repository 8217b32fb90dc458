// Command report reads run.sh's results (one line per phase and round:
// name, round, rate, p50 ms, p99 ms, server CPU µs per request, backend CPU
// µs per request, failures; tab-separated) and prints the markdown table of
// medians over the rounds, then the targets of issue 24 and of the proxy in
// front of a fast upstream (the proxies set the rate) as ratios taken within
// each round (median, and the rounds' range).
package main

import (
	"bufio"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
)

type row struct {
	rate, p50, p99, cpu, backend float64
	failed                       int
}

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: report results.tsv")
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	var order []string
	byName := map[string]map[int]row{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		c := strings.Split(sc.Text(), "\t")
		if len(c) != 8 {
			continue
		}
		num := func(i int) float64 { v, _ := strconv.ParseFloat(c[i], 64); return v }
		round, _ := strconv.Atoi(c[1])
		failed, _ := strconv.Atoi(c[7])
		if byName[c[0]] == nil {
			byName[c[0]] = map[int]row{}
			order = append(order, c[0])
		}
		byName[c[0]][round] = row{num(2), num(3), num(4), num(5), num(6), failed}
	}
	if err := sc.Err(); err != nil {
		log.Fatal(err)
	}

	fmt.Println("| phase | req/s or calls/s (median; range) | p50 ms | p99 ms | p99/p50 | server CPU µs/req | upstream or store CPU µs/req | failed |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, name := range order {
		rs := byName[name]
		col := func(get func(row) float64) []float64 {
			var v []float64
			for _, r := range rs {
				v = append(v, get(r))
			}
			return v
		}
		rates := col(func(r row) float64 { return r.rate })
		failed := 0
		for _, r := range rs {
			failed += r.failed
		}
		backend := "—"
		if b := median(col(func(r row) float64 { return r.backend })); b > 0 {
			backend = fmt.Sprintf("%.1f", b)
		}
		fmt.Printf("| %s | %s (%s–%s) | %.2f | %.2f | %.1f | %.1f | %s | %d |\n", name, thousands(median(rates)),
			thousands(slices.Min(rates)), thousands(slices.Max(rates)),
			median(col(func(r row) float64 { return r.p50 })), median(col(func(r row) float64 { return r.p99 })),
			median(col(func(r row) float64 { return r.p99 / r.p50 })),
			median(col(func(r row) float64 { return r.cpu })), backend, failed)
	}

	// ratio is a over b, round by round.
	ratio := func(a, b string, get func(row) float64) []float64 {
		var v []float64
		for round, ra := range byName[a] {
			if rb, ok := byName[b][round]; ok && get(rb) != 0 {
				v = append(v, get(ra)/get(rb))
			}
		}
		return v
	}
	// each is get of a's rounds.
	each := func(a string, get func(row) float64) []float64 {
		var v []float64
		for _, r := range byName[a] {
			v = append(v, get(r))
		}
		return v
	}
	rate := func(r row) float64 { return r.rate }
	backend := func(r row) float64 { return r.backend }
	fmt.Println()
	fmt.Println("| target | measured: median of the rounds' ratios (range) | |")
	fmt.Println("|---|---:|---|")
	target := func(what string, v []float64, ok func(float64) bool) {
		if len(v) == 0 {
			fmt.Printf("| %s | not measured | |\n", what)
			return
		}
		m := median(v)
		verdict := "**missed**"
		if ok(m) {
			verdict = "met"
		}
		fmt.Printf("| %s | %.2f (%.2f–%.2f) | %s |\n", what, m, slices.Min(v), slices.Max(v), verdict)
	}
	atLeast := func(x float64) func(float64) bool { return func(m float64) bool { return m >= x } }
	atMost := func(x float64) func(float64) bool { return func(m float64) bool { return m <= x } }
	target("proxy req/s ≥ 0.5× nginx limit_req, 64 connections", ratio("proxy rl c64", "proxy nginx c64", rate), atLeast(0.5))
	target("proxy req/s ≥ 0.5× nginx limit_req, 8 connections", ratio("proxy rl c8", "proxy nginx c8", rate), atLeast(0.5))
	target("upstream CPU/req behind rl ≤ 1.2× behind nginx, 64 connections", ratio("proxy rl c64", "proxy nginx c64", backend), atMost(1.2))
	target("upstream CPU/req behind rl ≤ 1.2× behind nginx, 8 connections", ratio("proxy rl c8", "proxy nginx c8", backend), atMost(1.2))
	cpu := func(r row) float64 { return r.cpu }
	target("fast upstream: proxy req/s ≥ 0.6× nginx limit_req, 64 connections", ratio("fast proxy rl c64", "fast proxy nginx c64", rate), atLeast(0.6))
	target("fast upstream: proxy req/s ≥ 0.6× nginx limit_req, 8 connections", ratio("fast proxy rl c8", "fast proxy nginx c8", rate), atLeast(0.6))
	target("fast upstream: proxy CPU/req ≤ 1.7× nginx's, 64 connections", ratio("fast proxy rl c64", "fast proxy nginx c64", cpu), atMost(1.7))
	target("fast upstream: proxy CPU/req ≤ 1.7× nginx's, 8 connections", ratio("fast proxy rl c8", "fast proxy nginx c8", cpu), atMost(1.7))
	target("proxy p99 ≤ 5× p50, 64 connections", each("proxy rl c64", func(r row) float64 { return r.p99 / r.p50 }), atMost(5))
	target("decision API p99 ≤ 5× p50, 64 connections", each("api rl c64", func(r row) float64 { return r.p99 / r.p50 }), atMost(5))
	target("gRPC, memory: 64 connections ≥ 0.8× 1 connection", ratio("grpc rl-memory conns64", "grpc rl-memory conns1", rate), atLeast(0.8))
	target("gRPC, PostgreSQL ≥ 1.0× envoyproxy/ratelimit + Redis, 64 callers on 1 connection", ratio("grpc rl-postgres conns1", "grpc erl-redis conns1", rate), atLeast(1))
	target("gRPC, PostgreSQL ≥ 1.0× envoyproxy/ratelimit + Redis, 64 callers on 64 connections", ratio("grpc rl-postgres conns64", "grpc erl-redis conns64", rate), atLeast(1))
	target("the same, -pg-decide go, 64 callers on 1 connection", ratio("grpc rl-postgres-go conns1", "grpc erl-redis conns1", rate), atLeast(1))
	target("the same, -pg-decide go, 64 callers on 64 connections", ratio("grpc rl-postgres-go conns64", "grpc erl-redis conns64", rate), atLeast(1))
	fmt.Println()
	fmt.Println("References: a bare net/http handler (the upstream alone) at 64 connections has p99/p50",
		fmtRange(each("upstream alone c64", func(r row) float64 { return r.p99 / r.p50 })), "(the floor of a Go server's tail under this load);",
		"the upstream's CPU per request behind nginx at 4 and 2 connections is",
		fmtRange(each("proxy nginx c4", backend)), "µs and", fmtRange(each("proxy nginx c2", backend)), "µs, at",
		rateRange(each("proxy nginx c4", rate)), "and", rateRange(each("proxy nginx c2", rate)), "req/s (its cost per request grows as its rate falls).")
	fmt.Println()
	fmt.Println("Also: nginx / rl-wasm-host proxy CPU per request,",
		fmtRange(ratio("proxy nginx c64", "proxy rl c64", cpu)), "at 64 connections,",
		fmtRange(ratio("fast proxy nginx c64", "fast proxy rl c64", cpu)), "in front of the fast upstream;",
		"the fast upstream alone at 64 connections,", rateRange(each("fast upstream alone c64", rate)), "req/s at",
		fmtRange(each("fast upstream alone c64", cpu)), "µs CPU per request;",
		"envoyproxy/ratelimit on 64 connections / on 1,", fmtRange(ratio("grpc erl-redis conns64", "grpc erl-redis conns1", rate))+".")
}

func fmtRange(v []float64) string {
	if len(v) == 0 {
		return "not measured"
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", median(v), slices.Min(v), slices.Max(v))
}

func rateRange(v []float64) string {
	if len(v) == 0 {
		return "not measured"
	}
	return fmt.Sprintf("%s (%s–%s)", thousands(median(v)), thousands(slices.Min(v)), thousands(slices.Max(v)))
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// thousands formats v rounded, with commas.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
