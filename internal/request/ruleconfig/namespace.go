package ruleconfig

import (
	"fmt"
	"strings"
)

// Store keys. A store keeps a state under a base key and a key: memstore
// keeps the two apart, pgstore joins them as "<base key>:<key>"
// (pgstore.FullKey; so do PostgreSQL's rows, the PL/Proxy router, failover
// and rl_allow() callers). Joined, two pairs are one key when one base key
// is another followed by ':' and the start of its key: rule "a" keyed by a
// client's "admin:global" would spend rule "a:admin"'s global quota. So the
// base keys of rl-wasm-host and of the filter (whose global mode sends
// "<rule>:<key>" to one rl-wasm-host rule) are built to keep the join
// injective:
//
//   - a rule's name, its base key, holds no ':' (CheckBaseName);
//   - the decision API's inline limits use InlineNamespace;
//   - the gRPC rate limit service's domain d uses RLSNamespace + ":" + d,
//     d without ':' (CheckBaseName);
//   - no rule of rl-wasm-host is named after a namespace (ReservedNames).
//
// The text before a stored key's first ':' is then a rule's name or a
// namespace, and for RLSNamespace the text up to the second the domain:
// no two (base key, key) pairs make one stored key.
const (
	// InlineNamespace is the base key of the decision API's inline limits.
	InlineNamespace = "inline"
	// RLSNamespace starts the base key of the gRPC rate limit service's
	// domains, "rls:<domain>".
	RLSNamespace = "rls"
)

// ReservedNames are the names no rule of rl-wasm-host may take: its
// namespaces (InlineNamespace, RLSNamespace).
func ReservedNames() []string { return []string{InlineNamespace, RLSNamespace} }

// CheckBaseName accepts a name that starts stored keys (a rule's name, a
// gRPC domain): it holds no ':', the separator of "<base key>:<key>".
func CheckBaseName(s string) error {
	if i := strings.IndexByte(s, ':'); i >= 0 {
		return fmt.Errorf("%q: byte %d is \":\", which separates a name from its keys in the store (\"<name>:<key>\"): another rule's keys could reach this one's state; name it without \":\"", Clip(s, 64), i)
	}
	return nil
}
