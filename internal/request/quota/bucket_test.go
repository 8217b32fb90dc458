package quota

import (
	"math/rand/v2"
	"testing"
)

var testLimit = Limit{Fill: 6000, FillInterval: 60 * Second, Burst: 100}

const base = int64(1_700_000_000) * Second

func newTestBucket(t *testing.T, cfg Config) *Bucket {
	t.Helper()
	b, err := NewBucket(testLimit, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Whatever the order of reports, departures and steps, the commitments
// never exceed the limit; after the limit is lowered they never grow
// until they fit it again.
func TestCommitmentsNeverExceedTheLimit(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		b := newTestBucket(t, Config{})
		now := base
		ids := []string{"a", "b", "c", "d", "e", "f"}
		prev := Grant{}
		for step := range 400 {
			now += rng.Int64N(3 * Second)
			id := ids[rng.IntN(len(ids))]
			switch rng.IntN(20) {
			case 0, 1:
				b.Close(id, now)
			case 2:
				l := Limit{Fill: 1 + rng.Int64N(12000), FillInterval: 60 * Second, Burst: 1 + rng.Int64N(200)}
				if err := b.SetLimit(l); err != nil {
					t.Fatal(err)
				}
			default:
				b.Report(id, 0, rng.Uint64N(500), rng.Uint64N(300), now)
			}
			b.Step(now)
			c, l := b.Committed(now), b.Limit()
			fits := c.Fill <= l.Fill && c.Tokens <= l.Burst
			if !fits && (c.Fill > max(prev.Fill, l.Fill) || c.Tokens > max(prev.Tokens, l.Burst)) {
				t.Fatalf("seed %d step %d: committed %+v, before %+v, limit %+v", seed, step, c, prev, l)
			}
			prev = c
		}
	}
}

// A raise waits for the cut that pays for it: the cut client's report
// sooner than Guard after the cut does not count; one after it does.
func TestCutBeforeRaise(t *testing.T) {
	b := newTestBucket(t, Config{})
	now := base
	b.Report("a", 0, 0, 1, now)
	if acts := b.Step(now); len(acts) != 1 || acts[0].Grant != (Grant{6000, 75}) {
		t.Fatalf("alone: %+v", acts)
	}
	b.Report("b", 0, 0, 1, now)
	acts := b.Step(now)
	if len(acts) != 1 || acts[0].Client != "a" || acts[0].Grant.Fill != 3000 {
		t.Fatalf("b joins: want a cut of a only, got %+v", acts)
	}
	now += Second / 2
	b.Report("a", 0, 100, 0, now)
	for _, a := range b.Step(now) {
		if a.Client == "b" {
			t.Fatalf("b raised on a report that may have crossed the cut: %+v", a)
		}
	}
	now += 5 * Second
	b.Report("a", 0, 250, 0, now)
	var raised bool
	for _, a := range b.Step(now) {
		raised = raised || a.Client == "b" && a.Grant.Fill == 3000 && a.Changed
	}
	if !raised {
		t.Fatal("b not raised once a's cut was acknowledged")
	}
	if c := b.Committed(now); c.Fill > 6000 || c.Tokens > 100 {
		t.Fatalf("committed %+v", c)
	}
}

// A cut that never reached its client is not acknowledged by the client's
// next report: it is sent again, and the raise it pays for waits until a
// report at least Guard after that send.
func TestUndeliveredCut(t *testing.T) {
	b := newTestBucket(t, Config{})
	now := base
	b.Report("a", 0, 0, 1, now)
	b.Step(now)
	b.Report("b", 0, 0, 1, now)
	acts := b.Step(now)
	if len(acts) != 1 || acts[0].Client != "a" || acts[0].Grant.Fill != 3000 || !acts[0].Changed {
		t.Fatalf("b joins: want a cut of a only, got %+v", acts)
	}
	b.Undelivered("a", acts[0].Grant) // a's stream could not take it
	// a reports well after the guard: still on its old grant, since the
	// cut never reached it. The cut is sent again; b is not raised.
	now += 5 * Second
	b.Report("a", 0, 250, 0, now)
	var resent bool
	for _, a := range b.Step(now) {
		if a.Client == "b" && a.Grant.Fill > 0 {
			t.Fatalf("b raised on a report of a that never received its cut: %+v", a)
		}
		resent = resent || a.Client == "a" && a.Grant.Fill == 3000 && a.Changed
	}
	if !resent {
		t.Fatal("a's undelivered cut not sent again at its next report")
	}
	if c := b.Committed(now); c.Fill != 6000 {
		t.Fatalf("committed %+v: a's cut counted before a received it", c)
	}
	// A report sooner than Guard after the new send does not acknowledge
	// it either; one after it does, and b is raised.
	now += Second / 2
	b.Report("a", 0, 100, 0, now)
	for _, a := range b.Step(now) {
		if a.Client == "b" && a.Grant.Fill > 0 {
			t.Fatalf("b raised on a report that may have crossed the resent cut: %+v", a)
		}
	}
	now += 5 * Second
	b.Report("a", 0, 250, 0, now)
	var raised bool
	for _, a := range b.Step(now) {
		raised = raised || a.Client == "b" && a.Grant.Fill == 3000 && a.Changed
	}
	if !raised {
		t.Fatal("b not raised once a's resent cut was acknowledged")
	}
	if c := b.Committed(now); c.Fill > 6000 || c.Tokens > 100 {
		t.Fatalf("committed %+v", c)
	}
}

// Undelivered is resent without a report too, Guard after the failed send
// (a Tick's Step), and ignores an older grant than the client's last.
func TestUndeliveredResentByTick(t *testing.T) {
	b := newTestBucket(t, Config{})
	now := base
	b.Report("a", 0, 0, 1, now)
	first := b.Step(now)[0].Grant
	b.Report("b", 0, 0, 1, now)
	cut := b.Step(now)[0].Grant
	b.Undelivered("a", first) // an older grant: ignored
	if b.Clients()[0].Unsent {
		t.Fatal("an older grant's failed send marked the current one unsent")
	}
	b.Undelivered("a", cut)
	if acts := b.Step(now + Second/2); len(acts) != 0 {
		t.Fatalf("resent sooner than Guard: %+v", acts)
	}
	now += Second
	acts := b.Step(now)
	if len(acts) != 1 || acts[0].Client != "a" || acts[0].Grant != cut || !acts[0].Changed {
		t.Fatalf("Guard after: want a's cut resent, got %+v", acts)
	}
}

// A report delivered twice (same sequence number) counts once.
func TestReportIdempotent(t *testing.T) {
	b := newTestBucket(t, Config{})
	b.Report("a", 1, 10, 0, base)
	b.Report("a", 2, 600, 0, base+5*Second)
	d := b.Clients()[0].Demand
	b.Report("a", 2, 600, 0, base+5*Second)
	b.Report("a", 1, 600, 0, base+6*Second)
	if c := b.Clients()[0]; c.Demand != d || c.Seq != 2 || c.Used != 0 {
		t.Fatalf("a repeated report changed the state: %+v, demand before %d", c, d)
	}
}

// An idle client is told to abandon the bucket, counted until its grant
// expires, then forgotten.
func TestAbandonIdle(t *testing.T) {
	b := newTestBucket(t, Config{AbandonAfter: 60 * Second})
	now := base
	b.Report("a", 0, 0, 1, now)
	b.Step(now)
	for range 12 {
		now += 5 * Second
		b.Report("a", 0, 0, 0, now)
		b.Step(now)
	}
	now += 5 * Second
	b.Report("a", 0, 0, 0, now)
	acts := b.Step(now)
	if len(acts) != 1 || acts[0].Kind != Abandon {
		t.Fatalf("want an abandon, got %+v", acts)
	}
	if c := b.Committed(now); c.Fill == 0 {
		t.Fatal("an abandoned client's grant must stay counted until it expires")
	}
	now += 16 * Second
	b.Step(now)
	if !b.Empty() {
		t.Fatalf("the abandoned client is still held: %+v", b.Clients()[0])
	}
}

// A restarted server holds every grant back until HoldUntil.
func TestHold(t *testing.T) {
	b := newTestBucket(t, Config{HoldUntil: base + 16*Second})
	b.Report("a", 0, 0, 1, base)
	if acts := b.Step(base); len(acts) != 0 {
		t.Fatalf("granted during the hold: %+v", acts)
	}
	if acts := b.Step(base + 16*Second); len(acts) != 1 || acts[0].Grant.IsZero() {
		t.Fatalf("after the hold: %+v", acts)
	}
}

func TestFromCore(t *testing.T) {
	cases := []struct {
		name string
		l    Limit
		in   string
	}{
		{"token bucket 100/s burst 50", Limit{Fill: 6000, FillInterval: 60 * Second, Burst: 50}, "token_bucket 50 1s 100"},
		{"fixed window 1000/h", Limit{Fill: 1000, FillInterval: 3600 * Second, Burst: 1000}, "fixed_window 1000 1h 0"},
		{"huge rate: one-second interval", Limit{Fill: 100_000_000, FillInterval: Second, Burst: 1 << 30}, "gcra 1073741824 1s 100000000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := FromCore(parseCoreLimit(t, c.in))
			if err != nil || got != c.l {
				t.Fatalf("FromCore(%s) = %+v, %v; want %+v", c.in, got, err, c.l)
			}
		})
	}
	if _, err := FromCore(parseCoreLimit(t, "token_bucket 10 1000h 1")); err == nil {
		t.Fatal("a rate under one token per interval must be refused")
	}
}
