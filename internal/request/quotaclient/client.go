package quotaclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlcore/rl/internal/util/clock"
	"github.com/rlcore/rl/store"
)

// Defaults and bounds of Config.
const (
	// DefaultReportInterval is how often a client reports by default.
	DefaultReportInterval = time.Second
	// MinReportInterval and MaxReportInterval bound Config.ReportInterval.
	MinReportInterval = 100 * time.Millisecond
	MaxReportInterval = time.Minute
	// MaxTTL is the longest assignment_time_to_live accepted: a longer
	// one would keep a grant in force through a day of outage.
	MaxTTL = 24 * time.Hour
	// DefaultMinBackoff and DefaultMaxBackoff bound the wait before a
	// stream is reopened.
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// Config configures a Client. Zero fields take the documented defaults.
type Config struct {
	// Address is the RLQS server's host:port; required.
	Address string
	// Domain is sent in every report; required.
	Domain string
	// ReportInterval is how often usage is reported, in
	// [MinReportInterval, MaxReportInterval]. Default
	// DefaultReportInterval. Set the server's report_interval to it.
	ReportInterval time.Duration
	// Clock reads the time in µs; the same clock must decide (the
	// assignments' expiry is read on it). Default clock.System.
	Clock store.Clock
	// Logger receives the stream's failures (one line per failed stream).
	// Default slog.Default().
	Logger *slog.Logger
	// DialOptions are gRPC's; default plaintext
	// (insecure.NewCredentials()): serve RLQS on loopback or a private
	// network.
	DialOptions []grpc.DialOption
	// ClientIDMetadata, if set, is the gRPC metadata key each stream
	// sends ClientID under, so that a server configured with the same key
	// (its client_id_metadata) takes a reopened stream for the same client
	// and continues its grant. Both or neither.
	ClientIDMetadata, ClientID string
	// MinBackoff and MaxBackoff bound the wait before a stream is
	// reopened after it failed: it doubles from MinBackoff to MaxBackoff
	// (with ±20% jitter), and starts over once a stream has received an
	// answer. Defaults DefaultMinBackoff, DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
}

// Client keeps one stream to an RLQS server (StreamRateLimitQuotas) for
// the buckets registered with it: it reports their usage every
// ReportInterval, and once at once when a stream opens, and applies the
// assignments it receives to them. A stream that fails is reopened with
// backoff; the assignments in force meanwhile hold until their TTL, then
// each bucket's fallback applies. It is safe for concurrent use.
type Client struct {
	cfg  Config
	conn *grpc.ClientConn

	mu      sync.Mutex
	buckets map[string]*Bucket

	cancel context.CancelFunc
	done   chan struct{}

	attempts, streams, reports, refused atomic.Int64
	connected                           atomic.Bool
}

// New checks cfg and starts the client's stream.
func New(cfg Config) (*Client, error) {
	switch {
	case cfg.Address == "":
		return nil, errors.New("quotaclient: Config.Address is empty: want the RLQS server's host:port")
	case cfg.Domain == "":
		return nil, errors.New("quotaclient: Config.Domain is empty")
	case cfg.ReportInterval == 0:
		cfg.ReportInterval = DefaultReportInterval
	}
	if (cfg.ClientIDMetadata == "") != (cfg.ClientID == "") {
		return nil, errors.New("quotaclient: Config.ClientIDMetadata and ClientID go together: set both or neither")
	}
	if cfg.ReportInterval < MinReportInterval || cfg.ReportInterval > MaxReportInterval {
		return nil, fmt.Errorf("quotaclient: report interval %s is outside [%s, %s]", cfg.ReportInterval, MinReportInterval, MaxReportInterval)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)
	opts := cfg.DialOptions
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(cfg.Address, opts...)
	if err != nil {
		return nil, fmt.Errorf("quotaclient: %s: %w", cfg.Address, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{cfg: cfg, conn: conn, buckets: map[string]*Bucket{}, cancel: cancel, done: make(chan struct{})}
	go c.run(ctx)
	return c, nil
}

// Config returns the client's configuration, defaults applied.
func (c *Client) Config() Config { return c.cfg }

// Bucket registers the bucket spec describes and returns it; it is
// reported from the next report on. A bucket of the same id already
// registered is returned as it is when its spec is the same (a reload
// that changes nothing shares it), else replaced by one of the new spec
// that keeps its assignment, its state and its counters (a configuration
// reload changes no grant, and the metrics read from Stats run on).
func (c *Client) Bucket(spec BucketSpec) (*Bucket, error) {
	b, err := newBucket(spec)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.buckets[b.key]; old != nil && old.same(&b.spec) {
		return old, nil
	} else if old != nil {
		old.mu.Lock()
		b.state = old.state
		old.mu.Unlock()
		if a := old.cur.Load(); a != nil {
			_ = b.Apply(a.act, a.expires-a.act.TTL)
		}
		b.allowed.Store(old.allowed.Swap(0))
		b.denied.Store(old.denied.Swap(0))
		b.lastReport.Store(old.lastReport.Load())
		b.stats.carry(&old.stats)
	}
	c.buckets[b.key] = b
	return b, nil
}

// ClientStats are a client's counters.
type ClientStats struct {
	// Attempts counts the attempts to open a stream; Streams the
	// streams opened; Reports the reports sent; Refused the actions
	// refused (malformed, or for a bucket not registered).
	Attempts, Streams, Reports, Refused int64
	// Connected reports whether a stream is open and has answered.
	Connected bool
}

// Stats returns the client's counters.
func (c *Client) Stats() ClientStats {
	return ClientStats{Attempts: c.attempts.Load(), Streams: c.streams.Load(), Reports: c.reports.Load(), Refused: c.refused.Load(), Connected: c.connected.Load()}
}

// Close ends the stream and waits for the client's goroutine.
func (c *Client) Close() error {
	c.cancel()
	<-c.done
	return c.conn.Close()
}

// run keeps a stream open until ctx ends, reopening it with backoff.
func (c *Client) run(ctx context.Context) {
	defer close(c.done)
	backoff := c.cfg.MinBackoff
	failures := 0 // since a stream last answered
	for ctx.Err() == nil {
		answered, err := c.stream(ctx)
		c.connected.Store(false)
		if ctx.Err() != nil {
			return
		}
		if answered {
			backoff, failures = c.cfg.MinBackoff, 0
		}
		failures++
		// One line when the server is lost, then one per hundred
		// attempts: an outage does not flood the log.
		if failures%100 == 1 {
			c.cfg.Logger.Warn("rlqs client: stream ended; the assignments in force hold until their TTL, then the rules' fallback applies",
				"server", c.cfg.Address, "err", err, "retry_in", backoff, "attempts_failed", failures)
		}
		jitter := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
		t := time.NewTimer(jitter)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, c.cfg.MaxBackoff)
	}
}

// stream runs one stream: a report at once, then one every interval,
// while a goroutine applies what the server sends. answered reports
// whether the server sent anything.
func (c *Client) stream(ctx context.Context) (answered bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.attempts.Add(1)
	if c.cfg.ClientIDMetadata != "" {
		sctx = metadata.AppendToOutgoingContext(sctx, c.cfg.ClientIDMetadata, c.cfg.ClientID)
	}
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(c.conn).StreamRateLimitQuotas(sctx)
	if err != nil {
		return false, err
	}
	c.streams.Add(1)
	var got atomic.Bool
	recvErr := make(chan error, 1)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			got.Store(true)
			c.connected.Store(true)
			c.apply(r)
		}
	}()
	if err := c.report(st); err != nil {
		cancel()
		<-recvErr
		return got.Load(), err
	}
	t := time.NewTicker(c.cfg.ReportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = st.CloseSend()
			cancel()
			<-recvErr
			return got.Load(), ctx.Err()
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				err = errors.New("the server closed the stream")
			}
			return got.Load(), err
		case <-t.C:
			if err := c.report(st); err != nil {
				cancel()
				<-recvErr
				return got.Load(), err
			}
		}
	}
}

// report sends the usage of every bucket not dormant. On a failed send the
// usage is kept for the next report.
func (c *Client) report(st grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	now := c.cfg.Clock()
	c.mu.Lock()
	bs := make([]*Bucket, 0, len(c.buckets))
	for _, b := range c.buckets {
		if !b.dormant.Load() {
			bs = append(bs, b)
		}
	}
	c.mu.Unlock()
	if len(bs) == 0 {
		return nil
	}
	msg := &rlqsv3.RateLimitQuotaUsageReports{Domain: c.cfg.Domain}
	type taken struct{ a, d uint64 }
	ts := make([]taken, len(bs))
	for i, b := range bs {
		a, d := b.usage()
		ts[i] = taken{a, d}
		elapsed := int64(0)
		if last := b.lastReport.Swap(now); last != 0 && now > last {
			elapsed = now - last
		}
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: b.spec.ID},
			TimeElapsed:        durationpb.New(time.Duration(elapsed) * time.Microsecond),
			NumRequestsAllowed: a,
			NumRequestsDenied:  d,
		})
	}
	if err := st.Send(msg); err != nil {
		for i, b := range bs {
			b.unreport(ts[i].a, ts[i].d)
		}
		return err
	}
	c.reports.Add(1)
	return nil
}

// apply applies a response's actions to their buckets; an action that is
// malformed or names no registered bucket is refused and counted.
func (c *Client) apply(r *rlqsv3.RateLimitQuotaResponse) {
	now := c.cfg.Clock()
	for _, ba := range r.GetBucketAction() {
		spec := BucketSpec{ID: ba.GetBucketId().GetBucket()}
		c.mu.Lock()
		b := c.buckets[spec.Key()]
		c.mu.Unlock()
		if b == nil {
			c.refused.Add(1)
			continue
		}
		a, err := parseAction(ba)
		changed := false
		if err == nil {
			changed, err = b.apply(a, now)
		}
		if changed {
			st := b.Stats(now)
			c.cfg.Logger.Info("rlqs client: assignment changed", "server", c.cfg.Address, "bucket", b.spec.ID, "kind", a.Kind.String(),
				"max_tokens", a.MaxTokens, "tokens_per_fill", a.TokensPerFill, "fill_interval_us", a.FillInterval, "ttl_us", a.TTL,
				"fresh_total", st.Fresh, "clamped_total", st.Clamped)
		}
		if err != nil {
			c.refused.Add(1)
			c.cfg.Logger.Warn("rlqs client: assignment refused; the one in force holds until its TTL", "server", c.cfg.Address, "err", err)
		}
	}
}

// parseAction checks a bucket action as received: every value the bucket
// reads is checked here, at the trust boundary.
func parseAction(ba *rlqsv3.RateLimitQuotaResponse_BucketAction) (Action, error) {
	if ba.GetAbandonAction() != nil {
		return Action{Kind: Abandon}, nil
	}
	qa := ba.GetQuotaAssignmentAction()
	if qa == nil {
		return Action{}, fmt.Errorf("%w: neither quota_assignment_action nor abandon_action", errAction)
	}
	ttl := qa.GetAssignmentTimeToLive()
	if ttl == nil || ttl.CheckValid() != nil || ttl.AsDuration() <= 0 || ttl.AsDuration() > MaxTTL {
		return Action{}, fmt.Errorf("%w: assignment_time_to_live %v is outside (0, %s]", errAction, ttl.AsDuration(), MaxTTL)
	}
	a := Action{TTL: ttl.AsDuration().Microseconds()}
	if a.TTL < 1 {
		return Action{}, fmt.Errorf("%w: assignment_time_to_live %v is under 1µs", errAction, ttl.AsDuration())
	}
	s := qa.GetRateLimitStrategy()
	switch st := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		switch st.BlanketRule {
		case typev3.RateLimitStrategy_DENY_ALL:
			a.Kind = DenyAll
		case typev3.RateLimitStrategy_ALLOW_ALL:
			a.Kind = AllowAll
		default:
			return Action{}, fmt.Errorf("%w: unknown blanket_rule %d", errAction, st.BlanketRule)
		}
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := st.TokenBucket
		fi := tb.GetFillInterval()
		if fi == nil || fi.CheckValid() != nil || fi.AsDuration() < time.Microsecond || fi.AsDuration()%time.Microsecond != 0 {
			return Action{}, fmt.Errorf("%w: token_bucket fill_interval %v: want a positive whole number of µs", errAction, fi.AsDuration())
		}
		a.Kind, a.MaxTokens, a.TokensPerFill, a.FillInterval = TokenBucket, int64(tb.GetMaxTokens()), 1, fi.AsDuration().Microseconds()
		if tb.GetTokensPerFill() != nil { // unset: one token per fill, as the proto says
			a.TokensPerFill = int64(tb.GetTokensPerFill().GetValue())
		}
		if a.MaxTokens < 1 || a.TokensPerFill < 1 {
			return Action{}, fmt.Errorf("%w: token_bucket max_tokens %d, tokens_per_fill %d: want at least 1 of each", errAction, a.MaxTokens, a.TokensPerFill)
		}
	default:
		return Action{}, fmt.Errorf("%w: rate_limit_strategy %T is not supported (token_bucket and blanket_rule are)", errAction, st)
	}
	return a, nil
}
