// Package snippets compiles the Go blocks of the docs that are fragments
// of a program (statements): zz_generated.go holds each as a function,
// written by go run ./tests/docs/docgen from README.md and docs/*.md; this
// file declares the names the fragments take as given, as a reader would
// have them. tests/docs imports the package, so a fragment that no longer
// compiles fails its build, and fails while zz_generated.go is stale.
package snippets

import (
	"context"
	"net/http"
	"net/netip"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl"
)

var (
	ctx            context.Context
	k              string      // a key
	lim            *rl.Limiter // a limiter, as rl.New returns it
	mux            *http.ServeMux
	paid           *rl.Policy     // a policy of the caller's choosing
	poolA, poolB   *pgxpool.Pool  // a pool per shard database
	trustedProxies []netip.Prefix // the proxies whose X-Forwarded-For counts
)

// callModel stands for the call whose cost is known only afterwards.
func callModel() int64 { return 0 }
