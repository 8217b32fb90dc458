package service

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/request/engine"
	"github.com/rlcore/rl/store"
)

// This file holds the hooks another front end uses to decide beside the
// HTTP listeners: the Envoy rate limit service (package internal/frontend/rls)
// decides with the Service's Engine (its store, clock, per-key bound and
// outage detector), authenticates with its api_tokens and reports on its
// /metrics; the command starts, reloads and stops it beside the Service.

// Store returns the store the Service decides over.
func (s *Service) Store() store.Store { return s.eng.Store() }

// Clock returns the Service's decision clock.
func (s *Service) Clock() rl.Clock { return s.eng.Clock() }

// Engine returns the decision engine the Service decides with: its
// store, clock, per-key bound and outage detector, which a front end
// beside the HTTP listeners shares.
func (s *Service) Engine() *engine.Engine { return s.eng }

// MonitorPool exports the WebAssembly pool's instances in /metrics
// (rl_wasm_instances{state}, rl_wasm_instances_started_total,
// rl_wasm_instances_discarded_total), read from stats at each scrape.
func (s *Service) MonitorPool(stats func() PoolStats) error {
	return s.Register(poolCollectors(stats)...)
}

// MonitorDecider reports which decision core decides, read from stats: in
// /metrics (rl_decider{decider}, rl_wasm_compile_seconds,
// rl_wasm_start_failed) at each scrape, and on a line of /readyz's body
// (which stays 200 whichever core decides: both decide alike). Call it
// once, before serving.
func (s *Service) MonitorDecider(stats func() DeciderStats) error {
	if err := s.Register(deciderCollectors(stats)...); err != nil {
		return err
	}
	s.decider.Store(&stats)
	return nil
}

// Logger returns the Service's logger.
func (s *Service) Logger() *slog.Logger { return s.log }

// MaxKeyLength returns the longest key the Service accepts, in bytes.
func (s *Service) MaxKeyLength() int { return s.eng.MaxKeyLength() }

// Register adds collectors to the registry the Service's /metrics serves.
func (s *Service) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := s.metrics.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// TokenRole returns the Role a caller presenting the credentials in an
// Authorization value ("Bearer <token>") has, by the api_tokens in force,
// or 0 when it may not call. On a trusted listener (loopback) without
// configured tokens every caller is an admin, as on the decision API's.
func (s *Service) TokenRole(trusted bool, authorization string) Role {
	tokens := s.rules.Load().cfg.APITokens
	if trusted && len(tokens) == 0 {
		return RoleAdmin
	}
	return matchToken(tokens, authorization)
}

// Authorized reports whether a caller presenting authorization may call
// a front end beside the HTTP listeners (TokenRole is not 0).
func (s *Service) Authorized(trusted bool, authorization string) bool {
	return s.TokenRole(trusted, authorization) != 0
}

// HasAPITokens reports whether the configuration in force has api_tokens.
func (s *Service) HasAPITokens() bool { return len(s.rules.Load().cfg.APITokens) > 0 }

// AddTokensCheck adds a reload check (AddReloadCheck) given whether the
// configuration to load has api_tokens: a listener that needs them keeps
// them.
func (s *Service) AddTokensCheck(check func(tokens bool) error) {
	s.AddReloadCheck(func(c *Config) error { return check(len(c.APITokens) > 0) })
}
