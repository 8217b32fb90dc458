package rlqs

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/request/quota"
)

type stream = grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]

// fixture is a Server on a bufconn listener with a clock the test moves.
type fixture struct {
	srv    *Server
	client rlqsv3.RateLimitQuotaServiceClient
	now    atomic.Int64
}

const t0 = int64(1_700_000_000) * quota.Second

func newFixture(t *testing.T, keepsState bool, store Store) *fixture {
	t.Helper()
	return newFixtureCfg(t, func(c *Config) { c.KeepsState, c.Store = keepsState, store })
}

// newFixtureCfg is newFixture with the Config edited by set.
func newFixtureCfg(t *testing.T, set func(*Config)) *fixture {
	t.Helper()
	f := &fixture{}
	f.now.Store(t0)
	cfg := Config{
		Rules: []Rule{
			// 100 requests per second, burst 100: 6000 per 60 s.
			{Domain: "envoy", Match: map[string]string{"name": "api"}, Limit: core.Limit{Algorithm: core.TokenBucket, Limit: 100, Window: quota.Second, Rate: 100}},
		},
		Now: f.now.Load,
	}
	set(&cfg)
	srv, err := New(cfg)
	require.NoError(t, err)
	f.srv = srv
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	f.client = rlqsv3.NewRateLimitQuotaServiceClient(conn)
	return f
}

func (f *fixture) open(t *testing.T) stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s, err := f.client.StreamRateLimitQuotas(ctx)
	require.NoError(t, err)
	return s
}

// report sends what Envoy's filter sends: the domain every time, one
// usage per bucket, time_elapsed in whole seconds (0 on a bucket's first).
func report(t *testing.T, s stream, bucket map[string]string, allowed, denied uint64, elapsed int64) {
	t.Helper()
	require.NoError(t, s.Send(&rlqsv3.RateLimitQuotaUsageReports{
		Domain: "envoy",
		BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId:           &rlqsv3.BucketId{Bucket: bucket},
			TimeElapsed:        &durationpb.Duration{Seconds: elapsed},
			NumRequestsAllowed: allowed,
			NumRequestsDenied:  denied,
		}},
	}))
}

// tokenBucket receives the next response and returns its one assignment's
// token bucket (nil for DENY_ALL) and TTL.
func tokenBucket(t *testing.T, s stream) (*typev3.TokenBucket, time.Duration, map[string]string) {
	t.Helper()
	r, err := s.Recv()
	require.NoError(t, err)
	require.Len(t, r.BucketAction, 1)
	a := r.BucketAction[0]
	qa := a.GetQuotaAssignmentAction()
	require.NotNil(t, qa, "an assignment, got %v", a)
	require.NoError(t, r.ValidateAll())
	if qa.GetRateLimitStrategy().GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL && qa.GetRateLimitStrategy().GetTokenBucket() == nil {
		return nil, qa.GetAssignmentTimeToLive().AsDuration(), a.GetBucketId().GetBucket()
	}
	tb := qa.GetRateLimitStrategy().GetTokenBucket()
	require.NotNil(t, tb)
	return tb, qa.GetAssignmentTimeToLive().AsDuration(), a.GetBucketId().GetBucket()
}

var api = map[string]string{"name": "api"}

// Two Envoys share one bucket: the second is raised only after the first
// has reported since its cut, the raise reaching the second's stream in
// answer to the first's report; the sums never exceed the limit.
func TestTwoEnvoysShareABucket(t *testing.T) { eachStore(t, testTwoEnvoysShareABucket) }

func testTwoEnvoysShareABucket(t *testing.T, newStore func(*testing.T) Store) {
	f := newFixture(t, true, newStore(t))
	a, b := f.open(t), f.open(t)

	report(t, a, api, 0, 1, 0) // the first request: denied, no assignment yet
	tbA, ttl, id := tokenBucket(t, a)
	require.Equal(t, api, id)
	require.Equal(t, 15*time.Second, ttl, "TTL: three of Envoy's 5 s report intervals, whole seconds")
	require.Equal(t, 60*time.Second, tbA.FillInterval.AsDuration())
	require.Equal(t, uint32(6000), tbA.TokensPerFill.GetValue(), "alone, A gets the whole rate")
	require.Equal(t, uint32(75), tbA.MaxTokens, "the burst less its 25% reserve")

	// B subscribes: A is cut at once, B gets nothing until the cut is
	// acknowledged (A's grant is spent to the last token).
	report(t, b, api, 0, 1, 0)
	cutA, _, _ := tokenBucket(t, a)
	require.Less(t, cutA.TokensPerFill.GetValue(), tbA.TokensPerFill.GetValue())
	// B's first answer is the DENY_ALL of an unmatched bucket reported
	// after: its own bucket got none.
	report(t, b, map[string]string{"name": "other"}, 1, 0, 0)
	tb, _, id := tokenBucket(t, b)
	require.Nil(t, tb)
	require.Equal(t, "other", id["name"], "B was granted before A's cut was acknowledged")

	// A's next report, sooner than the guard after the cut, may have
	// crossed it: no raise for B yet; A's cut is repeated (an extension).
	f.now.Add(500_000)
	report(t, a, api, 50, 0, 0)
	ext, _, _ := tokenBucket(t, a)
	require.Equal(t, cutA.TokensPerFill.GetValue(), ext.TokensPerFill.GetValue())

	// Five seconds on, A's report acknowledges the cut: B is raised, on
	// its own stream.
	f.now.Add(5 * quota.Second)
	report(t, a, api, 250, 0, 5)
	_, _, _ = tokenBucket(t, a) // A's extension
	raiseB, _, _ := tokenBucket(t, b)
	require.LessOrEqual(t, cutA.TokensPerFill.GetValue()+raiseB.TokensPerFill.GetValue(), uint32(6000))
	require.LessOrEqual(t, cutA.MaxTokens+raiseB.MaxTokens, uint32(75))
	require.Greater(t, raiseB.TokensPerFill.GetValue(), uint32(0))
}

// A bucket no rule matches is denied; a report without a bucket_id (the
// map shape of an earlier rlqs.proto draft reads so) ends the stream.
func TestUnmatchedAndMalformed(t *testing.T) { eachStore(t, testUnmatchedAndMalformed) }

func testUnmatchedAndMalformed(t *testing.T, newStore func(*testing.T) Store) {
	f := newFixture(t, true, newStore(t))
	s := f.open(t)
	report(t, s, map[string]string{"name": "other"}, 1, 0, 0)
	tb, ttl, id := tokenBucket(t, s)
	require.Nil(t, tb, "DENY_ALL")
	require.Equal(t, 15*time.Second, ttl)
	require.Equal(t, map[string]string{"name": "other"}, id)

	require.NoError(t, s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "envoy",
		BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{NumRequestsAllowed: 1}}}))
	_, err := s.Recv()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "repeated list")

	s2 := f.open(t)
	require.NoError(t, s2.Send(&rlqsv3.RateLimitQuotaUsageReports{
		BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: &rlqsv3.BucketId{Bucket: api}}}}))
	_, err = s2.Recv()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "must name its domain")
}

// A server keeping state in memory holds grants back for one TTL plus the
// guard after it starts: its predecessor's grants may still be in force.
func TestRestartHold(t *testing.T) { eachStore(t, testRestartHold) }

func testRestartHold(t *testing.T, newStore func(*testing.T) Store) {
	f := newFixture(t, false, newStore(t))
	s := f.open(t)
	report(t, s, api, 0, 1, 0)
	// Unanswered: the next answer is the DENY_ALL of an unmatched bucket.
	report(t, s, map[string]string{"name": "other"}, 1, 0, 0)
	tb, _, id := tokenBucket(t, s)
	require.Nil(t, tb)
	require.Equal(t, "other", id["name"])

	f.now.Add(16 * quota.Second) // TTL 15 s + guard 1 s
	require.NoError(t, f.srv.Tick(context.Background()))
	tb, _, id = tokenBucket(t, s)
	require.Equal(t, "api", id["name"])
	require.Equal(t, uint32(6000), tb.TokensPerFill.GetValue())
}

// A closed stream's grant is counted until it expires: a new client gets
// only what is free until then.
func TestClosedStreamCountsUntilExpiry(t *testing.T) { eachStore(t, testClosedStreamCountsUntilExpiry) }

func testClosedStreamCountsUntilExpiry(t *testing.T, newStore func(*testing.T) Store) {
	f := newFixture(t, true, newStore(t))
	a := f.open(t)
	report(t, a, api, 0, 1, 0)
	tbA, _, _ := tokenBucket(t, a)
	require.Equal(t, uint32(6000), tbA.TokensPerFill.GetValue())
	require.NoError(t, a.CloseSend())
	_, err := a.Recv()
	require.Error(t, err) // io.EOF once the server ended the stream

	b := f.open(t)
	// The close is applied when the server's handler returns; B's report
	// may come before or after it: either way B gets no grant while A's
	// may be in force. The unmatched bucket's answer shows B's report was
	// handled.
	report(t, b, api, 0, 1, 0)
	report(t, b, map[string]string{"name": "other"}, 1, 0, 0)
	tb, _, _ := tokenBucket(t, b)
	require.Nil(t, tb)

	f.now.Add(16 * quota.Second)
	require.NoError(t, f.srv.Tick(context.Background()))
	tb, _, _ = tokenBucket(t, b)
	require.Equal(t, uint32(6000), tb.TokensPerFill.GetValue(), "A's grant expired: B gets it all")
}

// addConn registers a stream of client id on s without gRPC: the test
// reads what is queued on it.
func addConn(s *Server, id string) *conn {
	c := &conn{id: id, out: make(chan outMsg, sendBuffer), buckets: map[string]bool{}}
	s.mu.Lock()
	s.conns[id] = c
	s.mu.Unlock()
	return c
}

// setOut replaces c's send buffer (under s.mu, as route reads it).
func setOut(s *Server, c *conn, out chan outMsg) {
	s.mu.Lock()
	c.out = out
	s.mu.Unlock()
}

// usage applies one report of c for the api bucket, as a stream would.
func usage(t *testing.T, s *Server, c *conn, allowed, denied uint64) {
	t.Helper()
	require.NoError(t, s.report(context.Background(), c, &rlqsv3.RateLimitQuotaUsageReports{Domain: "envoy",
		BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: &rlqsv3.BucketId{Bucket: api}, NumRequestsAllowed: allowed, NumRequestsDenied: denied}}}))
}

// queued returns the fills of the assignments queued on c (0: DENY_ALL).
func queued(c *conn) []uint32 {
	var fills []uint32
	for {
		select {
		case m := <-c.out:
			fills = append(fills, m.r.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue())
		default:
			return fills
		}
	}
}

// A cut that could not be handed to its client's stream (its send buffer
// full) is not taken as acknowledged by the client's next report: it is
// sent again in answer to it, and the raise it pays for waits for a report
// a guard after that.
func TestUndeliveredCutIsResent(t *testing.T) { eachStore(t, testUndeliveredCutIsResent) }

func testUndeliveredCutIsResent(t *testing.T, newStore func(*testing.T) Store) {
	f := newFixture(t, true, newStore(t))
	a := addConn(f.srv, "a")
	usage(t, f.srv, a, 0, 1)
	require.Equal(t, []uint32{6000}, queued(a), "alone, A gets the whole rate")

	full := make(chan outMsg) // no reader: every offer fails
	setOut(f.srv, a, full)
	b := addConn(f.srv, "b")
	usage(t, f.srv, b, 0, 1) // A's cut is decided, and not sent
	require.Empty(t, queued(b))
	var undelivered dto.Metric
	require.NoError(t, f.srv.m.undelivered.Write(&undelivered))
	require.Equal(t, 1.0, undelivered.GetCounter().GetValue(), "rl_rlqs_server_undelivered_total")
	setOut(f.srv, a, make(chan outMsg, sendBuffer))

	f.now.Add(5 * quota.Second)
	usage(t, f.srv, a, 250, 0)
	require.Equal(t, []uint32{3000}, queued(a), "A's cut sent again in answer to its report")
	require.Empty(t, queued(b), "B raised on a report of A that never received its cut")

	f.now.Add(5 * quota.Second)
	usage(t, f.srv, a, 250, 0)
	require.Equal(t, []uint32{3000}, queued(a), "A's extension")
	require.Equal(t, []uint32{3000}, queued(b), "B raised once A's cut was acknowledged")
}

// sentFill sums the grants a bucket's clients were sent.
func sentFill(t *testing.T, st Store) int64 {
	t.Helper()
	keys, err := st.Keys(context.Background())
	require.NoError(t, err)
	require.Len(t, keys, 1)
	var sum int64
	require.NoError(t, st.Update(context.Background(), keys[0], nil, func(e *Entry) {
		for _, c := range e.Bucket.Clients() {
			sum += c.Sent.Fill
		}
	}))
	return sum
}

// Two servers share one store, A's Envoy on the first and B's on the
// second: A's cut, decided by the second server, is sent by the first at
// A's next report, which does not acknowledge it; B is raised only after
// A's report a guard later, and receives the raise from its own server.
func TestEnvoyOnAnotherServer(t *testing.T) { eachStore(t, testEnvoyOnAnotherServer) }

func testEnvoyOnAnotherServer(t *testing.T, newStore func(*testing.T) Store) {
	st := newStore(t)
	f1 := newFixture(t, true, st)
	f2 := newFixtureCfg(t, func(c *Config) { c.KeepsState, c.Store, c.Now = true, st, f1.now.Load })
	a, b := f1.open(t), f2.open(t)

	report(t, a, api, 0, 1, 0)
	tb, _, _ := tokenBucket(t, a)
	require.Equal(t, uint32(6000), tb.TokensPerFill.GetValue())
	report(t, b, api, 0, 1, 0) // A's cut, decided on the second server
	report(t, b, map[string]string{"name": "other"}, 1, 0, 0)
	tb, _, id := tokenBucket(t, b)
	require.Nil(t, tb)
	require.Equal(t, "other", id["name"], "B was granted before A's cut was acknowledged")

	f1.now.Add(5 * quota.Second)
	report(t, a, api, 250, 0, 5)
	tb, _, _ = tokenBucket(t, a)
	require.Equal(t, uint32(3000), tb.TokensPerFill.GetValue(), "A's cut, from its own server")
	require.Equal(t, int64(3000), sentFill(t, st), "B raised on the report that brought A its cut")

	f1.now.Add(5 * quota.Second)
	report(t, a, api, 250, 0, 5)
	_, _, _ = tokenBucket(t, a) // A's extension
	require.Equal(t, int64(6000), sentFill(t, st), "B raised once A's cut was acknowledged")
	report(t, b, api, 0, 1, 0)
	tb, _, _ = tokenBucket(t, b)
	require.Equal(t, uint32(3000), tb.TokensPerFill.GetValue(), "B's raise, from its own server")
}
