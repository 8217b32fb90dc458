package service

import (
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/internal/outage"
	"github.com/rlcore/rl/store"
)

// This file holds the hooks another front end uses to decide over the same
// Service as the HTTP listeners: the Envoy rate limit service (package
// internal/rls) takes the Service's store and clock, answers store
// failures by the same rules, authenticates with its api_tokens and reports on
// its /metrics; the command starts, reloads and stops it beside the
// Service.

// Store returns the store the Service decides over.
func (s *Service) Store() store.Store { return s.store }

// Clock returns the Service's decision clock.
func (s *Service) Clock() rl.Clock { return s.clock }

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
func (s *Service) MaxKeyLength() int { return s.maxKey }

// Register adds collectors to the registry the Service's /metrics serves.
func (s *Service) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := s.metrics.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Classify tells what err, the error of a decision begun at begun
// (BeginDecision), means, by the one failure rule (outage.Class), in the
// Service's outage detector, which the HTTP listeners share: only a store
// that is down is an Outage, answered by the fail policy. Load from the
// store (store.ErrBusy, a full store) is counted in
// rl_overload_rejected_total{reason="store_busy"}.
func (s *Service) Classify(begun outage.Token, err error) outage.Class {
	c := s.outage.Classify(begun, err)
	if c == outage.Load && errors.Is(err, store.ErrBusy) {
		s.metrics.overload.WithLabelValues("store_busy").Inc()
	}
	return c
}

// BeginDecision returns the outage token of a decision about to be made,
// for Classify.
func (s *Service) BeginDecision() outage.Token { return s.outage.Begin() }

// DecisionSucceeded records a decision the store completed: no timeout of
// a decision begun before it counts toward an outage (Classify).
func (s *Service) DecisionSucceeded() { s.outage.Success() }

// EnterKey takes a place among the decisions in flight on key of namespace
// ns under Options.MaxInFlightPerKey. It returns ok false at the bound
// (counted in rl_overload_rejected_total{reason="key_in_flight"}; answer as
// overload), and otherwise a slot to give back with slot.Add(-1), nil when
// there is no bound.
func (s *Service) EnterKey(ns, key string) (slot *atomic.Int32, ok bool) {
	if s.perKey == nil {
		return nil, true
	}
	slot, ok = s.perKey.enter(ns, key)
	if !ok {
		s.metrics.overload.WithLabelValues("key_in_flight").Inc()
	}
	return slot, ok
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
