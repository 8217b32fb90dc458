package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/migrations"
)

// TestQuotaTablesTrustedOnly: the RLQS server's tables (rl.quota_bucket,
// rl.quota_client) are for rl_admin, which does all that the server's
// store does (lock, insert, update, delete); rl_app can neither read nor
// write them, and a client row needs its bucket.
func TestQuotaTablesTrustedOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewDatabase(t)
	require.NoError(t, migrations.Up(ctx, u))
	_, appURL := newRole(t, u, true, "app", []string{"rl_app"}, u)
	_, adminURL := newRole(t, u, true, "admin", []string{"rl_admin"}, u)
	app := connect(t, appURL)
	admin := connect(t, adminURL)

	insertClient := `INSERT INTO rl.quota_client VALUES ('\x6b'::bytea, 'c1', 1, -1, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, true, false, -1, false)`
	for _, q := range []string{
		`INSERT INTO rl.quota_bucket VALUES ('\x6b'::bytea, '\x'::bytea, 100, 1000000, 100)`,
		insertClient,
		`SELECT fill FROM rl.quota_bucket WHERE key = '\x6b'::bytea FOR UPDATE`,
		`UPDATE rl.quota_client SET seq = 2 WHERE key = '\x6b'::bytea AND client = 'c1'`,
		`UPDATE rl.quota_bucket SET burst = 50 WHERE key = '\x6b'::bytea`,
	} {
		_, err := admin.Exec(ctx, q)
		require.NoError(t, err, q)
		_, err = app.Exec(ctx, q)
		require.Equal(t, "42501", sqlState(err), "rl_app: %s: %v", q, err)
	}
	_, err := admin.Exec(ctx, `INSERT INTO rl.quota_client VALUES ('\x6e6f6e65'::bytea, 'c1', 1, -1, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, true, false, -1, false)`)
	require.Equal(t, "23503", sqlState(err), "a client row without its bucket: %v", err)

	_, err = admin.Exec(ctx, `DELETE FROM rl.quota_bucket WHERE key = '\x6b'::bytea`)
	require.NoError(t, err)
	var n int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM rl.quota_client`).Scan(&n))
	require.Zero(t, n, "client rows go with their bucket")
	_, err = app.Exec(ctx, `DELETE FROM rl.quota_client`)
	require.Equal(t, "42501", sqlState(err), "%v", err)
}
