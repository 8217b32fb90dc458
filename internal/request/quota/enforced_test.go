package quota

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// What the clients enforce, not only what the bucket counts, never sums
// above the limit: clients apply their assignments in order, each message
// taking less than Guard/2 each way, with demands that jump often so that
// cuts, raises during pending cuts and partial raises all happen.
func TestEnforcedNeverExceedTheLimit(t *testing.T) {
	cases := []struct {
		clients int
		report  int64
	}{
		{3, Second},
		{8, Second},
		{8, 5 * Second},
		{30, 2 * Second},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("N=%d/report=%ds", tc.clients, tc.report/Second), func(t *testing.T) {
			for seed := uint64(1); seed <= 20; seed++ {
				enforcedRun(t, seed, tc.clients, tc.report)
			}
		})
	}
}

func enforcedRun(t *testing.T, seed uint64, n int, report int64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	b, err := NewBucket(testLimit, Config{ReportInterval: report})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.Config()
	const step = 10_000 // µs
	type msg struct {
		at int64
		a  Action
	}
	type client struct {
		id       string
		phase    int64
		rate     int64 // requests per second
		inbox    []msg // assignments in flight, in order
		grant    Grant
		expires  int64
		lastSent int64 // arrival of the last message in flight, for order
	}
	type usage struct {
		at      int64
		i       int
		allowed uint64
		denied  uint64
	}
	cs := make([]*client, n)
	for i := range cs {
		cs[i] = &client{id: fmt.Sprintf("c%d", i), phase: rng.Int64N(report/step) * step, rate: rng.Int64N(300)}
	}
	var up []usage
	delay := func() int64 { return rng.Int64N(cfg.Guard * 45 / 100) }
	send := func(now int64, acts []Action) {
		for _, a := range acts {
			var i int
			fmt.Sscanf(a.Client, "c%d", &i)
			c := cs[i]
			at := max(now+delay(), c.lastSent)
			c.lastSent = at
			c.inbox = append(c.inbox, msg{at, a})
		}
	}
	for now := int64(0); now < 120*Second; now += step {
		if rng.IntN(2000) == 0 { // demands jump
			for _, c := range cs {
				c.rate = rng.Int64N(300)
			}
		}
		for _, c := range cs {
			for len(c.inbox) > 0 && c.inbox[0].at <= now {
				a := c.inbox[0].a
				c.inbox = c.inbox[1:]
				if a.Kind == Assign {
					c.grant, c.expires = a.Grant, now+a.TTL
				} else {
					c.grant = Grant{}
				}
			}
			if now >= c.expires {
				c.grant = Grant{}
			}
		}
		for i, c := range cs {
			if now%report == c.phase {
				used := uint64(c.rate * report / Second)
				allowed := min(used, uint64(c.grant.Fill*report/testLimit.FillInterval))
				up = append(up, usage{now + delay(), i, allowed, used - allowed})
			}
		}
		var later []usage
		for _, r := range up {
			if r.at > now {
				later = append(later, r)
				continue
			}
			b.Report(cs[r.i].id, 0, r.allowed, r.denied, now)
			send(now, b.Step(now))
		}
		up = later
		if now%Second == 0 {
			send(now, b.Step(now))
		}
		var sum Grant
		for _, c := range cs {
			sum.Fill += c.grant.Fill
			sum.Tokens += c.grant.Tokens
		}
		if sum.Fill > testLimit.Fill || sum.Tokens > testLimit.Burst {
			t.Fatalf("seed %d, %.2f s: the clients enforce %+v together, over the limit %+v", seed, float64(now)/float64(Second), sum, testLimit)
		}
	}
}
