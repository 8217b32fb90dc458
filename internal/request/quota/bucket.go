package quota

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// Config tunes how a Bucket divides its limit. A zero field takes the
// default it documents; times are in µs.
type Config struct {
	// ReportInterval is how often a client reports: 5 s, what Envoy's
	// filter does whatever its reporting_interval says.
	ReportInterval int64
	// TTL is the time to live of every grant, a whole number of seconds
	// (Envoy reads only the seconds); default 3×ReportInterval rounded up to
	// a second, so two lost reports do not let a grant lapse. Grants are
	// re-sent (extended) on every report.
	TTL int64
	// Guard is the longest round trip between the server and a client,
	// default 1 s: a report received sooner than Guard after a cut may have
	// been sent before the client applied it, so it does not acknowledge
	// the cut; and a grant is counted Guard beyond its TTL, which starts
	// when the client receives it.
	Guard int64
	// Hysteresis, in thousandths, is how much more than its grant a client
	// must want before its grant is raised (and others are cut to pay for
	// it); default 50 (5%), at least one token per FillInterval.
	Hysteresis int64
	// Reserve, in thousandths of Limit.Fill, is kept unassigned for clients
	// that join while the others leave capacity unused; default 100. It
	// never takes capacity from demand: with demand at or above the limit
	// nothing is reserved.
	Reserve int64
	// BurstReserve, in thousandths of Limit.Burst, is never handed out;
	// default 250. Envoy starts every changed assignment's token bucket
	// full, so each change can add its burst to what the clients admit
	// (ε of the bound in docs/rlqs.md); the reserve absorbs that much:
	// admitted(W) ≤ L·W + B − reserve + ε. At most 900.
	BurstReserve int64
	// AbandonAfter is how long a client may report no usage at all before
	// it is told to abandon the bucket; default 5 minutes.
	AbandonAfter int64
	// HoldUntil is a time before which no grant is made: grants made by a
	// previous server whose state is lost may still be in force until then.
	// A server keeping state in memory sets it to its start plus TTL plus
	// Guard; one whose store survived a restart leaves it 0.
	HoldUntil int64
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.ReportInterval <= 0 {
		c.ReportInterval = 5 * Second
	}
	if c.TTL <= 0 {
		c.TTL = (3*c.ReportInterval + Second - 1) / Second * Second
	}
	if c.Guard <= 0 {
		c.Guard = Second
	}
	if c.Hysteresis <= 0 {
		c.Hysteresis = 50
	}
	if c.Reserve <= 0 {
		c.Reserve = 100
	}
	if c.BurstReserve <= 0 {
		c.BurstReserve = 250
	}
	if c.AbandonAfter <= 0 {
		c.AbandonAfter = 300 * Second
	}
	return c
}

// Validate reports whether c, its defaults applied, is usable.
func (c Config) Validate() error {
	d := c.WithDefaults()
	switch {
	case d.TTL%Second != 0:
		return fmt.Errorf("quota: TTL %dµs is not a whole number of seconds (Envoy ignores fractions)", d.TTL)
	case d.TTL <= d.ReportInterval:
		return fmt.Errorf("quota: TTL %dµs does not outlive the report interval %dµs: grants would lapse between reports; use at least two intervals", d.TTL, d.ReportInterval)
	case d.Hysteresis > 1000 || d.Reserve > 1000:
		return fmt.Errorf("quota: hysteresis %d and reserve %d are thousandths, at most 1000", d.Hysteresis, d.Reserve)
	case d.BurstReserve > 900:
		return fmt.Errorf("quota: burst reserve %d thousandths leaves clients almost no burst; at most 900", d.BurstReserve)
	}
	return nil
}

// Grant is what one client enforces: a token bucket holding at most Tokens,
// refilled continuously with Fill tokens per Limit.FillInterval. The zero
// Grant denies everything.
type Grant struct {
	Fill   int64
	Tokens int64
}

// IsZero reports whether g denies everything.
func (g Grant) IsZero() bool { return g.Fill == 0 || g.Tokens == 0 }

func maxGrant(a, b Grant) Grant { return Grant{max(a.Fill, b.Fill), max(a.Tokens, b.Tokens)} }

func minGrant(a, b Grant) Grant { return Grant{min(a.Fill, b.Fill), min(a.Tokens, b.Tokens)} }

// ActionKind says what an Action asks of a client.
type ActionKind uint8

// The actions.
const (
	// Assign: enforce Action.Grant for Action.TTL (a zero Grant: deny all).
	Assign ActionKind = iota + 1
	// Abandon: forget the bucket; the client subscribes again when a
	// request next falls into it.
	Abandon
)

// Action is a message for one client about one bucket.
type Action struct {
	Client string
	Kind   ActionKind
	Grant  Grant
	// TTL is the grant's time to live, µs (whole seconds).
	TTL int64
	// Changed is true when Grant differs from the last one sent (a fresh
	// token bucket on the client), false for an extension.
	Changed bool
}

// Client is the state a Bucket keeps for one client: one row per bucket and
// client in a persistent store.
type Client struct {
	// ID names the client: its stream, or an identity it presents.
	ID string
	// Seq is the sequence number of the last report applied; a report
	// with a sequence at or below it is a repeat and is ignored.
	Seq uint64
	// Demand is the client's estimated demand in tokens per FillInterval:
	// requests allowed plus denied over the server time they were reported
	// in (at least half a ReportInterval), rising at once to a higher
	// measurement and falling at once to a lower one, or halfway when
	// the drop is within a measurement's noise; -1 until measured.
	Demand int64
	// Used and Denied count the requests, and the denied ones, reported
	// since Since and not yet measured.
	Used, Denied uint64
	Since        int64
	// Starved: the last measurement saw requests denied, or a demand
	// above the grant's rate by more than the hysteresis and one request
	// per report (served, for now, from a fresh bucket's burst). Only a
	// starved client (or one with no grant) makes others' grants move:
	// one that is never denied and stays within its rate has all it
	// needs.
	Starved bool
	// LastReport and LastUsage are when the last report, and the last one
	// with any usage, arrived (µs).
	LastReport, LastUsage int64
	// Sent is the last grant sent; Prev is the largest grant sent before
	// it that the client may still enforce (zero once Sent is acknowledged).
	Sent, Prev Grant
	// SentAt is when Sent was first sent; Acked whether a report has since
	// shown the client enforces it.
	SentAt int64
	Acked  bool
	// Unsent: Sent never reached the client (Undelivered): no report
	// acknowledges it, and Step sends it again at the next report or
	// Guard after SentAt, SentAt then the time of that send.
	Unsent bool
	// Refreshed is when a grant was last sent, change or extension (-1:
	// never): the client enforces it until about Refreshed+TTL.
	Refreshed int64
	// Gone: the client's stream closed or it was told to abandon the
	// bucket. It is counted until its grant expires, then removed.
	Gone bool
	// due: a report awaits an answer.
	due bool
}

// commit is the largest grant c may be enforcing at now.
func (c *Client) commit(now int64, cfg *Config) Grant {
	if c.Refreshed < 0 || now >= c.Refreshed+cfg.TTL+cfg.Guard {
		return Grant{}
	}
	if c.Acked {
		return c.Sent
	}
	return maxGrant(c.Prev, c.Sent)
}

// Bucket is one global limit divided among the clients that report for it.
// The zero value is not usable; call NewBucket.
type Bucket struct {
	limit   Limit
	cfg     Config
	clients []*Client // by ID
}

// NewBucket returns an empty bucket dividing l.
func NewBucket(l Limit, cfg Config) (*Bucket, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Bucket{limit: l, cfg: cfg.WithDefaults()}, nil
}

// Limit returns the limit b divides.
func (b *Bucket) Limit() Limit { return b.limit }

// Config returns b's configuration, defaults applied.
func (b *Bucket) Config() Config { return b.cfg }

// SetLimit changes the limit (a configuration reload). Grants above the new
// shares are cut at the next Step; raises wait for the cuts as always.
func (b *Bucket) SetLimit(l Limit) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if l.FillInterval != b.limit.FillInterval {
		// Grants are counted in FillIntervals: convert every one.
		for _, c := range b.clients {
			for _, g := range []*Grant{&c.Sent, &c.Prev} {
				g.Fill = ceilMulDiv(g.Fill, l.FillInterval, b.limit.FillInterval)
			}
			if c.Demand > 0 {
				c.Demand = ceilMulDiv(c.Demand, l.FillInterval, b.limit.FillInterval)
			}
		}
	}
	b.limit = l
	return nil
}

// Clients returns the clients' states, by ID (for a store to persist, and
// for tests). The pointers are b's own.
func (b *Bucket) Clients() []*Client { return b.clients }

// Restore adds a client's state read back from a store.
func (b *Bucket) Restore(c Client) {
	cp := c
	i, found := b.find(c.ID)
	if found {
		b.clients[i] = &cp
		return
	}
	b.clients = slices.Insert(b.clients, i, &cp)
}

func (b *Bucket) find(id string) (int, bool) {
	return slices.BinarySearchFunc(b.clients, id, func(c *Client, id string) int { return strings.Compare(c.ID, id) })
}

// Report records a usage report from client id at now: allowed and denied
// requests since its previous report. seq, when not 0, numbers the client's
// reports; a repeat (seq not above the last applied) is ignored, so a
// report delivered twice counts once. The answer comes from the next Step.
func (b *Bucket) Report(id string, seq uint64, allowed, denied uint64, now int64) {
	i, found := b.find(id)
	if !found {
		c := &Client{ID: id, Demand: -1, LastReport: now, LastUsage: now, Since: now, Refreshed: -1, Acked: true, Seq: seq, due: true}
		b.clients = slices.Insert(b.clients, i, c)
		return
	}
	c := b.clients[i]
	if seq != 0 && seq <= c.Seq {
		return
	}
	c.Seq = seq
	c.Gone = false
	used := satAdd(allowed, denied)
	if used > 0 {
		c.LastUsage = now
	}
	c.Used = satAdd(c.Used, used)
	c.Denied = satAdd(c.Denied, denied)
	if gap := now - c.Since; gap >= b.cfg.ReportInterval/2 {
		// Demand rises at once, and falls at once too when the drop
		// is beyond a measurement's noise (cutThreshold): a shift is
		// believed from the report that shows it, so the capacity it
		// frees moves one report sooner. A drop within the noise falls
		// by halves, so noise alone does not move grants.
		d := mulDiv(int64(min(c.Used, 1<<62)), b.limit.FillInterval, gap)
		if c.Demand < 0 || d >= c.Demand || c.Demand-d > b.cutThreshold(Grant{Fill: c.Demand}) {
			c.Demand = d
		} else {
			c.Demand -= (c.Demand - d) / 2
		}
		// Starved: denied, or served beyond its grant's rate out of
		// a fresh bucket's burst (by more than the hysteresis and
		// one request per report, a measurement's resolution), which
		// will soon run out.
		c.Starved = c.Denied > 0 || c.Demand > c.Sent.Fill+b.threshold(c.Sent)+ceilMulDiv(1, b.limit.FillInterval, b.cfg.ReportInterval)
		c.Used, c.Denied, c.Since = 0, 0, now
	}
	if !c.Acked && !c.Unsent && now >= c.SentAt+b.cfg.Guard {
		c.Acked, c.Prev = true, Grant{}
	}
	c.LastReport = now
	c.due = true
}

// Undelivered records that an Assign action Step returned for client id,
// granting g, never reached the client: its stream is gone or on another
// server, or the stream's send buffer was full. Until g is sent again (Step
// does at the client's next report, or Guard after it was sent) no report
// acknowledges it: a cut keeps counting at the old grant, and the raise it
// pays for waits. An action for an older grant than the client's last is
// ignored, as is an extension of a grant already acknowledged (the client
// enforces it already).
func (b *Bucket) Undelivered(id string, g Grant) {
	i, found := b.find(id)
	if !found {
		return
	}
	if c := b.clients[i]; c.Sent == g && !c.Acked {
		c.Unsent = true
	}
}

// Close records that client id's stream closed at now: it gets no more
// answers, and is counted until its last grant has expired.
func (b *Bucket) Close(id string, now int64) {
	if i, found := b.find(id); found {
		b.clients[i].Gone = true
		b.clients[i].due = false
	}
}

// Empty reports whether b has no client left, so a store may drop it.
func (b *Bucket) Empty() bool { return len(b.clients) == 0 }

// Committed returns the sums of what the clients may be enforcing at now:
// never above the limit's Fill and Burst.
func (b *Bucket) Committed(now int64) Grant {
	var s Grant
	for _, c := range b.clients {
		g := c.commit(now, &b.cfg)
		s.Fill += g.Fill
		s.Tokens += g.Tokens
	}
	return s
}

// Step decides, at now, what to send: cuts and raises that move the grants
// toward the clients' fair shares, extensions answering reports, and
// abandons for idle clients. Call it after every Report and periodically
// (every second or so), since expiring grants free capacity.
func (b *Bucket) Step(now int64) []Action {
	var out []Action
	out = b.expire(now, out)
	if now < b.cfg.HoldUntil {
		for _, c := range b.clients {
			c.due = false
		}
		return out
	}
	active := make([]*Client, 0, len(b.clients))
	for _, c := range b.clients {
		if !c.Gone {
			active = append(active, c)
		}
	}
	var changed []bool
	if b.mayMove(active) {
		changed = b.move(active, b.targets(active), now)
	} else {
		changed = make([]bool, len(active))
	}
	for i, c := range active {
		switch {
		case changed[i]:
			out = append(out, Action{Client: c.ID, Kind: Assign, Grant: c.Sent, TTL: b.cfg.TTL, Changed: true})
		case c.Unsent && c.Refreshed >= 0 && (c.due || now >= c.SentAt+b.cfg.Guard):
			// Sent never reached the client: send it again, a change
			// for the client, its guard counted from now.
			c.Unsent, c.SentAt = false, now
			out = append(out, Action{Client: c.ID, Kind: Assign, Grant: c.Sent, TTL: b.cfg.TTL, Changed: true})
		case c.due && c.Refreshed >= 0:
			out = append(out, Action{Client: c.ID, Kind: Assign, Grant: c.Sent, TTL: b.cfg.TTL})
		default:
			continue
		}
		c.Refreshed = now
		c.due = false
	}
	for _, c := range active {
		c.due = false
	}
	return out
}

// expire forgets gone clients whose grant has expired, resets the grant of
// silent ones, and abandons idle ones.
func (b *Bucket) expire(now int64, out []Action) []Action {
	b.clients = slices.DeleteFunc(b.clients, func(c *Client) bool {
		lapsed := c.Refreshed < 0 || now >= c.Refreshed+b.cfg.TTL+b.cfg.Guard
		if lapsed {
			c.Sent, c.Prev, c.Acked, c.Unsent = Grant{}, Grant{}, true, false
		}
		if c.Gone {
			return lapsed
		}
		if now-c.LastUsage >= b.cfg.AbandonAfter {
			c.Gone, c.due = true, false
			out = append(out, Action{Client: c.ID, Kind: Abandon})
			return lapsed
		}
		return false
	})
	return out
}

// threshold is how far below its target a starved client's grant may sit
// before it is raised.
func (b *Bucket) threshold(g Grant) int64 {
	return max(1, g.Fill*b.cfg.Hysteresis/1000)
}

// cutThreshold is how far above its target a grant may sit before it is
// cut: twice the raise threshold, and at least two requests per report
// interval, the resolution of a measured demand, so that noise in
// measurements does not cut a grant only to raise it again.
func (b *Bucket) cutThreshold(g Grant) int64 {
	perReport := ceilMulDiv(1, b.limit.FillInterval, b.cfg.ReportInterval)
	return max(2*b.threshold(g), 2*perReport)
}

// mayMove reports whether any grant may have to move: some client has no
// grant, is starved or is new, or the grants sent exceed a lowered limit.
// When none does, the targets need not be computed (the common case under
// steady demand below the limit).
func (b *Bucket) mayMove(active []*Client) bool {
	var sent Grant
	for _, c := range active {
		if c.Sent.IsZero() || c.Starved || c.Demand < 0 {
			return true
		}
		sent.Fill += c.Sent.Fill
		sent.Tokens += c.Sent.Tokens
	}
	return sent.Fill > b.limit.Fill || sent.Tokens > b.limit.Burst
}

// wantsRaise reports whether c needs its target w now: it has no grant, or
// it is denied requests and its target is noticeably above its grant.
func (b *Bucket) wantsRaise(c *Client, w Grant) bool {
	if w.IsZero() {
		return false
	}
	return c.Sent.IsZero() || (c.Starved || c.Demand < 0) && w.Fill > c.Sent.Fill+b.threshold(c.Sent)
}

// move turns targets into changes: when a client wants noticeably more
// than it was sent, clients holding noticeably more than their targets are
// cut, and raises are paid from capacity no client may be enforcing.
func (b *Bucket) move(active []*Client, want []Grant, now int64) []bool {
	changed := make([]bool, len(active))
	set := func(i int, g Grant) {
		c := active[i]
		if g == c.Sent {
			return
		}
		switch {
		case c.Acked:
			c.Prev, c.SentAt = c.Sent, now
		case !c.Unsent && g.Fill >= c.Sent.Fill && g.Tokens >= c.Sent.Tokens:
			// A raise while the change sent at SentAt awaits its
			// acknowledgement: every grant sent since then is at most
			// g, so the report that acknowledges that change shows
			// the client enforcing g or less, and Prev over. Restarting
			// the wait here would keep Prev committed one more report
			// for every raise (a client raised as its peers' demands
			// become known would hold its old grant for as long).
		default:
			c.Prev, c.SentAt = maxGrant(c.Prev, c.Sent), now
		}
		c.Sent, c.Acked, c.Unsent = g, false, false
		changed[i] = true
	}
	var sent Grant
	pressure := false
	for i, c := range active {
		sent.Fill += c.Sent.Fill
		sent.Tokens += c.Sent.Tokens
		if b.wantsRaise(c, want[i]) {
			pressure = true
		}
	}
	if sent.Fill > b.limit.Fill || sent.Tokens > b.limit.Burst {
		pressure = true // the limit was lowered
	}
	if !pressure {
		return changed
	}
	for i, c := range active {
		// A cut never raises either part: a target with more fill but
		// fewer tokens (or the reverse) is reached in two steps, the raise
		// paid for like any other.
		over := sent.Fill > b.limit.Fill || sent.Tokens > b.limit.Burst
		if want[i].Fill+b.cutThreshold(c.Sent) < c.Sent.Fill || over && (want[i].Fill < c.Sent.Fill || want[i].Tokens < c.Sent.Tokens) {
			set(i, minGrant(want[i], c.Sent))
		}
	}
	// Raises, largest shortfall first, from what is free of every
	// commitment (cuts not yet acknowledged still count at their old size).
	used := b.Committed(now)
	free := Grant{b.limit.Fill - used.Fill, b.limit.Burst - used.Tokens}
	cutsPending := false
	var pending int64 // the fill that cuts not yet acknowledged will free
	for _, c := range b.clients {
		if g := c.commit(now, &b.cfg); g.Fill > c.Sent.Fill || g.Tokens > c.Sent.Tokens {
			cutsPending = true
			pending += g.Fill - c.Sent.Fill
		}
	}
	order := make([]int, 0, len(active))
	for i, c := range active {
		if b.wantsRaise(c, want[i]) {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(x, y int) int {
		return int(min(max((want[y].Fill-active[y].Sent.Fill)-(want[x].Fill-active[x].Sent.Fill), -1), 1))
	})
	var unmet int64
	for _, i := range order {
		c := active[i]
		cur := c.commit(now, &b.cfg)
		need := Grant{max(0, want[i].Fill-cur.Fill), max(0, want[i].Tokens-cur.Tokens)}
		if need.Fill <= free.Fill+b.threshold(want[i]) && need.Tokens <= free.Tokens+max(1, want[i].Tokens*b.cfg.Hysteresis/1000) {
			// Served, or all but less than the hysteresis, which
			// would not raise it again: one change either way, so
			// it need not wait for pending cuts.
			g := minGrant(want[i], Grant{cur.Fill + max(0, free.Fill), cur.Tokens + max(0, free.Tokens)})
			if g.Fill > c.Sent.Fill || g.Tokens > c.Sent.Tokens {
				set(i, maxGrant(g, c.Sent))
			}
			free.Fill -= min(need.Fill, max(0, free.Fill))
			free.Tokens -= min(need.Tokens, max(0, free.Tokens))
			continue
		}
		if cutsPending || free.Fill < b.threshold(cur) || free.Tokens < 1 {
			// Wait for the cuts: one change, not two. What is free
			// stays reserved for this client (the largest shortfall
			// first), not taken by smaller ones meanwhile.
			r := min(need.Fill, max(0, free.Fill))
			free.Fill -= r
			free.Tokens -= min(need.Tokens, max(0, free.Tokens))
			unmet += need.Fill - r
			continue
		}
		unmet += need.Fill
		g := Grant{cur.Fill + min(need.Fill, free.Fill), cur.Tokens + min(need.Tokens, free.Tokens)}
		if g.Fill > c.Sent.Fill {
			set(i, g)
			free.Fill -= g.Fill - cur.Fill
			free.Tokens -= g.Tokens - cur.Tokens
			unmet -= g.Fill - cur.Fill
		}
	}
	if unmet -= max(0, free.Fill) + pending; unmet > 0 {
		// The capacity the starved clients need, beyond what is free
		// and what the pending cuts (this step's included) will free,
		// sits in many small excesses, each under the cut threshold:
		// cut the largest ones, just enough, now rather than once the
		// pending cuts are acknowledged (one more round trip). The
		// raises follow once the cuts are acknowledged.
		excess := make([]int, 0, len(active))
		for i, c := range active {
			if !changed[i] && want[i].Fill < c.Sent.Fill {
				excess = append(excess, i)
			}
		}
		slices.SortStableFunc(excess, func(x, y int) int {
			ex, ey := active[x].Sent.Fill-want[x].Fill, active[y].Sent.Fill-want[y].Fill
			return int(min(max(ey-ex, -1), 1))
		})
		for _, i := range excess {
			if unmet <= 0 {
				break
			}
			unmet -= active[i].Sent.Fill - want[i].Fill
			set(i, minGrant(want[i], active[i].Sent))
		}
	}
	return changed
}

// targets returns each active client's fair grant: Fill divided max-min
// fairly over demands (an unknown demand wanting a full share), capacity
// left over spread evenly less the reserve, Burst less its reserve in
// proportion to Fill.
func (b *Bucket) targets(active []*Client) []Grant {
	n := len(active)
	if n == 0 {
		return nil
	}
	demand := make([]int64, n)
	for i, c := range active {
		demand[i] = c.Demand
		if demand[i] >= 0 {
			demand[i] = max(demand[i], 1)
		}
	}
	fill := waterFill(b.limit.Fill, demand)
	var sum int64
	for _, f := range fill {
		sum += f
	}
	if surplus := b.limit.Fill - sum; surplus > 0 {
		spread := surplus - min(surplus, b.limit.Fill*b.cfg.Reserve/1000)
		each, extra := spread/int64(n), spread%int64(n)
		for i := range fill {
			fill[i] += each
			if int64(i) < extra {
				fill[i]++
			}
		}
	}
	out := make([]Grant, n)
	burst := b.limit.Burst - b.limit.Burst*b.cfg.BurstReserve/1000
	var tokens int64
	for i, f := range fill {
		out[i] = Grant{Fill: f, Tokens: mulDiv(burst, f, b.limit.Fill)}
		tokens += out[i].Tokens
	}
	// A token bucket needs a token: give the rounded-away burst to those
	// with none, and deny those it cannot reach.
	left := burst - tokens
	for i := range out {
		if out[i].Fill > 0 && out[i].Tokens == 0 {
			if left > 0 {
				out[i].Tokens, left = 1, left-1
			} else {
				out[i] = Grant{}
			}
		}
		if out[i].Fill == 0 {
			out[i] = Grant{}
		}
	}
	return out
}

// waterFill divides total among demands max-min fairly: no one gets more
// than its demand (a negative demand is unbounded), and no one who gets less
// than its demand gets less than anyone else. Integer shares; the units
// rounding leaves go to the first in order.
func waterFill(total int64, demand []int64) []int64 {
	n := len(demand)
	type entry struct{ key, i int64 }
	order := make([]entry, n)
	for i, d := range demand {
		if d < 0 {
			d = 1<<63 - 1
		}
		order[i] = entry{d, int64(i)}
	}
	slices.SortFunc(order, func(a, b entry) int {
		switch {
		case a.key != b.key:
			return cmpInt(a.key, b.key)
		default:
			return cmpInt(a.i, b.i)
		}
	})
	out := make([]int64, n)
	left := total
	for k, e := range order {
		rest := int64(n - k)
		if e.key <= left/rest {
			out[e.i] = e.key
			left -= e.key
			continue
		}
		each, extra := left/rest, left%rest
		for j, e := range order[k:] {
			out[e.i] = each
			if int64(j) < extra {
				out[e.i]++
			}
		}
		break
	}
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<64 - 1
}

// ceilMulDiv returns ⌈a×b/c⌉ for non-negative a, b and positive c, the
// quotient fitting an int64.
func ceilMulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, r := bits.Div64(hi, lo, uint64(c))
	if r > 0 {
		q++
	}
	return int64(q)
}
