package quotaclient

import (
	"errors"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

const sec = int64(time.Second / time.Microsecond)

// t0 is the base instant of every step list.
const t0 = 1_700_000_000 * sec

// ceiling100 is a global limit of 100 per second, burst 10.
var ceiling100 = core.Limit{Algorithm: core.TokenBucket, Limit: 10, Rate: 100, Window: sec}

func testBucket(t *testing.T, fallback *core.Limit) *Bucket {
	t.Helper()
	b, err := newBucket(BucketSpec{ID: map[string]string{"name": "api"}, Ceiling: ceiling100, Fallback: fallback, RetryAfter: sec})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// step is one thing done to a bucket at t0+at: an action applied, or a
// request decided and its outcome checked.
type step struct {
	at        int64
	apply     *Action
	op        store.Op
	cost      int64
	allowed   bool
	remaining int64 // checked when allowed
}

func tb(tokens, fill, interval, ttl int64) *Action {
	return &Action{Kind: TokenBucket, MaxTokens: tokens, TokensPerFill: fill, FillInterval: interval, TTL: ttl}
}

func TestBucketDecide(t *testing.T) {
	fallback := &core.Limit{Algorithm: core.TokenBucket, Limit: 2, Rate: 1, Window: 10 * sec}
	cases := []struct {
		name     string
		fallback *core.Limit
		steps    []step
	}{
		{"no assignment, no fallback: denied", nil, []step{
			{at: 0, cost: 1}, {at: 5 * sec, cost: 1},
		}},
		{"no assignment: the fallback per replica", fallback, []step{
			{at: 0, cost: 1, allowed: true, remaining: 1}, {at: 0, cost: 1, allowed: true}, {at: 0, cost: 1},
		}},
		{"a token bucket until its TTL, then the fallback (deny)", nil, []step{
			{at: 0, apply: tb(5, 1, sec, 2*sec)},
			{at: 0, cost: 3, allowed: true, remaining: 2}, {at: 0, cost: 2, allowed: true}, {at: 0, cost: 1},
			{at: sec, cost: 1, allowed: true}, // one token per second came back
			{at: 2 * sec, cost: 1},            // expired: denied, though the bucket has a token
		}},
		{"a burst above the ceiling is clamped to it", nil, []step{
			{at: 0, apply: tb(1000, 1, sec, 10*sec)},
			{at: 0, cost: 10, allowed: true}, {at: 0, cost: 1},
		}},
		{"a rate above the ceiling is clamped to it", nil, []step{
			{at: 0, apply: tb(10, 1_000_000, sec, 10*sec)},
			{at: 0, cost: 10, allowed: true},
			{at: sec / 10, cost: 10, allowed: true}, // 100/s: 10 in 100 ms
			{at: sec / 10, cost: 1},
		}},
		{"a changed assignment carries the units used: it does not start full", nil, []step{
			{at: 0, apply: tb(4, 1, 60*sec, 10*sec)},
			{at: 0, cost: 3, allowed: true, remaining: 1},
			{at: 0, apply: tb(8, 1, 60*sec, 10*sec)},
			{at: 0, cost: 5, allowed: true, remaining: 0}, // 8 − 3 used, not 8
			{at: 0, cost: 1},
		}},
		{"DENY_ALL until its TTL, then the fallback", fallback, []step{
			{at: 0, apply: &Action{Kind: DenyAll, TTL: sec}},
			{at: 0, cost: 1},
			{at: sec, cost: 1, allowed: true, remaining: 1},
		}},
		{"ALLOW_ALL is the ceiling", nil, []step{
			{at: 0, apply: &Action{Kind: AllowAll, TTL: sec}},
			{at: 0, cost: 10, allowed: true}, {at: 0, cost: 1},
		}},
		{"abandon: the fallback", fallback, []step{
			{at: 0, apply: tb(5, 1, sec, 10*sec)},
			{at: 0, apply: &Action{Kind: Abandon}},
			{at: 0, cost: 2, allowed: true}, {at: 0, cost: 1},
		}},
		{"a peek of nothing is admitted, denied or not", nil, []step{
			{at: 0, op: store.Peek, cost: 0, allowed: true},
			{at: 0, op: store.Peek, cost: 1},
		}},
		{"a settle refund gives units back", nil, []step{
			{at: 0, apply: tb(5, 1, 60*sec, 10*sec)},
			{at: 0, cost: 5, allowed: true},
			{at: 0, op: store.Settle, cost: -2, allowed: true, remaining: 2},
			{at: 0, cost: 2, allowed: true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := testBucket(t, tc.fallback)
			for i, s := range tc.steps {
				if s.apply != nil {
					if err := b.Apply(*s.apply, t0+s.at); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					continue
				}
				d, err := b.Decide(s.op, t0+s.at, s.cost)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if d.Allowed != s.allowed || (s.allowed && s.op != store.Peek && d.Remaining != s.remaining) {
					t.Fatalf("step %d (at %dµs, cost %d): allowed %v remaining %d, want %v %d", i, s.at, s.cost, d.Allowed, d.Remaining, s.allowed, s.remaining)
				}
				if !d.Allowed && s.cost > 0 && d.RetryAfter <= 0 {
					t.Fatalf("step %d: denied with RetryAfter %d", i, d.RetryAfter)
				}
			}
		})
	}
}

func TestBucketUsageCountsCost(t *testing.T) {
	b := testBucket(t, nil)
	if err := b.Apply(*tb(10, 100, sec, 10*sec), t0); err != nil {
		t.Fatal(err)
	}
	for _, cost := range []int64{3, 4, 5} { // 3 and 4 admitted, 5 denied (3 left)
		if _, err := b.Decide(store.Take, t0, cost); err != nil {
			t.Fatal(err)
		}
	}
	if a, d := b.usage(); a != 7 || d != 5 {
		t.Fatalf("usage %d allowed, %d denied; want the units 7 and 5", a, d)
	}
	// A refund beyond what was allowed since the last report waits for the
	// next: a report carries no negative count.
	if _, err := b.Decide(store.Settle, t0, -4); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Decide(store.Take, t0, 1); err != nil {
		t.Fatal(err)
	}
	if a, _ := b.usage(); a != 0 {
		t.Fatalf("usage %d allowed after a refund of 4 and 1 allowed; want 0", a)
	}
	if _, err := b.Decide(store.Take, t0+sec, 5); err != nil {
		t.Fatal(err)
	}
	if a, _ := b.usage(); a != 2 {
		t.Fatalf("usage %d allowed: want 5 less the 3 of refund left", a)
	}
	if st := b.Stats(t0); st.Allowed != 4 || st.Denied != 1 {
		t.Fatalf("stats %+v, want 4 requests allowed and 1 denied", st)
	}
}

func TestBucketSpecCheck(t *testing.T) {
	long := string(make([]byte, MaxEntryLen+1))
	cases := []struct {
		name string
		spec BucketSpec
	}{
		{"no entries", BucketSpec{Ceiling: ceiling100, RetryAfter: 1}},
		{"an empty value", BucketSpec{ID: map[string]string{"name": ""}, Ceiling: ceiling100, RetryAfter: 1}},
		{"a long key", BucketSpec{ID: map[string]string{long: "x"}, Ceiling: ceiling100, RetryAfter: 1}},
		{"a ceiling under one token a second", BucketSpec{ID: map[string]string{"a": "b"}, Ceiling: core.Limit{Algorithm: core.FixedWindow, Limit: 1, Window: 3600 * 1_000_000 * 24 * 30}, RetryAfter: 1}},
		{"an invalid fallback", BucketSpec{ID: map[string]string{"a": "b"}, Ceiling: ceiling100, Fallback: &core.Limit{Algorithm: core.TokenBucket}, RetryAfter: 1}},
		{"no retry after", BucketSpec{ID: map[string]string{"a": "b"}, Ceiling: ceiling100}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.spec.Check(); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestParseAction(t *testing.T) {
	ttl := durationpb.New(3 * time.Second)
	assign := func(s *typev3.RateLimitStrategy, ttl *durationpb.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
		return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{AssignmentTimeToLive: ttl, RateLimitStrategy: s}}}
	}
	bucket := func(max uint32, fill *wrapperspb.UInt32Value, interval *durationpb.Duration) *typev3.RateLimitStrategy {
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{MaxTokens: max, TokensPerFill: fill, FillInterval: interval}}}
	}
	blanket := func(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
	}
	cases := []struct {
		name string
		in   *rlqsv3.RateLimitQuotaResponse_BucketAction
		want Action // Kind 0: refused
	}{
		{"token bucket", assign(bucket(10, wrapperspb.UInt32(6000), durationpb.New(time.Minute)), ttl), Action{Kind: TokenBucket, MaxTokens: 10, TokensPerFill: 6000, FillInterval: 60 * sec, TTL: 3 * sec}},
		{"tokens_per_fill unset: one", assign(bucket(10, nil, durationpb.New(time.Second)), ttl), Action{Kind: TokenBucket, MaxTokens: 10, TokensPerFill: 1, FillInterval: sec, TTL: 3 * sec}},
		{"deny all", assign(blanket(typev3.RateLimitStrategy_DENY_ALL), ttl), Action{Kind: DenyAll, TTL: 3 * sec}},
		{"allow all", assign(blanket(typev3.RateLimitStrategy_ALLOW_ALL), ttl), Action{Kind: AllowAll, TTL: 3 * sec}},
		{"abandon", &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}, Action{Kind: Abandon}},
		{"no TTL", assign(blanket(typev3.RateLimitStrategy_DENY_ALL), nil), Action{}},
		{"a TTL over a day", assign(blanket(typev3.RateLimitStrategy_DENY_ALL), durationpb.New(25*time.Hour)), Action{}},
		{"a negative TTL", assign(blanket(typev3.RateLimitStrategy_DENY_ALL), durationpb.New(-time.Second)), Action{}},
		{"max_tokens 0", assign(bucket(0, wrapperspb.UInt32(1), durationpb.New(time.Second)), ttl), Action{}},
		{"tokens_per_fill 0", assign(bucket(1, wrapperspb.UInt32(0), durationpb.New(time.Second)), ttl), Action{}},
		{"no fill_interval", assign(bucket(1, wrapperspb.UInt32(1), nil), ttl), Action{}},
		{"a fill_interval in ns", assign(bucket(1, wrapperspb.UInt32(1), durationpb.New(1500*time.Nanosecond)), ttl), Action{}},
		{"requests_per_time_unit", assign(&typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
			RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 5}}}, ttl), Action{}},
		{"no strategy", assign(nil, ttl), Action{}},
		{"no action", &rlqsv3.RateLimitQuotaResponse_BucketAction{}, Action{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAction(tc.in)
			if tc.want.Kind == 0 {
				if !errors.Is(err, errAction) {
					t.Fatalf("got %+v, %v; want refused", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestBucketFresh: the tokens assignments add at once, ε's part.
func TestBucketFresh(t *testing.T) {
	b := testBucket(t, nil)
	steps := []struct {
		at      int64
		a       Action
		changed bool
		fresh   int64
	}{
		{0, *tb(5, 1, 60*sec, 2*sec), true, 5},         // the first: full
		{sec, *tb(5, 1, 60*sec, 2*sec), false, 5},      // an extension: nothing
		{sec, *tb(8, 1, 60*sec, 2*sec), true, 8},       // a raise: its 3
		{sec, *tb(4, 1, 60*sec, 2*sec), true, 8},       // a cut: nothing
		{10 * sec, *tb(4, 1, 60*sec, 2*sec), true, 12}, // after an expiry: full
		{10 * sec, Action{Kind: DenyAll, TTL: sec}, true, 12},
		{10 * sec, *tb(2, 1, 60*sec, 2*sec), true, 14}, // after DENY_ALL: full
	}
	for i, s := range steps {
		changed, err := b.apply(s.a, t0+s.at)
		if err != nil {
			t.Fatal(err)
		}
		if st := b.Stats(t0 + s.at); changed != s.changed || st.Fresh != s.fresh {
			t.Fatalf("step %d: changed %v, fresh %d; want %v, %d", i, changed, st.Fresh, s.changed, s.fresh)
		}
	}
}

// TestBucketStatsInForce: Stats says what decides at the time asked: the
// live assignment's limit as in force (clamped, ALLOW_ALL the ceiling),
// DENY_ALL, or nothing live (the fallback).
func TestBucketStatsInForce(t *testing.T) {
	// ceiling100 as the server divides it (quota.FromCore): 6000 a minute.
	ceil := core.Limit{Algorithm: core.TokenBucket, Limit: 10, Rate: 6000, Window: 60 * sec}
	cases := []struct {
		name       string
		apply      *Action
		at         int64 // Stats asked at t0+at; the action applied at t0
		live, deny bool
		assigned   core.Limit
	}{
		{"none yet", nil, 0, false, false, core.Limit{}},
		{"token bucket", tb(5, 3, 60*sec, 2*sec), 0, true, false, core.Limit{Algorithm: core.TokenBucket, Limit: 5, Rate: 3, Window: 60 * sec}},
		{"token bucket clamped", tb(50, 3, 60*sec, 2*sec), 0, true, false, core.Limit{Algorithm: core.TokenBucket, Limit: 10, Rate: 3, Window: 60 * sec}},
		{"expired", tb(5, 3, 60*sec, 2*sec), 2 * sec, false, false, core.Limit{}},
		{"deny all", &Action{Kind: DenyAll, TTL: sec}, 0, true, true, core.Limit{}},
		{"allow all: the ceiling", &Action{Kind: AllowAll, TTL: sec}, 0, true, false, ceil},
		{"abandoned", &Action{Kind: Abandon}, 0, false, false, core.Limit{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := testBucket(t, nil)
			if tc.apply != nil {
				if err := b.Apply(*tc.apply, t0); err != nil {
					t.Fatal(err)
				}
			}
			st := b.Stats(t0 + tc.at)
			if st.Live != tc.live || st.Deny != tc.deny || st.Assigned != tc.assigned {
				t.Fatalf("live %v, deny %v, assigned %+v; want %v, %v, %+v", st.Live, st.Deny, st.Assigned, tc.live, tc.deny, tc.assigned)
			}
		})
	}
}
