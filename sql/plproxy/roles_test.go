package plproxy_test

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/pgtest"
	"github.com/rlcore/rl/sql/plproxy/plproxytest"
)

// TestTenantThroughRouter: with a user mapping per role (docs/scaling.md,
// "Roles and tenants"), the shards see the calling role and apply their
// checks to it: a tenant names only its own keys and cannot choose the
// time; rl_expire is refused to it on the router.
func TestTenantThroughRouter(t *testing.T) {
	b := make([]byte, 5)
	rand.Read(b)
	role := "rltenant_" + hex.EncodeToString(b)
	admin, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	// Registered before the databases: runs after they are dropped.
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, pgtest.URL())
		if err == nil {
			_, err = conn.Exec(ctx, "DROP ROLE IF EXISTS "+role)
			conn.Close(ctx)
		}
		if err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	c := plproxytest.New(t, 2, 0)
	_, err = admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN IN ROLE rl_app")
	require.NoError(t, err)
	for _, s := range c.Shards {
		conn, err := pgx.Connect(ctx, s)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "INSERT INTO rl.tenants (role, key_prefix) VALUES ($1::regrole, 'a:')", role)
		conn.Close(ctx)
		require.NoError(t, err)
	}
	rc, err := pgx.Connect(ctx, c.Router)
	require.NoError(t, err)
	_, err = rc.Exec(ctx, "CREATE USER MAPPING FOR "+role+" SERVER rl_shards OPTIONS (user '"+role+"')")
	rc.Close(ctx)
	require.NoError(t, err)

	u, err := url.Parse(c.Router)
	require.NoError(t, err)
	u.User = url.User(role)
	conn, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	defer conn.Close(ctx)
	far := time.Now().Add(100 * 365 * 24 * time.Hour).UnixMicro()
	for i := range 10 { // keys on both shards
		k := "a:" + string(rune('0'+i))
		var now int64
		require.NoError(t, conn.QueryRow(ctx, "SELECT now_us FROM rl.rl_allow($1, 'gcra', 5, '1 minute', now_us => $2)", k, far).Scan(&now))
		require.Less(t, now, time.Now().Add(time.Hour).UnixMicro(), "an untrusted role decides on the shard's clock")
		_, err = conn.Exec(ctx, "SELECT rl.rl_allow($1, 'gcra', 5, '1 minute')", "b:"+string(rune('0'+i)))
		requireCode(t, err, "42501")
	}
	for _, s := range c.Shards {
		require.Positive(t, count(t, s, "SELECT count(*) FROM rl.state WHERE key LIKE 'a:%'"), "keys on every shard")
	}
	_, err = conn.Exec(ctx, "SELECT rl.rl_expire()")
	requireCode(t, err, "42501")
}
