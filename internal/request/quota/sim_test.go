package quota

// A deterministic simulator of N clients enforcing the grants of one
// Bucket the way Envoy's rate_limit_quota filter does, on a virtual clock,
// compared with one ideal token bucket and with a report-then-correct design.
// TestSimulation runs every scenario and asserts the acceptance criteria;
// `go test ./internal/request/quota -run TestSimulation -v` prints the table.

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strings"
)

// simParams describe one run.
type simParams struct {
	scenario string
	n        int
	report   int64 // report interval, µs
	design   string
}

// simResult is what a run measured.
type simResult struct {
	simParams
	admitted, ideal  int64   // totals
	overshoot        int64   // largest admitted(60 s) − (60·L + B), ≥ 0
	overshootSteady  int64   // the same over windows with no change of any grant
	utilisation      float64 // admitted / (L × time) over settled saturated seconds
	utilisationAll   float64 // the same over every saturated second
	converge         int64   // longest time from an event to fair shares, µs (-1: never)
	settle           int64   // longest time from an event to fair shares kept until the next event, µs (-1: never)
	changes          int64   // grants changed (fresh token buckets)
	maxCommitOverRun bool    // Σ commitments ever exceeded the limit
	boundBroken      int     // windows where admitted > 60·L + B − reserve + ε
	epsMax           int64   // the largest ε of a window
}

const (
	simDuration = 360 * Second
	simStep     = 50_000 // µs
	simRate     = 2000   // tokens per second, the global limit
	simBurst    = 2000
	simDelay    = 20_000 // one-way message delay, µs
)

// event kinds
const (
	evReport   = iota // client's report timer
	evToServer        // a report arrives at the server
	evToClient        // an action arrives at a client
	evTick            // the server's periodic step
)

type simEvent struct {
	at, seq int64
	kind    int
	client  int
	stream  string
	action  Action
	allowed uint64
	denied  uint64
	rseq    uint64
}

type eventQueue []*simEvent

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simClient is one Envoy: a bucket cache entry for the one bucket, its token
// bucket, its usage counters and its stream.
type simClient struct {
	present    bool  // the process runs
	demand     int64 // requests per 1000 s
	acc        int64
	subscribed bool // the bucket exists in Envoy's cache (a request created it)
	stream     string
	streams    int
	rseq       uint64
	has        bool // an unexpired assignment
	grant      Grant
	expires    int64
	level      int64 // tokens × FillInterval(µs)
	last       int64
	allowed    uint64
	denied     uint64
	// local copy of the global bucket, report-then-correct design only
	rtcLevel int64
}

// sim is one run in progress.
type sim struct {
	p       simParams
	lim     Limit
	cfg     Config
	b       *Bucket
	epoch   int
	q       eventQueue
	seq     int64
	clients []*simClient
	rng     *rand.Rand
	changes int64
	fresh   int64 // tokens of fresh token buckets handed out so far
	overrun bool
	// report-then-correct: the server's global bucket, scaled like a client's
	rtcGlobal, rtcLast int64
}

func (s *sim) push(e *simEvent) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

func newSim(p simParams) *sim {
	lim := Limit{Fill: simRate * 60, FillInterval: 60 * Second, Burst: simBurst}
	s := &sim{p: p, lim: lim, rng: rand.New(rand.NewPCG(uint64(p.n), uint64(p.report)))}
	s.cfg = Config{ReportInterval: p.report}
	s.restartServer(0, false)
	s.rtcGlobal = lim.Burst * lim.FillInterval
	for i := 0; i < p.n; i++ {
		c := &simClient{present: true}
		c.rtcLevel = s.rtcGlobal
		s.clients = append(s.clients, c)
		// Envoy's report timer runs from its start, at its own phase.
		s.push(&simEvent{at: s.rng.Int64N(p.report), kind: evReport, client: i})
	}
	s.push(&simEvent{at: Second, kind: evTick})
	return s
}

// restartServer starts a server with empty state; a restarted one holds
// grants back until its predecessor's may have expired.
func (s *sim) restartServer(now int64, hold bool) {
	cfg := s.cfg
	if hold {
		d := cfg.WithDefaults()
		cfg.HoldUntil = now + d.TTL + d.Guard
	}
	b, err := NewBucket(s.lim, cfg)
	if err != nil {
		panic(err)
	}
	s.b = b
	s.epoch++
	for _, c := range s.clients {
		c.stream = "" // Envoy sees the stream close; it reopens at its next report
	}
}

func (s *sim) streamFor(i int) string {
	c := s.clients[i]
	if c.stream == "" {
		c.streams++
		c.stream = fmt.Sprintf("e%d/c%d/s%d", s.epoch, i, c.streams)
	}
	return c.stream
}

// sendReport sends client i's usage since its last report, as Envoy does.
func (s *sim) sendReport(i int, now int64) {
	c := s.clients[i]
	stream := s.streamFor(i)
	c.rseq++
	s.push(&simEvent{at: now + simDelay, kind: evToServer, client: i, stream: stream, allowed: c.allowed, denied: c.denied, rseq: c.rseq})
	c.allowed, c.denied = 0, 0
}

// serve runs one Step and sends its actions.
func (s *sim) serve(now int64) {
	for _, a := range s.b.Step(now) {
		var i int
		var ep int
		fmt.Sscanf(a.Client, "e%d/c%d/", &ep, &i)
		if a.Changed {
			s.changes++
		}
		s.push(&simEvent{at: now + simDelay, kind: evToClient, client: i, stream: a.Client, action: a})
	}
	if c := s.b.Committed(now); c.Fill > s.lim.Fill || c.Tokens > s.lim.Burst {
		s.overrun = true
	}
}

// apply is Envoy receiving an action: the same token bucket is kept (and
// its TTL extended), another one replaces it, full.
func (s *sim) apply(i int, a Action, now int64) {
	c := s.clients[i]
	if !c.present || !c.subscribed {
		return
	}
	if a.Kind == Abandon {
		c.subscribed, c.has = false, false
		return
	}
	if a.Grant.IsZero() {
		c.has = false // a blanket deny: what the expired state does too
		return
	}
	if !c.has || now >= c.expires || c.grant != a.Grant {
		s.fresh += a.Grant.Tokens
		c.grant = a.Grant
		c.level = a.Grant.Tokens * s.lim.FillInterval
		c.last = now
	}
	c.has = true
	c.expires = now + a.TTL
}

// take is one request at client i.
func (s *sim) take(i int, now int64) bool {
	c := s.clients[i]
	if !c.subscribed {
		// The first request creates the bucket (denied: no assignment yet)
		// and sends a report at once.
		c.subscribed = true
		c.denied++
		s.sendReport(i, now)
		return false
	}
	if c.has && now >= c.expires {
		c.has = false // expired, and no fallback: deny all
	}
	if !c.has {
		c.denied++
		return false
	}
	c.level = min(c.grant.Tokens*s.lim.FillInterval, c.level+(now-c.last)*c.grant.Fill)
	c.last = now
	if c.level >= s.lim.FillInterval {
		c.level -= s.lim.FillInterval
		c.allowed++
		return true
	}
	c.denied++
	return false
}

// takeRTC is one request under report-then-correct: each client spends its
// copy of the global bucket (refilled locally with 1/N of the rate),
// replaced by the server's level when it answers a report; the server
// subtracts what was reported, after the fact.
func (s *sim) takeRTC(i int, now int64) bool {
	c := s.clients[i]
	if c.last == 0 {
		c.last = now
	}
	c.rtcLevel = min(s.lim.Burst*s.lim.FillInterval, c.rtcLevel+(now-c.last)*s.lim.Fill/int64(s.p.n))
	c.last = now
	if c.rtcLevel >= s.lim.FillInterval {
		c.rtcLevel -= s.lim.FillInterval
		c.allowed++
		return true
	}
	return false
}

// runSim runs one scenario and measures it.
func runSim(p simParams) simResult {
	s := newSim(p)
	sc := scenarios[p.scenario]
	steps := simDuration / simStep
	admitted := make([]int64, steps)
	demanded := make([]int64, steps)
	idealLevel, idealLast := s.lim.Burst*s.lim.FillInterval, int64(0)
	var idealTotal int64
	var events []int64 // times of disruptions
	changedAt := make([]bool, steps)
	freshAt := make([]int64, steps) // fresh tokens delivered in the step
	var fairChecks []struct {
		at   int64
		fair bool
	}
	order := make([]int, p.n)
	for i := range order {
		order[i] = i
	}
	for k := int64(0); k < steps; k++ {
		now := k * simStep
		for _, ev := range sc(s, now) {
			events = append(events, ev)
		}
		changesBefore, freshBefore := s.changes, s.fresh
		for len(s.q) > 0 && s.q[0].at <= now {
			e := heap.Pop(&s.q).(*simEvent)
			s.handle(e)
		}
		changedAt[k] = s.changes != changesBefore || s.fresh != freshBefore
		freshAt[k] = s.fresh - freshBefore
		// Requests of this step, clients in a shuffled order.
		s.rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		var want int64
		for _, i := range order {
			c := s.clients[i]
			if !c.present {
				continue
			}
			c.acc += c.demand * simStep
			n := c.acc / (1000 * Second)
			c.acc %= 1000 * Second
			want += n
			for range n {
				var ok bool
				if p.design == "rtc" {
					ok = s.takeRTC(i, now)
				} else {
					ok = s.take(i, now)
				}
				if ok {
					admitted[k]++
				}
			}
		}
		demanded[k] = want
		idealLevel = min(s.lim.Burst*s.lim.FillInterval, idealLevel+(now-idealLast)*s.lim.Fill)
		idealLast = now
		got := min(want, idealLevel/s.lim.FillInterval)
		idealLevel -= got * s.lim.FillInterval
		idealTotal += got
		if p.design != "rtc" {
			fairChecks = append(fairChecks, struct {
				at   int64
				fair bool
			}{now, s.fair(now)})
		}
	}
	r := simResult{simParams: p, ideal: idealTotal, changes: s.changes, maxCommitOverRun: s.overrun}
	for _, a := range admitted {
		r.admitted += a
	}
	// Overshoot over every 60 s window.
	w := 60 * Second / simStep
	bound := int64(60*simRate + simBurst)
	var sum, eps int64
	lastChange := int64(-1 << 40)
	for k := int64(0); k < steps; k++ {
		sum += admitted[k]
		eps += freshAt[k]
		if changedAt[k] {
			lastChange = k
		}
		if k >= w {
			sum -= admitted[k-w]
			eps -= freshAt[k-w]
		}
		if k >= w-1 {
			over := max(0, sum-bound)
			// The bound: ε is at most the bursts of the fresh token
			// buckets handed out within the window (a window of
			// simStep granularity, so one step more on either side).
			var margin int64
			for j := max(0, k-w); j <= min(steps-1, k+1); j++ {
				if j == k-w || j == k+1 {
					margin += freshAt[j]
				}
			}
			// With the burst reserve never handed out, the clients'
			// buckets hold at most B − reserve at the window's start.
			tight := bound - simBurst*s.cfg.WithDefaults().BurstReserve/1000
			if sum-tight > eps+margin {
				r.boundBroken++
			}
			r.epsMax = max(r.epsMax, eps)
			r.overshoot = max(r.overshoot, over)
			if lastChange < k-w+1 {
				r.overshootSteady = max(r.overshootSteady, over)
			}
		}
	}
	// Utilisation over saturated seconds, and over those settled: at
	// least the settling time after the last disruption.
	d := s.cfg.WithDefaults()
	settle := 3*p.report + d.TTL + d.Guard
	var satAll, satAllN, sat, satN int64
	for sec := int64(0); sec < simDuration/Second; sec++ {
		var a, dm int64
		for k := sec * Second / simStep; k < (sec+1)*Second/simStep; k++ {
			a += admitted[k]
			dm += demanded[k]
		}
		if dm < simRate || sec < 1 {
			continue
		}
		satAll += a
		satAllN++
		settled := sec*Second >= settle
		for _, ev := range events {
			if sec*Second >= ev && sec*Second < ev+settle {
				settled = false
			}
		}
		if settled {
			sat += a
			satN++
		}
	}
	r.utilisation = ratio(sat, satN*simRate)
	r.utilisationAll = ratio(satAll, satAllN*simRate)
	// Convergence: from each disruption (and the start) to the first
	// second at which every present client holds its fair share.
	r.converge = 0
	for _, ev := range append([]int64{0}, events...) {
		t := int64(-1)
		for _, f := range fairChecks {
			if f.at >= ev && f.fair {
				t = f.at - ev
				break
			}
		}
		if t < 0 {
			r.converge = -1
			break
		}
		r.converge = max(r.converge, t)
	}
	// Settling: from each disruption to the first step from which
	// every client holds its fair share until the next disruption
	// (a share that is fair for a moment and then lapses does not
	// count).
	bounds := append(append([]int64{0}, events...), simDuration)
	for k := 0; k+1 < len(bounds); k++ {
		ev, next := bounds[k], bounds[k+1]
		if ev == next {
			continue // the start, a disruption too
		}
		t := int64(-1)
		for _, f := range fairChecks {
			if f.at < ev || f.at >= next {
				continue
			}
			if !f.fair {
				t = -1
			} else if t < 0 {
				t = f.at - ev
			}
		}
		if t < 0 {
			r.settle = -1
			break
		}
		r.settle = max(r.settle, t)
	}
	return r
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

func (s *sim) handle(e *simEvent) {
	c := s.clients[e.client]
	switch e.kind {
	case evTick:
		if s.p.design != "rtc" {
			s.serve(e.at)
		}
		s.push(&simEvent{at: e.at + Second, kind: evTick})
	case evReport:
		s.push(&simEvent{at: e.at + s.p.report, kind: evReport, client: e.client})
		if !c.present || (!c.subscribed && s.p.design != "rtc") {
			return
		}
		s.sendReport(e.client, e.at)
	case evToServer:
		if s.p.design == "rtc" {
			s.rtcGlobal = min(s.lim.Burst*s.lim.FillInterval, s.rtcGlobal+(e.at-s.rtcLast)*s.lim.Fill)
			s.rtcLast = e.at
			s.rtcGlobal -= int64(e.allowed) * s.lim.FillInterval
			s.push(&simEvent{at: e.at + simDelay, kind: evToClient, client: e.client, stream: e.stream, allowed: uint64(max(0, s.rtcGlobal))})
			return
		}
		if e.stream != c.stream || !strings.HasPrefix(e.stream, fmt.Sprintf("e%d/", s.epoch)) {
			return // sent on a stream that has closed since
		}
		s.b.Report(e.stream, e.rseq, e.allowed, e.denied, e.at)
		s.serve(e.at)
	case evToClient:
		if s.p.design == "rtc" {
			c.rtcLevel = int64(e.allowed)
			c.last = e.at
			return
		}
		if e.stream != c.stream {
			return // the stream closed: the message is lost
		}
		s.apply(e.client, e.action, e.at)
	}
}

// fair reports whether every present client enforces its max-min fair share
// of the limit given the true demands: a client whose demand fits its share
// has at least 95% of its demand, any other at least 90% of its share, each
// less one request per report interval (the resolution of a measurement).
func (s *sim) fair(now int64) bool {
	var idx []int
	var demand []int64
	for i, c := range s.clients {
		if c.present && c.demand > 0 {
			idx = append(idx, i)
			demand = append(demand, c.demand*s.lim.FillInterval/(1000*Second))
		}
	}
	share := waterFill(s.lim.Fill, demand)
	for k, i := range idx {
		c := s.clients[i]
		var have int64
		if c.has && now < c.expires {
			have = c.grant.Fill
		}
		// Demand is measured in whole requests per report: a share is
		// fair within one request per report interval.
		slack := s.lim.FillInterval / s.p.report
		if demand[k] <= share[k] {
			if have*100 < demand[k]*95-slack*100 {
				return false
			}
		} else if have*10 < share[k]*9-slack*10 {
			return false
		}
	}
	return true
}

// A scenario changes the world at now and returns the time when it
// disrupted it (a demand shift, a join, a drop), if it did.
type scenario func(s *sim, now int64) []int64

// skewed sets Zipf-like demands summing to total requests per second,
// rotated by shift places.
func skewed(s *sim, total int64, shift int) {
	n := len(s.clients)
	var h float64
	for i := 1; i <= n; i++ {
		h += 1 / float64(i)
	}
	for i, c := range s.clients {
		rank := (i+shift)%n + 1
		c.demand = int64(float64(total*1000) / (h * float64(rank)))
	}
}

var scenarios = map[string]scenario{
	"steady": func(s *sim, now int64) []int64 {
		if now == 0 {
			skewed(s, 3*simRate/2, 0)
		}
		return nil
	},
	"shifting": func(s *sim, now int64) []int64 {
		n := len(s.clients)
		switch now {
		case 0:
			skewed(s, 3*simRate/2, 0)
		case 60 * Second:
			skewed(s, 3*simRate/2, n/2)
		case 120 * Second:
			skewed(s, 3*simRate/2, n/3)
		case 180 * Second:
			skewed(s, simRate/2, 0)
		case 240 * Second:
			skewed(s, 2*simRate, n-1)
		default:
			return nil
		}
		return []int64{now}
	},
	"join-leave": func(s *sim, now int64) []int64 {
		n := len(s.clients)
		switch now {
		case 0:
			skewed(s, 3*simRate/2, 0)
			for i := n / 2; i < n; i++ {
				s.clients[i].present = false
			}
			return nil
		case 60 * Second:
			for i := n / 2; i < n; i++ {
				s.clients[i].present = true
			}
		case 180 * Second, 240 * Second:
			for i := 0; i < max(1, n/4); i++ {
				c := s.clients[i*2%n]
				if now == 180*Second {
					// The process ends: its stream closes, its grant dies with it.
					*c = simClient{present: false, demand: c.demand, streams: c.streams}
					if st := s.streamOf(i * 2 % n); st != "" {
						s.b.Close(st, now)
					}
				} else {
					c.present = true
				}
			}
		default:
			return nil
		}
		return []int64{now}
	},
	"drops": func(s *sim, now int64) []int64 {
		if now == 0 {
			skewed(s, 3*simRate/2, 0)
		}
		if now == 0 || now%(60*Second) != 0 || now > 240*Second {
			return nil
		}
		n := len(s.clients)
		for k := 0; k < max(1, n/10); k++ {
			i := (k*7 + int(now/Second)) % n
			c := s.clients[i]
			if c.stream != "" {
				s.b.Close(c.stream, now)
				c.stream = ""
			}
		}
		return []int64{now}
	},
	"restart": func(s *sim, now int64) []int64 {
		if now == 0 {
			skewed(s, 3*simRate/2, 0)
		}
		if now != 120*Second {
			return nil
		}
		if s.p.design != "rtc" {
			s.restartServer(now, true)
		}
		return []int64{now}
	},
}

// streamOf is the stream client i last used (a closed process forgets it).
func (s *sim) streamOf(i int) string {
	return fmt.Sprintf("e%d/c%d/s%d", s.epoch, i, s.clients[i].streams)
}

var scenarioOrder = []string{"steady", "shifting", "join-leave", "drops", "restart"}
