package service

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"sync"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/quotaclient"
)

// globalPool holds the RLQS clients of the rules with a "global" field:
// one per server, domain and report interval, kept across reloads so that
// a reload keeps the assignments in force (quotaclient.Client.Bucket).
// The zero value is ready.
type globalPool struct {
	mu      sync.Mutex
	clients map[string]*quotaclient.Client
	closed  bool
}

// bucket registers the rule's bucket with its server's client, starting
// the client the first time.
func (g *globalPool) bucket(spec RuleSpec, clock rl.Clock, log *slog.Logger) (*quotaclient.Bucket, error) {
	gs := spec.Global
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, fmt.Errorf("global: the service is closed")
	}
	k := fmt.Sprintf("%s\x00%s\x00%d\x00%s", gs.Server, gs.Domain, gs.ReportInterval, gs.ClientIDMetadata)
	c := g.clients[k]
	if c == nil {
		cfg := quotaclient.Config{Address: gs.Server, Domain: gs.Domain, ReportInterval: gs.ReportInterval, Clock: clock, Logger: log}
		if gs.ClientIDMetadata != "" {
			cfg.ClientIDMetadata, cfg.ClientID = gs.ClientIDMetadata, processID()
		}
		var err error
		c, err = quotaclient.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("global: %w", err)
		}
		if g.clients == nil {
			g.clients = map[string]*quotaclient.Client{}
		}
		g.clients[k] = c
	}
	b, err := c.Bucket(quotaclient.BucketSpec{ID: gs.Bucket, Ceiling: spec.Limits[0].Limit, Fallback: gs.Fallback,
		RetryAfter: gs.ReportInterval.Microseconds()})
	if err != nil {
		return nil, fmt.Errorf("global: %w", err)
	}
	return b, nil
}

// processID is this process's identity as an RLQS client: random, drawn
// once, so a reopened stream continues the process's grant and a
// restarted process is a new client (its first bucket starts full: the
// server must count it as another client's, not continue the old grant).
var processID = sync.OnceValue(func() string { return "rl-wasm-host-" + rand.Text() })

// clientStats is one client's address, domain and counters.
type clientStats struct {
	server, domain string
	quotaclient.ClientStats
}

// stats returns the counters of every client, in no order.
func (g *globalPool) stats() []clientStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]clientStats, 0, len(g.clients))
	for _, c := range g.clients {
		cfg := c.Config()
		out = append(out, clientStats{server: cfg.Address, domain: cfg.Domain, ClientStats: c.Stats()})
	}
	return out
}

// close ends every client's stream.
func (g *globalPool) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for _, c := range g.clients {
		_ = c.Close()
	}
	g.clients = nil
}

// ruleLimiter is the limiter a rule decides with: over the engine's store,
// or, for a global rule, over its RLQS bucket (quotaclient.Store, returned
// too, for the metrics), which decides in memory on the assignment in force
// or the rule's fallback.
func (s *Service) ruleLimiter(spec RuleSpec, p *rl.Policy) (*rl.Limiter, *quotaclient.Bucket, error) {
	if spec.Global == nil {
		lim, err := s.eng.Limiter(spec.Name, p)
		return lim, nil, err
	}
	b, err := s.global.bucket(spec, s.eng.Clock(), s.log)
	if err != nil {
		return nil, nil, err
	}
	lim, err := rl.New(rl.Config{Store: quotaclient.Store{B: b}, Policy: p, BaseKey: spec.Name, Clock: s.eng.Clock(), MaxKeyLength: s.eng.MaxKeyLength()})
	return lim, b, err
}

// Close ends the streams of the global rules' RLQS clients. The service
// decides no global rule afterwards (their fallback decides); call it when
// the service is done.
func (s *Service) Close() { s.global.close() }
