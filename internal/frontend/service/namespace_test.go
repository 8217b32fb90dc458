package service

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRuleNamesKeepStoredKeysApart: PostgreSQL keeps a state under
// "<rule>:<key>" (pgstore.FullKey; the router and failover too), so rule
// "a" keyed by a client-chosen header value "admin:global" reached the
// state of rule "a:admin" (key_by: global): one client exhausted /admin for
// everyone. memstore keeps (base key, key) apart; PostgreSQL does not. A
// rule named "rls" met the gRPC service's domains ("rls:<domain>") the same
// way. Rule names with ':' and the names of the store's namespaces are now
// a configuration error naming the rule and the field (a reload with one
// keeps the configuration in force), as is an unnamed rule whose endpoint,
// its name, holds ':'.
func TestRuleNamesKeepStoredKeysApart(t *testing.T) {
	for _, c := range []struct{ rule, want string }{
		{`{name: "a:admin", endpoint: /admin, strategy: fixed, limit: 2, window: 1m, key_by: global}`,
			`c.yaml: rules[1] "a:admin": name: "a:admin": byte 1 is ":"`},
		{`{name: rls, endpoint: /r, strategy: fixed, limit: 2, window: 1m}`,
			`c.yaml: rules[1] "rls": name: "rls" is reserved`},
		{`{name: inline, endpoint: /i, strategy: fixed, limit: 2, window: 1m}`,
			`c.yaml: rules[1] "inline": name: "inline" is reserved`},
		{`{endpoint: "/v1/models/m:predict", strategy: fixed, limit: 2, window: 1m}`,
			`c.yaml: rules[1] "/v1/models/m:predict": name: missing, and the endpoint cannot serve as one ("/v1/models/m:predict": byte 12 is ":"`},
	} {
		_, err := ParseConfig("c.yaml", "yaml", []byte(`
upstream: demo
rules:
  - {name: a, endpoint: /a, strategy: fixed, limit: 2, window: 1m, key_by: "header:X-User"}
  - `+c.rule+"\n"))
		require.ErrorContains(t, err, c.want)
	}
}
