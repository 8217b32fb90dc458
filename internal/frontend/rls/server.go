package rls

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/internal/request/outage"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
)

type entry = commonv3.RateLimitDescriptor_Entry

// Defaults of Options.
const (
	DefaultMaxDescriptors = 64
	DefaultMaxEntries     = 16
)

// Options configures a Server. Zero fields take the documented defaults.
type Options struct {
	// Trusted reports that only trusted peers reach the listener
	// (loopback): without api_tokens in the Service's configuration every
	// caller may call, as on the decision API's own listener. Otherwise
	// each call needs the gRPC metadata "authorization: Bearer <token>"
	// with a configured token (Envoy sends it with the rate limit
	// cluster's grpc_service initial_metadata).
	Trusted bool
	// MaxDescriptors bounds the descriptors of one request. Default 64.
	MaxDescriptors int
	// MaxEntries bounds the entries of one descriptor. Default 16.
	MaxEntries int
	// ResponseMetadata sets each response's dynamic_metadata, with the
	// metadata of the descriptors that passed (see responseMetadata), as
	// envoyproxy/ratelimit does with RESPONSE_DYNAMIC_METADATA=true.
	// Default off: the metadata fields of the configuration are then read
	// and not sent.
	ResponseMetadata bool
}

// Host is the process the rate limit service runs in, beside other front
// ends (rl-wasm-host's service is one): the decision engine they share
// (its store, clock, per-key bound and outage detector), its logger and
// metrics registry, its api_tokens and its drain. The rate limit service
// imports no other front end: it reaches the rest through this.
type Host interface {
	// Engine decides.
	Engine() *engine.Engine
	// Logger receives the logs.
	Logger() *slog.Logger
	// Register adds collectors to the metrics the host serves.
	Register(cs ...prometheus.Collector) error
	// Authorized reports whether a caller presenting authorization (the
	// metadata "authorization: Bearer <token>") may call; trusted: the
	// listener is reached only from loopback.
	Authorized(trusted bool, authorization string) bool
	// HasAPITokens reports whether the configuration in force has
	// api_tokens.
	HasAPITokens() bool
	// AddTokensCheck adds a check every reload of the host's
	// configuration must pass, given whether it has api_tokens.
	AddTokensCheck(check func(tokens bool) error)
	// OnDrain registers f to run when the host starts draining.
	OnDrain(f func())
}

// Server implements envoy.service.ratelimit.v3.RateLimitService over a
// Host's decision engine. Create it with New; it is safe for concurrent
// use, and SetConfig swaps the configuration atomically.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	host       Host
	eng        *engine.Engine
	log        *slog.Logger
	set        atomic.Pointer[ruleSet]
	m          *metrics
	unknown    *domainMetrics
	trusted    bool
	maxDesc    int
	maxEntries int
	maxKey     int
	respMeta   bool
	logged     atomic.Int64 // unix ns of the last store-failure log line
}

type ruleSet struct {
	cfg     *Config
	domains map[string]*domainSet
	names   string         // the configured domains, for the unknown domains' log line
	unknown unknownDomains // the unknown domains logged under this configuration
}

// maxUnknownDomains bounds the unknown domains a configuration remembers
// having logged: past it one more line says so and the rest are only
// counted (rl_rls_unknown_domain_total), so that a caller naming a new
// domain in every call grows neither the memory nor the log.
const maxUnknownDomains = 64

// maxLoggedDomain is the most of an unknown domain a log line shows, in
// bytes: the domain is the caller's.
const maxLoggedDomain = 128

// unknownDomains remembers the unknown domains that were logged, at most
// maxUnknownDomains of them.
type unknownDomains struct {
	mu   sync.Mutex
	seen map[string]struct{}
	full atomic.Bool // maxUnknownDomains remembered, and said so
}

// first reports whether domain is to be logged (seen for the first time,
// with room to remember it), and whether the set has just become full
// (logged once, then never again).
func (u *unknownDomains) first(domain string) (log, full bool) {
	if u.full.Load() {
		return false, false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.seen[domain]; ok || u.full.Load() {
		return false, false
	}
	if len(u.seen) == maxUnknownDomains {
		u.full.Store(true)
		return false, true
	}
	if u.seen == nil {
		u.seen = make(map[string]struct{})
	}
	u.seen[domain] = struct{}{}
	return true, false
}

type domainSet struct {
	d   *Domain
	ns  string // the limiter's base key, and the per-key gate's namespace
	lim *rl.Limiter
	m   *domainMetrics
}

// New returns a Server deciding by cfg with host's engine.
func New(host Host, cfg *Config, opts Options) (*Server, error) {
	if host == nil || cfg == nil {
		return nil, errors.New("rls: nil Host or Config")
	}
	eng := host.Engine()
	s := &Server{host: host, eng: eng, log: host.Logger(), m: newMetrics(), trusted: opts.Trusted,
		maxDesc: opts.MaxDescriptors, maxEntries: opts.MaxEntries, maxKey: eng.MaxKeyLength(), respMeta: opts.ResponseMetadata}
	if s.maxDesc <= 0 {
		s.maxDesc = DefaultMaxDescriptors
	}
	if s.maxEntries <= 0 {
		s.maxEntries = DefaultMaxEntries
	}
	if err := s.m.register(host.Register); err != nil {
		return nil, fmt.Errorf("rls: metrics: %w", err)
	}
	s.unknown = s.m.forDomain(unknownDomain)
	if err := s.SetConfig(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// KeyPrefix is the base key of a domain's state: a descriptor of domain d
// is kept under "rls:" + d (in PostgreSQL the row key is
// "rls:<domain>:<descriptor key>"). No rule of the service is named "rls"
// and no domain holds ':' (ruleconfig's Store keys), so no rule's key and
// no other domain's reaches a domain's state.
const KeyPrefix = ruleconfig.RLSNamespace + ":"

// SetConfig swaps in cfg: calls in flight finish under the old one. A
// Config belongs to one Server (its limits take that Server's counters).
func (s *Server) SetConfig(cfg *Config) error {
	rs := &ruleSet{cfg: cfg, domains: make(map[string]*domainSet, len(cfg.Domains))}
	for name, d := range cfg.Domains {
		lim, err := s.eng.Limiter(KeyPrefix+name, nil)
		if err != nil {
			return fmt.Errorf("rls: domain %q: %w", name, err)
		}
		rs.domains[name] = &domainSet{d: d, ns: KeyPrefix + name, lim: lim, m: s.m.forDomain(name)}
		var shadowErr error
		d.limits(func(path string, l *Limit) {
			if l.m == nil { // set once: a Config in force may be set again
				l.m = s.m.forDescriptor(name, path, l)
			}
			if no := s.eng.ShadowUnsupported(); no != nil && len(l.ShadowLimits) > 0 && shadowErr == nil {
				shadowErr = fmt.Errorf("rls: domain %q: descriptor %q has shadow_limits, which this store cannot decide: %w", name, path, no)
			}
		})
		if shadowErr != nil {
			return shadowErr
		}
	}
	names := slices.Sorted(maps.Keys(rs.domains))
	for i, n := range names {
		names[i] = strconv.Quote(n)
	}
	rs.names = strings.Join(names, ", ")
	s.set.Store(rs)
	return nil
}

// Config returns the configuration in force.
func (s *Server) Config() *Config { return s.set.Load().cfg }

// item is one descriptor of a request.
type item struct {
	n    *node
	key  string
	cost int64
	// check: hits_addend 0 given on the descriptor: a peek of one unit,
	// OVER_LIMIT when one more would be denied, charging nothing.
	check bool
	// badCost: the cost is out of range (pipeline.CheckCost): the
	// descriptor never passes (denyAll), whatever its state.
	badCost bool
	// same is the index of an earlier descriptor with the same limit and
	// key, whose decision (costs summed) this one shares; -1 when none.
	same     int
	replaced bool
	decided  bool
	taken    bool
	res      rl.Result
	out      engine.Outcome
	// each holds every limit's result of a limit with shadow_limits (the
	// rate_limit's, then each shadow limit's); nil otherwise.
	each []rl.LimitResult
}

func (it *item) limit() *Limit {
	if it.n == nil || it.replaced {
		return nil
	}
	return it.n.limit
}

// enforced reports whether the item takes part in the request's all or
// nothing decision.
func (it *item) enforced() bool {
	l := it.limit()
	return l != nil && !l.Unlimited && !l.Shadow && it.same < 0
}

// errOverload is a decision refused because of load.
var errOverload = errors.New("overloaded")

// ShouldRateLimit decides every descriptor of req all or nothing: a request
// is charged on each of its limits only when every one admits it. See the
// package documentation.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	if err := s.authenticate(ctx); err != nil {
		return nil, err
	}
	rs := s.set.Load()
	descs := req.GetDescriptors()
	switch {
	case req.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "domain: empty")
	case len(descs) == 0 || len(descs) > s.maxDesc:
		return nil, status.Errorf(codes.InvalidArgument, "descriptors: %d, want 1 to %d", len(descs), s.maxDesc)
	}
	ds := rs.domains[req.GetDomain()]
	dm := s.unknown
	if ds != nil {
		dm = ds.m
	}
	items := make([]item, len(descs))
	for i, d := range descs {
		it := &items[i]
		it.same = -1
		if err := s.parseDescriptor(i, d, req.GetHitsAddend(), it); err != nil {
			dm.failed.Inc()
			return nil, err
		}
		if ds != nil {
			it.n = ds.d.match(d.GetEntries())
		}
	}
	if ds == nil {
		s.unknownDomain(rs, req.GetDomain())
		dm.unmatched.Add(float64(len(items)))
		dm.ok.Inc()
		resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: okStatuses(len(items))}
		if s.respMeta {
			resp.DynamicMetadata = responseMetadata(req, items, resp.Statuses)
		}
		return resp, nil
	}
	s.prepare(items, descs, ds.ns)

	denied, overloaded, err := s.decideAll(ctx, ds, items)
	if err != nil {
		dm.failed.Inc()
		s.count(items, true, false)
		return nil, err
	}
	resp := s.respond(items, denied, overloaded)
	if s.respMeta {
		resp.DynamicMetadata = responseMetadata(req, items, resp.Statuses)
	}
	if sh := shadowMetadata(items); sh != nil {
		if resp.DynamicMetadata == nil {
			resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		}
		resp.DynamicMetadata.Fields["shadowLimits"] = sh
	}
	s.count(items, denied, overloaded)
	if denied {
		dm.overLimit.Inc()
	} else {
		dm.ok.Inc()
	}
	for i := range items {
		if items[i].limit() == nil {
			dm.unmatched.Inc()
		}
	}
	s.m.latency.Observe(time.Since(start).Seconds())
	return resp, nil
}

// parseDescriptor checks descriptor i and sets its cost: the descriptor's
// hits_addend when given (0: a check, a peek of one unit charging nothing),
// else the request's, 0 meaning 1. A cost the one cost rule refuses
// (pipeline.CheckCost: above core.MaxCost) is no error: Envoy takes
// hits_addend from request headers, and its failure_mode_deny (false by
// default) admits a request whose call failed. The descriptor is answered
// OVER_LIMIT instead, like a limit no request passes.
func (s *Server) parseDescriptor(i int, d *commonv3.RateLimitDescriptor, hits uint32, it *item) error {
	n := len(d.GetEntries())
	switch {
	case n == 0 || n > s.maxEntries:
		return status.Errorf(codes.InvalidArgument, "descriptors[%d].entries: %d, want 1 to %d", i, n, s.maxEntries)
	case d.GetIsNegativeHits():
		return status.Errorf(codes.InvalidArgument, "descriptors[%d].is_negative_hits: not supported (a decision is never refunded)", i)
	case d.GetLimit() != nil:
		return status.Errorf(codes.InvalidArgument, "descriptors[%d].limit: limit overrides are not supported; configure the limit in the rate limit service's configuration", i)
	}
	if h := d.GetHitsAddend(); h != nil {
		if h.GetValue() == 0 {
			it.check = true
		}
		it.cost = int64(min(h.GetValue(), math.MaxInt64))
	} else {
		it.cost = int64(max(1, hits))
	}
	if pipeline.CheckCost(it.cost, 0) != nil {
		it.cost, it.badCost = core.MaxCost, true
	}
	return nil
}

// prepare applies replaces, computes keys, and merges descriptors with the
// same limit and key (their costs summed: one decision for both).
func (s *Server) prepare(items []item, descs []*commonv3.RateLimitDescriptor, ns string) {
	if len(items) > 1 {
		// As in envoyproxy/ratelimit, an unlimited limit replaces others
		// (exempting a descriptor from them) but is never replaced.
		var replaced map[string]bool
		for i := range items {
			if l := items[i].limit(); l != nil && len(l.Replaces) > 0 {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				for _, r := range l.Replaces {
					replaced[r] = true
				}
			}
		}
		for i := range items {
			if l := items[i].limit(); l != nil && l.Name != "" && replaced[l.Name] && !l.Unlimited {
				items[i].replaced = true
			}
		}
	}
	for i := range items {
		it := &items[i]
		l := it.limit()
		if l == nil || l.Unlimited || l.RequestsPerUnit == 0 {
			continue
		}
		// The store sees "<ns>:<key>": the key fits what is left.
		it.key = descriptorKey(descs[i].GetEntries(), it.n.shared, s.maxKey-len(ns)-1)
		for j := 0; j < i; j++ {
			o := &items[j]
			if o.same < 0 && o.n == it.n && o.key == it.key && !o.replaced {
				it.same = j
				o.cost += it.cost
				o.check = o.check && it.check
				if o.badCost = o.badCost || it.badCost; pipeline.CheckCost(o.cost, 0) != nil {
					o.cost, o.badCost = core.MaxCost, true
				}
				break
			}
		}
	}
}

// decideAll decides the request: the enforced descriptors all or nothing,
// then the check-only and shadow ones. It reports whether the request is
// denied and whether for load; an error is the call's answer (a store down
// under a fail-closed limit).
//
// One enforced descriptor is one atomic step. Several are keys of their
// own, and no store has a step over several keys, so they are decided in
// two phases, as the decision API's atomic batch: every one is checked
// without charging, and only when the request passes (verdict) is each one
// taken that has room. A concurrent request may drain a descriptor between
// its check and its take (one store round trip); that take is then denied,
// the request answered OVER_LIMIT if it no longer passes, and the
// descriptors taken before it stay charged (counted in
// rl_rls_partial_total). The race only under-admits: every take is exact.
func (s *Server) decideAll(ctx context.Context, ds *domainSet, items []item) (denied, overloaded bool, err error) {
	var enforced []int
	denyAlls := false
	for i := range items {
		if items[i].enforced() {
			if items[i].n.limit.RequestsPerUnit == 0 || items[i].badCost {
				denyAlls = true
				s.denyAll(&items[i])
				continue
			}
			enforced = append(enforced, i)
		}
	}
	fail := func(it *item, err error) (bool, bool, error) {
		if errors.Is(err, errOverload) {
			it.out = engine.Overloaded
			return true, true, nil
		}
		return true, false, err
	}
	switch {
	case denyAlls || len(enforced) > 1:
		for _, i := range enforced {
			it := &items[i]
			if err := s.decide(ctx, ds, it, true); err != nil {
				return fail(it, err)
			}
		}
		if denied = verdict(items); denied {
			break
		}
		taken := 0
		for _, i := range enforced {
			it := &items[i]
			if it.out == engine.FailOpen || it.out == engine.Denied { // a quota without room: not charged
				continue
			}
			if err := s.decide(ctx, ds, it, false); err != nil {
				if taken > 0 {
					ds.m.partial.Inc()
				}
				return fail(it, err)
			}
			if it.taken {
				taken++
			}
			if it.out == engine.Denied && !it.n.limit.Quota {
				break // raced: denied, whatever comes after
			}
		}
		if denied = verdict(items); denied && taken > 0 {
			ds.m.partial.Inc()
		}
	case len(enforced) == 1:
		it := &items[enforced[0]]
		if err := s.decide(ctx, ds, it, false); err != nil {
			return fail(it, err)
		}
		denied = verdict(items)
	}
	for i := range items {
		it := &items[i]
		l := it.limit()
		if l == nil || l.Unlimited || it.same >= 0 || it.enforced() {
			continue
		}
		if l.RequestsPerUnit == 0 || it.badCost {
			s.denyAll(it)
			continue
		}
		// Check-only descriptors are never charged; shadow ones are
		// charged when the request is admitted, as they would be if
		// enforced. Their failures deny nothing.
		if err := s.decide(ctx, ds, it, it.check || denied); err != nil {
			it.out = 0
			if errors.Is(err, errOverload) {
				it.out = engine.Overloaded
			}
		}
	}
	return denied, false, nil
}

// verdict reports whether the decided enforced descriptors deny the
// request, as envoyproxy/ratelimit combines its statuses: when one that is
// not in quota_mode denies it, or when the quota_mode ones do
// (quotasDeny).
func verdict(items []item) bool {
	for i := range items {
		it := &items[i]
		if l := it.limit(); l != nil && !l.Unlimited && !l.Quota && !l.Shadow && it.same < 0 && it.out == engine.Denied {
			return true
		}
	}
	return quotasDeny(items)
}

// quotasDeny reports whether the request has quota_mode descriptors and
// every one of them denies it; a shadow_mode one never does, so with one
// the quotas never deny.
func quotasDeny(items []item) bool {
	quotas := false
	for i := range items {
		it := &items[i]
		if l := it.limit(); l != nil && !l.Unlimited && l.Quota && it.same < 0 {
			if l.Shadow || it.out != engine.Denied {
				return false
			}
			quotas = true
		}
	}
	return quotas
}

// decide decides one descriptor, peek or take, into it, with the engine
// (the per-key bound, the store, the outage detector, the failure rule).
// It returns errOverload for load, or the gRPC error answering a store
// that is down under a fail-closed limit.
func (s *Server) decide(ctx context.Context, ds *domainSet, it *item, peek bool) error {
	l := it.n.limit
	cost := it.cost
	if it.check {
		// A check is a peek of one unit: it denies what one more
		// request would be denied, and charges nothing. A peek of 0
		// would admit an exhausted key (Envoy can take hits_addend
		// from a request header, so a client could send 0).
		cost, peek = 1, true
	}
	var each []rl.LimitResult
	if len(l.ShadowLimits) > 0 {
		each = make([]rl.LimitResult, l.policy.Len())
	}
	// The descriptor's limit, matched: everything after the match is the
	// engine's, as for every front end.
	r := engine.Rule{Name: ds.ns, Limiter: ds.lim, Policy: l.policy, FailOpen: l.FailOpen}
	d := s.eng.Run(ctx, &r, &engine.Input{Key: it.key, Cost: cost, Peek: peek, Each: each})
	switch d.Outcome {
	case engine.Allowed, engine.Denied:
		it.res, it.decided, it.each, it.out = d.Result, true, each, d.Outcome
		it.taken = !peek && d.Outcome == engine.Allowed
		return nil
	case engine.InvalidKey, engine.InvalidCost:
		return status.Errorf(codes.InvalidArgument, "%v", d.Err) // not reached: keys are encoded, costs checked
	}
	if errors.Is(d.Err, engine.ErrOverloaded) {
		return errOverload // the per-key bound: counted by the engine
	}
	ds.m.storeErrors.Inc()
	switch {
	case d.Outcome == engine.FailOpen:
		s.logFailure("store down; answering OK (fail_open)", ds, d.Err)
		it.out = engine.FailOpen
		return nil
	case d.Class == outage.Outage:
		s.logFailure("store down; failing the call (UNAVAILABLE: Envoy's failure_mode_deny decides)", ds, d.Err)
		it.out = engine.FailClosed
		return status.Error(codes.Unavailable, "rate limit store unavailable")
	}
	// Load, a store failure that is not an outage, a corrupt state:
	// refused, never admitted.
	s.logFailure("store busy or failing; answering OVER_LIMIT (load is never admitted)", ds, d.Err)
	return errOverload
}

// denyAll decides a descriptor no request passes, a limit of
// requests_per_unit 0 or a cost out of range (badCost): denied, no retry
// passes, nothing stored.
func (s *Server) denyAll(it *item) {
	l := it.n.limit
	it.decided, it.out = true, engine.Denied
	it.res = rl.Result{LimitResult: rl.LimitResult{Name: "deny_all", Limit: int64(l.RequestsPerUnit), Window: l.window, Never: true,
		ResetAfter: untilWindowEnd(s.eng.Clock()(), l.window)}}
}

// unknownDomain counts a call naming a domain rs lacks, answered OK with
// nothing limited (as envoyproxy/ratelimit answers it), and logs it the
// first time the configuration sees that domain: a typo in Envoy's domain
// would otherwise admit everything silently. At most maxUnknownDomains
// domains are remembered and logged per configuration (a reload starts
// again), one more line saying the rest are only counted.
func (s *Server) unknownDomain(rs *ruleSet, domain string) {
	s.m.unknownDomain.Inc()
	log, full := rs.unknown.first(domain)
	switch {
	case log:
		if len(domain) > maxLoggedDomain {
			domain = strings.ToValidUTF8(domain[:maxLoggedDomain], "") + "..."
		}
		s.log.Warn("rls: a call names a domain the configuration lacks: answered OK, nothing limited; Envoy's rate limit domain must be one of the configured domains",
			"domain", domain, "configured", rs.names)
	case full:
		s.log.Warn("rls: too many unknown domains to log each; the next ones are only counted in rl_rls_unknown_domain_total until the configuration is reloaded",
			"logged", maxUnknownDomains, "configured", rs.names)
	}
}

// logFailure logs at most one store failure a second.
func (s *Server) logFailure(msg string, ds *domainSet, err error) {
	now := time.Now().UnixNano()
	last := s.logged.Load()
	if now-last < int64(time.Second) || !s.logged.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("rls: "+msg, "domain", ds.d.Name, "err", err)
}

// respond builds the response: a status per descriptor, the overall code,
// and the rate-limit header fields of the deciding descriptor.
func (s *Server) respond(items []item, denied, overloaded bool) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(items))}
	if denied {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	deciding := -1
	var (
		listed     []rl.LimitResult // the RateLimit fields' limits
		listedItem []int            // the item of each
	)
	// Quotas deny together: the one that readmits first speaks for them.
	// A quota without room in a request that passes denies nothing.
	quotaRep := -1
	if denied && quotasDeny(items) {
		for i := range items {
			if l := items[i].limit(); l != nil && l.Quota && !l.Unlimited && items[i].same < 0 &&
				(quotaRep < 0 || laterRetry(&items[quotaRep].res, &items[i].res)) {
				quotaRep = i
			}
		}
	}
	for i := range items {
		it := &items[i]
		src := it
		if it.same >= 0 {
			src = &items[it.same]
		}
		l := it.limit()
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch {
		case l == nil:
			continue
		case l.Unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		st.CurrentLimit = l.current
		switch {
		case src.out == engine.Overloaded:
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			continue
		case !src.decided:
			continue
		}
		if src.out == engine.Denied && !l.Shadow {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		rem := src.res.Remaining
		if src.out == engine.Allowed && !src.taken {
			// Checked, not charged: what remains is what it had (a
			// check peeked one unit).
			if src.check {
				rem++
			} else {
				rem += src.cost
			}
		}
		st.LimitRemaining = uint32(min(rem, math.MaxUint32))
		st.DurationUntilReset = durationpb.New(src.res.ResetAfter)
		if l.Shadow || it.same >= 0 || l.Quota && src.out == engine.Denied && i != quotaRep {
			continue
		}
		// One item of the RateLimit fields per enforced descriptor, named
		// by its limit's name or its descriptor (configuration, never a
		// request's values).
		lr := src.res.LimitResult
		lr.Name = cmp.Or(l.Name, it.n.path)
		if rem != src.res.Remaining {
			// Checked, not charged: r is what it has; when more comes
			// back is not known (the check decided a state with the
			// cost taken), so t is left out.
			lr.Remaining, lr.NextAfter = rem, 0
		}
		listed = append(listed, lr)
		listedItem = append(listedItem, i)
		// The header fields describe the deciding descriptor: when denied,
		// the denying one with the latest retry; else the one with the
		// fewest remaining.
		switch d := deciding; {
		case d < 0:
			deciding = i
		case src.out == engine.Denied && (items[d].out != engine.Denied || laterRetry(&src.res, &items[d].res)):
			deciding = i
		case src.out != engine.Denied && items[d].out != engine.Denied && src.res.Remaining < items[d].res.Remaining:
			deciding = i
		}
	}
	switch {
	case overloaded:
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: "retry-after", Value: "1"}}
	case deciding >= 0:
		res := items[deciding].res
		res.Index = slices.Index(listedItem, deciding)
		res.LimitResult = listed[res.Index]
		resp.ResponseHeadersToAdd = headerValues(res, listed)
	}
	return resp
}

// headerNames are the fields pipeline.AppendFields writes (as every HTTP
// front end sends them), in the order they are sent.
var headerNames = []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}

// headerValues are the draft-11 RateLimit and RateLimit-Policy fields, the
// X-RateLimit-* fields and, on a denial a retry can pass, Retry-After, as
// the HTTP front ends write them (engine.Verdict, pipeline.AppendFields):
// every enforced descriptor's limit (each) listed, the deciding one (r)
// first on a denial and in the X-RateLimit-* fields.
func headerValues(r rl.Result, each []rl.LimitResult) []*corev3.HeaderValue {
	var buf [pipeline.MaxFields][2]string
	v := engine.Verdict(r, each)
	kvs := pipeline.AppendFields(buf[:0], &v, &pipeline.Fields{})
	out := make([]*corev3.HeaderValue, 0, len(headerNames))
	for i, k := range headerNames {
		for _, kv := range kvs {
			if strings.EqualFold(kv[0], k) && kv[1] != "" {
				out = append(out, &corev3.HeaderValue{Key: lowerHeaderNames[i], Value: kv[1]})
				break
			}
		}
	}
	return out
}

// lowerHeaderNames are headerNames in lower case (HTTP/2's), once.
var lowerHeaderNames = func() (l []string) {
	for _, k := range headerNames {
		l = append(l, strings.ToLower(k))
	}
	return l
}()

// laterRetry reports whether a's retry is later than b's (Never latest).
func laterRetry(a, b *rl.Result) bool {
	if b.Never {
		return false
	}
	return a.Never || a.RetryAfter > b.RetryAfter
}

// untilWindowEnd is the time from now (µs) to the end of the epoch-aligned
// window of length w.
func untilWindowEnd(now int64, w time.Duration) time.Duration {
	us := int64(w / time.Microsecond)
	return time.Duration(us-now%us) * time.Microsecond
}

func okStatuses(n int) []*rlsv3.RateLimitResponse_DescriptorStatus {
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return st
}

// count records each descriptor's outcome.
func (s *Server) count(items []item, denied, overloaded bool) {
	for i := range items {
		it := &items[i]
		l := it.limit()
		if l == nil || l.m == nil {
			continue
		}
		src := it
		if it.same >= 0 {
			src = &items[it.same]
		}
		switch {
		case l.Unlimited:
			l.m.unlimited.Inc()
		case src.out == engine.Overloaded:
			l.m.overloaded.Inc()
		case src.out == engine.FailOpen:
			l.m.failOpen.Inc()
		case src.out == engine.FailClosed:
			l.m.failClosed.Inc()
		case src.out == engine.Denied && l.Shadow:
			l.m.shadowDenied.Inc()
		case src.out == engine.Denied, src.out == engine.Allowed && denied && !l.Shadow && !it.check:
			l.m.denied.Inc()
		case src.out == engine.Allowed:
			l.m.allowed.Inc()
		}
		if it.same < 0 && it.taken {
			// Charged: each shadow limit that would have denied it
			// (the results after the rate_limit's own).
			for j, c := range l.m.wouldDeny {
				if r := &it.each[1+j]; !r.Allowed {
					c.Inc()
				}
			}
		}
	}
}

// authenticate admits a call by the api_tokens in force: on a trusted
// listener without tokens every caller; otherwise a caller sending the
// metadata "authorization: Bearer <token>" with a configured token.
func (s *Server) authenticate(ctx context.Context) error {
	var authz string
	if !s.trusted || s.host.HasAPITokens() {
		if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
			authz = v[0]
		}
	}
	if !s.host.Authorized(s.trusted, authz) {
		return status.Error(codes.Unauthenticated, "the rate limit service needs the metadata \"authorization: Bearer <token>\" with a token of the configuration's api_tokens")
	}
	return nil
}
