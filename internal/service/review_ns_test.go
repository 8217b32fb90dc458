package service

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Review: rule names may contain ':' (ruleconfig.CheckName), and
// PostgreSQL's row key is "<rule>:<key>" (pgstore.FullKey), so rule "a"
// keyed by a client-chosen header value reaches the state of rule
// "a:admin" (key_by global): one client exhausts /admin for everyone (or
// another client's key of any rule whose name extends "a:"). memstore keeps
// (prefix, key) apart; PostgreSQL (and the RLS's "rls:<domain>", the
// router) does not.
func TestReviewRuleNamespaceCollision(t *testing.T) {
	up := newUpstream(t)
	p := newPGEnv(t, "upstream: "+up.srv.URL+`
rules:
  - {name: a, endpoint: /a, strategy: fixed, limit: 2, window: 1m, key_by: "header:X-User"}
  - {name: "a:admin", endpoint: /admin, strategy: fixed, limit: 2, window: 1m, key_by: global}
`, pgStoreConfig{})
	// The attacker only talks to /a, with a header value of its choice.
	for range 3 {
		p.do(t, "GET", "/a", "", "X-User", "admin:global")
	}
	r := p.do(t, "GET", "/admin", "")
	require.Equal(t, 200, r.code, "rule a:admin's global quota was spent through rule a (row key a:admin:global shared)")
}
