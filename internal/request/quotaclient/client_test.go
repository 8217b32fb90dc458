package quotaclient

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlcore/rl/internal/testkit/await"
	"github.com/rlcore/rl/store"
)

// fakeServer hands each stream to the test: the reports it reads, and a
// channel of responses to send; closing end ends the stream.
type fakeServer struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	streams chan *fakeStream
}

type fakeStream struct {
	client  []string // the x-rlqs-client metadata
	reports chan *rlqsv3.RateLimitQuotaUsageReports
	send    chan *rlqsv3.RateLimitQuotaResponse
	end     chan struct{}
}

func (f *fakeServer) StreamRateLimitQuotas(st grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	fs := &fakeStream{client: md.Get("x-rlqs-client"), reports: make(chan *rlqsv3.RateLimitQuotaUsageReports, 100), send: make(chan *rlqsv3.RateLimitQuotaResponse), end: make(chan struct{})}
	f.streams <- fs
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			fs.reports <- r
		}
	}()
	for {
		select {
		case r := <-fs.send:
			if err := st.Send(r); err != nil {
				return err
			}
		case <-fs.end:
			return nil
		case <-st.Context().Done():
			return nil
		}
	}
}

func startFake(t *testing.T) (*fakeServer, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{streams: make(chan *fakeStream, 10)}
	g := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, f)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return f, ln.Addr().String()
}

func tokenBucket(id map[string]string, tokens uint32, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse {
	return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId: &rlqsv3.BucketId{Bucket: id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl),
			RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
				MaxTokens: tokens, TokensPerFill: wrapperspb.UInt32(1), FillInterval: durationpb.New(time.Minute)}}},
		}},
	}}}
}

// TestClientStream runs a client against a fake server: the first report
// at once with the domain and the bucket, an assignment applied, usage
// reported in units of cost, a refused action counted, and a stream the
// server ends reopened with the usage it had not reported.
func TestClientStream(t *testing.T) {
	f, addr := startFake(t)
	var now atomic.Int64
	now.Store(t0)
	c, err := New(Config{Address: addr, Domain: "rl", ReportInterval: MinReportInterval, Clock: now.Load,
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, ClientIDMetadata: "x-rlqs-client", ClientID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id := map[string]string{"name": "api"}
	b, err := c.Bucket(BucketSpec{ID: id, Ceiling: ceiling100, RetryAfter: sec})
	if err != nil {
		t.Fatal(err)
	}
	s1 := await.Recv(t, "the first stream", f.streams)
	if len(s1.client) != 1 || s1.client[0] != "r1" {
		t.Fatalf("client id metadata %q, want [r1]", s1.client)
	}
	r := await.Recv(t, "a report", s1.reports)
	if r.GetDomain() != "rl" || len(r.GetBucketQuotaUsages()) != 1 || r.GetBucketQuotaUsages()[0].GetBucketId().GetBucket()["name"] != "api" {
		t.Fatalf("first report %v: want domain rl and the bucket {name: api}", r)
	}
	if d, _ := b.Decide(store.Take, now.Load(), 1); d.Allowed {
		t.Fatal("admitted before any assignment, without a fallback")
	}
	s1.send <- tokenBucket(id, 8, 10*time.Second)
	s1.send <- tokenBucket(map[string]string{"name": "other"}, 8, 10*time.Second) // no such bucket: refused
	await.Until(t, "the assignment to apply and the other to be refused", func() bool { return b.Stats(now.Load()).Live && c.Stats().Refused == 1 })
	for _, cost := range []int64{5, 3, 2} { // 5 and 3 admitted, 2 denied
		if _, err := b.Decide(store.Take, now.Load(), cost); err != nil {
			t.Fatal(err)
		}
	}
	var allowed, denied uint64
	await.Until(t, "the usage reported", func() bool {
		select {
		case r := <-s1.reports:
			for _, u := range r.GetBucketQuotaUsages() {
				allowed += u.GetNumRequestsAllowed()
				denied += u.GetNumRequestsDenied()
			}
		default:
		}
		return allowed+denied >= 11
	})
	if allowed != 8 || denied != 3 { // the first request (cost 1), denied, counts too
		t.Fatalf("reported %d allowed and %d denied units; want 8 and 3", allowed, denied)
	}
	close(s1.end)
	s2 := await.Recv(t, "the stream reopened", f.streams)
	if len(s2.client) != 1 || s2.client[0] != "r1" {
		t.Fatalf("client id metadata %q on the reopened stream, want [r1]", s2.client)
	}
	if r := await.Recv(t, "a report on the new stream", s2.reports); r.GetDomain() != "rl" {
		t.Fatalf("report %v without the domain", r)
	}
	// The assignment holds until its TTL, the stream gone or not.
	if !b.Stats(now.Load()).Live {
		t.Fatal("assignment dropped with the stream")
	}
	now.Add(10 * sec)
	if d, _ := b.Decide(store.Take, now.Load(), 1); d.Allowed {
		t.Fatal("admitted after the assignment's TTL, without a fallback")
	}
}

// TestClientUnreachable: with no server, decisions go on (the fallback)
// and the client keeps trying.
func TestClientUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens
	c, err := New(Config{Address: addr, Domain: "rl", MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fb := ceiling100
	fb.Limit = 3
	b, err := c.Bucket(BucketSpec{ID: map[string]string{"name": "api"}, Ceiling: ceiling100, Fallback: &fb, RetryAfter: sec})
	if err != nil {
		t.Fatal(err)
	}
	await.Until(t, "three attempts to open a stream", func() bool { return c.Stats().Attempts >= 3 })
	admitted := 0
	for range 10 {
		if d, _ := b.Decide(store.Take, t0, 1); d.Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d of 10 with the server unreachable; want the fallback's 3", admitted)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Domain: "rl"},
		{Address: "127.0.0.1:1"},
		{Address: "127.0.0.1:1", Domain: "rl", ReportInterval: time.Millisecond},
		{Address: "127.0.0.1:1", Domain: "rl", ReportInterval: time.Hour},
		{Address: "127.0.0.1:1", Domain: "rl", ClientIDMetadata: "x-rlqs-client"},
	} {
		if c, err := New(cfg); err == nil {
			c.Close()
			t.Fatalf("%+v accepted", cfg)
		}
	}
}

// TestClientBucketReload: registering a bucket again with the same spec
// returns the same bucket; with another spec, a new one that keeps the
// assignment and the units used.
func TestClientBucketReload(t *testing.T) {
	c, err := New(Config{Address: "127.0.0.1:1", Domain: "rl", MinBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	spec := BucketSpec{ID: map[string]string{"name": "api"}, Ceiling: ceiling100, RetryAfter: sec}
	b1, err := c.Bucket(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Apply(*tb(5, 1, 60*sec, 10*sec), t0); err != nil {
		t.Fatal(err)
	}
	if d, _ := b1.Decide(store.Take, t0, 3); !d.Allowed {
		t.Fatal("denied on a live assignment")
	}
	if b, _ := c.Bucket(spec); b != b1 {
		t.Fatal("the same spec registered again made another bucket")
	}
	fb := ceiling100
	spec.Fallback = &fb
	b2, err := c.Bucket(spec)
	if err != nil {
		t.Fatal(err)
	}
	if b2 == b1 {
		t.Fatal("another spec kept the old bucket")
	}
	if d, _ := b2.Decide(store.Take, t0, 2); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("new bucket: %+v; want the assignment kept and 3 of its 5 tokens used", d)
	}
	if d, _ := b2.Decide(store.Take, t0, 1); d.Allowed {
		t.Fatal("admitted past the assignment kept")
	}
	// The counters run on: one assignment (not counted again), three
	// requests decided on the two buckets.
	if st := b2.Stats(t0); st.Assignments != 1 || st.Allowed != 2 || st.Denied != 1 || st.Fresh != 5 {
		t.Fatalf("stats after the replacement: %+v; want 1 assignment, 2 allowed, 1 denied, 5 fresh", st)
	}
}
