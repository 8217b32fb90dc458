// Package rlqs is an Envoy Rate Limit Quota Service (RLQS) server,
// envoy.service.rate_limit_quota.v3 StreamRateLimitQuotas: a thin gRPC
// adapter over internal/request/quota, which divides one global limit per bucket
// among the Envoys that report for it and hands each a token_bucket
// assignment, so that every Envoy decides locally and together they stay
// within the limit (docs/rlqs.md: the bound, its conditions, and what
// Envoy's client does).
//
// A bucket is the BucketId map an Envoy reports, within the report's
// domain; the first Rule whose Domain and Match fit it gives its limit. A
// bucket no rule matches is answered DENY_ALL. Each stream is one client,
// unless Config.ClientIDMetadata names a gRPC metadata key whose value
// identifies the Envoy across reconnects (set it with the cluster's
// grpc_service initial_metadata), so that a reconnect continues the
// client's grant instead of waiting for the old one to expire.
//
// Reports are read as go-control-plane v1.40.0 declares them and Envoy's
// filter sends them: bucket_quota_usages a repeated list, each with its
// bucket_id. An entry without a bucket_id (what the map<uint64,
// BucketQuotaUsage> shape of an earlier draft of rlqs.proto looks like to
// this parser) ends the stream with InvalidArgument.
//
// RLQS has no authentication of its own: serve it on loopback or a trusted
// network (or behind mTLS). A caller that reaches it can claim a share of
// every bucket (it cannot raise a limit: each stream is one more client
// dividing the same one), and with ClientIDMetadata set can take over
// another client's identity.
//
// State lives in a Store; MemStore keeps it in memory, so a restarted
// server holds back grants for one TTL plus the guard (quota.Config.HoldUntil)
// while its predecessor's may still be in force. PGStore keeps it in
// PostgreSQL: with KeepsState, a restarted server, or another one over the
// same database, continues the division where it was.
package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/quota"
	"github.com/rlcore/rl/internal/util/clock"
)

// Input bounds: a report crosses a trust boundary.
const (
	maxPairs    = 32  // entries of one BucketId
	maxPairLen  = 256 // bytes of one key or value
	maxUsages   = 1024
	maxClientID = 128
	sendBuffer  = 64 // responses queued per stream before one is not sent
)

// Rule gives the limit of the buckets it matches.
type Rule struct {
	// Domain is the report's domain the rule applies to; "" any.
	Domain string
	// Match lists bucket_id entries the bucket must have: key and value,
	// or key and "*" for any value (each value its own bucket). Entries
	// the rule does not name are allowed; an empty Match matches every
	// bucket.
	Match map[string]string
	// Limit is the global limit of each matching bucket, converted by
	// quota.FromCore.
	Limit core.Limit
}

// Config configures a Server. Zero fields take their defaults.
type Config struct {
	// Rules, first match wins.
	Rules []Rule
	// Quota tunes the division (TTL, guard, hysteresis...). HoldUntil is
	// set by New from the clock unless KeepsState.
	Quota quota.Config
	// Store holds the buckets; default a new MemStore.
	Store Store
	// KeepsState says the Store survived the previous server (PostgreSQL):
	// no hold at start.
	KeepsState bool
	// Now is the clock in µs; default a monotonic clock.
	Now func() int64
	// ClientIDMetadata is a gRPC metadata key naming the client; "" (the
	// default): every stream is a client of its own.
	ClientIDMetadata string
	// MaxBuckets bounds the buckets held, default 10000: a report for a
	// new bucket beyond it is answered DENY_ALL.
	MaxBuckets int
	// OnTickError, if set, hears of every Tick of Run that failed (the
	// Store unreachable, say); Run tries again a second later.
	OnTickError func(error)
}

// Server serves RLQS. Create it with New; call Run to step buckets whose
// grants expire, and Register to serve it on a gRPC server.
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	cfg    Config
	rules  []rule
	now    func() int64
	nextID atomic.Uint64
	// instance tells this server's streams from those of other servers
	// (and of its predecessors) sharing a Store: random.
	instance string

	mu    sync.Mutex
	conns map[string]*conn // by client ID

	m *metrics // Collectors
}

type rule struct {
	domain string
	match  map[string]string
	limit  quota.Limit
}

// New checks cfg and returns a server.
func New(cfg Config) (*Server, error) {
	if cfg.Now == nil {
		cfg.Now = clock.Monotonic
	}
	if cfg.Store == nil {
		cfg.Store = NewMemStore()
	}
	if cfg.MaxBuckets <= 0 {
		cfg.MaxBuckets = 10000
	}
	if err := cfg.Quota.Validate(); err != nil {
		return nil, err
	}
	if !cfg.KeepsState {
		d := cfg.Quota.WithDefaults()
		cfg.Quota.HoldUntil = cfg.Now() + d.TTL + d.Guard
	}
	if qc, ok := cfg.Store.(quotaConfigured); ok {
		qc.setQuota(cfg.Quota) // it rebuilds buckets: with the same configuration
	}
	var inst [8]byte
	_, _ = rand.Read(inst[:]) // never fails (crypto/rand)
	s := &Server{cfg: cfg, now: cfg.Now, conns: map[string]*conn{}, instance: hex.EncodeToString(inst[:])}
	var domains []string
	for i, r := range cfg.Rules {
		if r.Domain != "" && !slices.Contains(domains, r.Domain) && r.Domain != OtherDomain {
			domains = append(domains, r.Domain)
		}
		l, err := quota.FromCore(r.Limit)
		if err != nil {
			return nil, fmt.Errorf("rlqs: rule %d: %w", i, err)
		}
		for k, v := range r.Match {
			if k == "" || v == "" {
				return nil, fmt.Errorf("rlqs: rule %d: match entry %q=%q: keys and values must not be empty (use \"*\" for any value)", i, k, v)
			}
		}
		s.rules = append(s.rules, rule{domain: r.Domain, match: maps.Clone(r.Match), limit: l})
	}
	s.m = newMetrics(s, domains)
	return s, nil
}

// Register serves s on g.
func (s *Server) Register(g grpc.ServiceRegistrar) { rlqsv3.RegisterRateLimitQuotaServiceServer(g, s) }

// conn is one open stream.
type conn struct {
	id      string
	out     chan outMsg
	buckets map[string]bool // keys reported on this stream
	domain  string
	// seq numbers the client's reports (quota.Bucket.Report's seq), so
	// that a report a store applies twice counts once: the server's clock
	// in µs, or one more than the last when that is not above it,
	// continued from the client's previous stream on a reconnect.
	seq atomic.Uint64
}

// outMsg is a response queued on a stream, with the action it carries
// and the key of its bucket ("" for a bucket the server does not divide),
// so that one never sent can be recorded as such, and the domain label
// it is counted under once sent.
type outMsg struct {
	r   *rlqsv3.RateLimitQuotaResponse
	key string
	act quota.Action
	dom string
}

// StreamRateLimitQuotas serves one Envoy's stream: every report is applied
// to its buckets and answered, on this stream and on the streams of other
// clients whose grants move.
func (s *Server) StreamRateLimitQuotas(stream grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	ctx := stream.Context()
	c := &conn{id: s.clientID(ctx), out: make(chan outMsg, sendBuffer), buckets: map[string]bool{}}
	s.mu.Lock()
	old := s.conns[c.id]
	s.conns[c.id] = c
	if old != nil {
		c.seq.Store(old.seq.Load())
	}
	s.mu.Unlock()
	if old != nil {
		close(old.out) // the client reconnected: its old stream gets nothing more
	}
	writeErr := make(chan error, 1)
	go func() {
		for m := range c.out {
			if err := stream.Send(m.r); err != nil {
				// The stream is broken: this action and those still
				// queued never reach the client.
				lost := map[string][]quota.Action{m.key: {m.act}}
				for m := range c.out {
					lost[m.key] = append(lost[m.key], m.act)
				}
				for key, acts := range lost {
					_ = s.undelivered(context.WithoutCancel(ctx), key, acts) // best effort: the store may be down too
				}
				writeErr <- err
				return
			}
			s.m.sentOne(m.dom, m.act)
		}
		writeErr <- nil
	}()
	err := s.read(ctx, stream, c)
	s.mu.Lock()
	mine := s.conns[c.id] == c
	if mine {
		delete(s.conns, c.id)
		close(c.out)
	}
	s.mu.Unlock()
	if mine {
		now := s.now()
		for key := range c.buckets {
			_ = s.cfg.Store.Update(context.WithoutCancel(ctx), key, nil, func(e *Entry) { e.Bucket.Close(c.id, now) })
		}
	}
	if werr := <-writeErr; err == nil {
		err = werr
	}
	return err
}

func (s *Server) clientID(ctx context.Context) string {
	if k := s.cfg.ClientIDMetadata; k != "" {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get(k); len(v) == 1 && v[0] != "" && len(v[0]) <= maxClientID {
				return "id:" + v[0]
			}
		}
	}
	return fmt.Sprintf("stream:%s:%d", s.instance, s.nextID.Add(1))
}

func (s *Server) read(ctx context.Context, stream grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse], c *conn) error {
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.report(ctx, c, r); err != nil {
			return err
		}
	}
}

// report applies one RateLimitQuotaUsageReports message.
func (s *Server) report(ctx context.Context, c *conn, r *rlqsv3.RateLimitQuotaUsageReports) error {
	switch d := r.GetDomain(); {
	case d != "" && c.domain == "":
		c.domain = d
	case d != "" && d != c.domain:
		return status.Errorf(codes.InvalidArgument, "rlqs: domain %q differs from this stream's %q: open another stream for another domain", d, c.domain)
	case c.domain == "":
		return status.Error(codes.InvalidArgument, "rlqs: the first report of a stream must name its domain")
	}
	s.m.reports[s.m.domain(c.domain)].Inc()
	if n := len(r.GetBucketQuotaUsages()); n > maxUsages {
		return status.Errorf(codes.InvalidArgument, "rlqs: %d bucket usages in one report, at most %d", n, maxUsages)
	}
	now := s.now()
	seq := max(uint64(max(now, 0)), c.seq.Load()+1)
	c.seq.Store(seq)
	for i, u := range r.GetBucketQuotaUsages() {
		id := u.GetBucketId()
		if err := checkBucketID(id); err != nil {
			return status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d]: %v", i, err)
		}
		key := c.domain + "\x00" + canonical(id)
		lim, ok := s.limit(c.domain, id)
		if !ok {
			s.deny(c, id)
			continue
		}
		var acts []quota.Action
		var bid *rlqsv3.BucketId
		// Counted before Update (whose lock create runs under): a bound
		// that concurrent streams may pass by a few buckets.
		n, err := s.cfg.Store.Len(ctx)
		if err != nil {
			return status.Errorf(codes.Unavailable, "rlqs: store: %v", err)
		}
		s.m.buckets.Store(int64(n))
		full := false
		create := func() (*Entry, error) {
			if n >= s.cfg.MaxBuckets {
				full = true
				return nil, errFull
			}
			b, err := quota.NewBucket(lim, s.cfg.Quota)
			return &Entry{ID: proto.CloneOf(id), Bucket: b}, err
		}
		err = s.cfg.Store.Update(ctx, key, create, func(e *Entry) {
			if e.Bucket.Limit() != lim {
				_ = e.Bucket.SetLimit(lim) // validated by FromCore
			}
			e.Bucket.Report(c.id, seq, u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), now)
			acts, bid = e.Bucket.Step(now), e.ID
		})
		if full {
			s.deny(c, id)
			continue
		}
		if err != nil {
			return status.Errorf(codes.Unavailable, "rlqs: store: %v", err)
		}
		c.buckets[key] = true
		if err := s.route(ctx, key, bid, lim, acts); err != nil {
			return status.Errorf(codes.Unavailable, "rlqs: store: %v", err)
		}
	}
	return nil
}

var errFull = errors.New("rlqs: too many buckets")

// Tick steps every bucket at the current time: grants that expired free
// capacity for raises, idle clients are abandoned. Run calls it every
// second.
func (s *Server) Tick(ctx context.Context) error {
	now := s.now()
	keys, err := s.cfg.Store.Keys(ctx)
	if err != nil {
		return err
	}
	s.m.buckets.Store(int64(len(keys)))
	for _, key := range keys {
		var acts []quota.Action
		var id *rlqsv3.BucketId
		var lim quota.Limit
		if err := s.cfg.Store.Update(ctx, key, nil, func(e *Entry) {
			acts, id, lim = e.Bucket.Step(now), e.ID, e.Bucket.Limit()
		}); err != nil {
			return err
		}
		if err := s.route(ctx, key, id, lim, acts); err != nil {
			return err
		}
	}
	return nil
}

// Run calls Tick every second until ctx ends. A Tick that fails is
// tried again at the next second, Config.OnTickError told of it: a store
// that is down for a while must not stop the expiries for good.
func (s *Server) Run(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := s.Tick(ctx); err != nil && ctx.Err() == nil && s.cfg.OnTickError != nil {
				s.cfg.OnTickError(err)
			}
		}
	}
}

// route hands the actions of the bucket of key to their clients' streams.
// An action that cannot be handed over, because its client has no stream
// on this server (it is on another server sharing the store, or gone) or
// its stream's send buffer is full, is not sent; it is recorded as such in
// the bucket (quota.Bucket.Undelivered), so that a cut it carried is not
// taken as acknowledged by the client's next report, and is sent again.
// The stream's writer does the same for the actions a broken stream failed
// to send.
func (s *Server) route(ctx context.Context, key string, id *rlqsv3.BucketId, lim quota.Limit, acts []quota.Action) error {
	if len(acts) == 0 {
		return nil
	}
	var lost []quota.Action
	dom := s.m.domain(keyDomain(key))
	s.mu.Lock()
	for _, a := range acts {
		m := outMsg{r: &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{action(id, lim, a)}}, key: key, act: a, dom: dom}
		if c := s.conns[a.Client]; c == nil || !c.offer(m) {
			lost = append(lost, a)
		}
	}
	s.mu.Unlock()
	return s.undelivered(ctx, key, lost)
}

// undelivered records, in the bucket of key, the assignments among acts
// that never reached their clients.
func (s *Server) undelivered(ctx context.Context, key string, acts []quota.Action) error {
	acts = slices.DeleteFunc(acts, func(a quota.Action) bool { return a.Kind != quota.Assign })
	if key == "" || len(acts) == 0 {
		return nil
	}
	s.m.undelivered.Add(float64(len(acts)))
	return s.cfg.Store.Update(ctx, key, nil, func(e *Entry) {
		for _, a := range acts {
			e.Bucket.Undelivered(a.Client, a.Grant)
		}
	})
}

// offer queues m on c without blocking and reports whether it did; the
// caller holds s.mu and c is in s.conns (so c.out is open).
func (c *conn) offer(m outMsg) bool {
	select {
	case c.out <- m:
		return true
	default:
		return false
	}
}

// action writes a as Envoy reads it.
func action(id *rlqsv3.BucketId, lim quota.Limit, a quota.Action) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	ba := &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: id}
	if a.Kind == quota.Abandon {
		ba.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}
		return ba
	}
	strat := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	if !a.Grant.IsZero() {
		strat.Strategy = &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens:     uint32(a.Grant.Tokens),
			TokensPerFill: wrapperspb.UInt32(uint32(a.Grant.Fill)),
			FillInterval:  durationpb.New(time.Duration(lim.FillInterval) * time.Microsecond),
		}}
	}
	ba.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
		AssignmentTimeToLive: durationpb.New(time.Duration(a.TTL) * time.Microsecond),
		RateLimitStrategy:    strat,
	}}
	return ba
}

// deny answers a bucket the server will not divide: DENY_ALL for one TTL.
func (s *Server) deny(c *conn, id *rlqsv3.BucketId) {
	ttl := s.cfg.Quota.WithDefaults().TTL
	act := quota.Action{Kind: quota.Assign, TTL: ttl}
	r := &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
		action(proto.CloneOf(id), quota.Limit{}, act),
	}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns[c.id] == c {
		c.offer(outMsg{r: r, act: act, dom: s.m.domain(c.domain)})
	}
}

// limit finds the first rule matching the bucket.
func (s *Server) limit(domain string, id *rlqsv3.BucketId) (quota.Limit, bool) {
	b := id.GetBucket()
	for _, r := range s.rules {
		if r.domain != "" && r.domain != domain {
			continue
		}
		ok := true
		for k, v := range r.match {
			got, has := b[k]
			if !has || (v != "*" && v != got) {
				ok = false
				break
			}
		}
		if ok {
			return r.limit, true
		}
	}
	return quota.Limit{}, false
}

func checkBucketID(id *rlqsv3.BucketId) error {
	if id == nil {
		return errors.New("no bucket_id: this server reads bucket_quota_usages as the repeated list Envoy's filter sends (go-control-plane v1.40.0), not the map<uint64, BucketQuotaUsage> of an earlier draft")
	}
	m := id.GetBucket()
	if len(m) == 0 || len(m) > maxPairs {
		return fmt.Errorf("bucket_id has %d entries, want 1 to %d", len(m), maxPairs)
	}
	for k, v := range m {
		if k == "" || v == "" || len(k) > maxPairLen || len(v) > maxPairLen {
			return fmt.Errorf("bucket_id entry %.40q=%.40q: keys and values must be 1 to %d bytes", k, v, maxPairLen)
		}
	}
	return nil
}

// canonical writes a bucket id as its sorted entries, each length-prefixed
// so that no two ids share a form.
func canonical(id *rlqsv3.BucketId) string {
	m := id.GetBucket()
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%d:%s%d:%s", len(k), k, len(m[k]), m[k])
	}
	return b.String()
}
