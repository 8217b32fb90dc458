package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/migrations"
)

func connect(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), u)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exists(t *testing.T, conn *pgx.Conn, query string, args ...any) bool {
	t.Helper()
	var ok bool
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT EXISTS ("+query+")", args...).Scan(&ok))
	return ok
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func TestFiles(t *testing.T) {
	ups, err := fs.Glob(migrations.FS, "*.up.sql")
	require.NoError(t, err)
	require.Len(t, ups, migrations.Latest, "Latest must be the number of migrations")
	for _, up := range ups {
		down := strings.TrimSuffix(up, ".up.sql") + ".down.sql"
		_, err := fs.Stat(migrations.FS, down)
		require.NoError(t, err, "%s needs %s", up, down)
	}
}

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewDatabase(t)
	conn := connect(t, u)

	require.NoError(t, migrations.Up(ctx, u))
	require.NoError(t, migrations.Up(ctx, u), "up twice is harmless")
	require.True(t, exists(t, conn, "SELECT FROM pg_tables WHERE schemaname = 'rl' AND tablename = 'state'"))
	require.True(t, exists(t, conn, "SELECT FROM pg_tables WHERE tablename = $1", migrations.Table),
		"the version lives in its own table")
	require.False(t, exists(t, conn, "SELECT FROM pg_tables WHERE tablename = 'schema_migrations'"))

	m, err := migrations.Open(ctx, u)
	require.NoError(t, err)
	defer m.Close()
	v, dirty, err := m.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, uint(migrations.Latest), v)
	require.False(t, dirty)
	require.ErrorIs(t, m.Up(ctx), migrations.ErrNoChange)

	_, err = conn.Exec(ctx, `SELECT rl.rl_allow('k', 'token_bucket', 10, '1 minute')`)
	require.NoError(t, err)

	require.NoError(t, m.Down(ctx))
	v, _, err = m.Version(ctx)
	require.NoError(t, err)
	require.Zero(t, v)
	require.False(t, exists(t, conn, "SELECT FROM pg_namespace WHERE nspname = 'rl'"))
	require.ErrorIs(t, m.Down(ctx), migrations.ErrNoChange)
	// The shared test database still uses rl_app: this down kept it.
	require.True(t, exists(t, conn, "SELECT FROM pg_roles WHERE rolname = 'rl_app'"))

	require.NoError(t, m.Up(ctx))
	var allowed bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT allowed FROM rl.rl_allow('k', 'token_bucket', 10, '1 minute')`).Scan(&allowed))
	require.True(t, allowed)

	// Step by step.
	require.NoError(t, m.Steps(ctx, -2))
	v, _, _ = m.Version(ctx)
	require.Equal(t, uint(migrations.Latest-2), v)
	require.NoError(t, m.Goto(ctx, 1))
	require.True(t, exists(t, conn, "SELECT FROM pg_tables WHERE schemaname = 'rl' AND tablename = 'state'"))
	require.False(t, exists(t, conn, "SELECT FROM pg_proc WHERE proname = 'decide'"))
	require.NoError(t, m.Goto(ctx, migrations.Latest))
	require.True(t, exists(t, conn, "SELECT FROM pg_proc WHERE proname = 'rl_allow'"))
}

// TestDownRefusesWhileTriggersUseIt: a migration below version 4 would drop
// the trigger function under a user's trigger: Down, Steps and Goto refuse
// before changing anything, naming the triggers.
func TestDownRefusesWhileTriggersUseIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewDatabase(t)
	conn := connect(t, u)
	require.NoError(t, migrations.Up(ctx, u))
	_, err := conn.Exec(ctx, `CREATE TABLE posts (user_id int);
		CREATE TRIGGER posts_limit BEFORE INSERT ON posts
		FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit('user_id', 'fixed_window', '5', '1 minute')`)
	require.NoError(t, err)

	m, err := migrations.Open(ctx, u)
	require.NoError(t, err)
	defer m.Close()
	var te *migrations.TriggerError
	require.ErrorAs(t, m.Down(ctx), &te)
	require.Equal(t, []string{"public.posts: posts_limit"}, te.Triggers)
	require.ErrorAs(t, m.Goto(ctx, 2), &te)
	require.ErrorAs(t, m.Steps(ctx, -migrations.Latest), &te)
	v, dirty, err := m.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, uint(migrations.Latest), v, "nothing was reverted")
	require.False(t, dirty)
	// Above version 4 the trigger function stays: allowed.
	require.NoError(t, m.Goto(ctx, 4))
	require.NoError(t, m.Up(ctx))

	_, err = conn.Exec(ctx, `DROP TABLE posts`)
	require.NoError(t, err)
	require.NoError(t, m.Down(ctx))
	require.False(t, exists(t, conn, "SELECT FROM pg_namespace WHERE nspname = 'rl'"))
}

// A failed first migration is repaired with "force -1" (no version), never
// "force 0", which records a version that does not exist.
func TestDirtyFirstMigrationSaysForceMinusOne(t *testing.T) {
	err := &migrations.DirtyError{Version: 1}
	require.Contains(t, err.Error(), `"rl-migrate force -1" after a failed up`)
	require.NotContains(t, err.Error(), "force 0")
	require.Contains(t, (&migrations.DirtyError{Version: 5}).Error(), `"rl-migrate force 4" after a failed up, "rl-migrate force 6" after a failed down`)
}

// Migrations applied by hand (no record of them): Up says to force the
// version, and changes nothing, instead of failing on the first CREATE.
func TestUpAfterMigrationsAppliedByHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewDatabase(t)
	conn := connect(t, u)
	require.NoError(t, migrations.Up(ctx, u))
	_, err := conn.Exec(ctx, "DROP TABLE "+migrations.Table)
	require.NoError(t, err)

	m, err := migrations.Open(ctx, u)
	require.NoError(t, err)
	defer m.Close()
	var ue *migrations.UnrecordedError
	require.ErrorAs(t, m.Up(ctx), &ue)
	require.Contains(t, ue.Error(), `"rl-migrate force N"`)
	require.NoError(t, m.Force(ctx, migrations.Latest))
	require.ErrorIs(t, m.Up(ctx), migrations.ErrNoChange)
}

func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = migrations.Up(ctx, u)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

func TestRoleAppPrivileges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t, dbURL)
	_, err := conn.Exec(ctx, "SET ROLE rl_app")
	require.NoError(t, err)

	var allowed bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT allowed FROM rl.rl_allow('role:1', 'token_bucket', 10, '1 minute')`).Scan(&allowed))
	require.True(t, allowed)
	for _, q := range []string{
		`SELECT * FROM rl.rl_allow_multi('role:1', '[{"name":"a","algorithm":"gcra","limit":3,"window":"1 second"}]')`,
		`SELECT * FROM rl.rl_peek('role:1', 'token_bucket', 10, '1 minute')`,
		`SELECT * FROM rl.rl_decide_multi('role:1', '{a}', '{6}', '{3}', '{1000000}', '{0}')`,
		`SELECT * FROM rl.rl_allow_us('role:2', 'gcra', 3, 1000000)`,
		`SELECT * FROM rl.rl_peek_us('role:2', 'gcra', 3, 1000000)`,
		`SELECT * FROM rl.rl_peek_multi('role:1', '[{"name":"a","algorithm":"gcra","limit":3,"window":"1 second"}]')`,
		`SELECT * FROM rl.decide_all(ARRAY[ROW(4,5,1000,0)]::rl.limit_spec[], NULL, 0, 1)`,
		`SELECT rl.algorithm_id('gcra'), rl.algorithm_name(6)`,
		`SELECT rl.rl_reset('role:1')`,
		`SELECT * FROM rl.decide(4, 3, 1000000, 0, 0, 0, 0, 0, '{}', 0, 1)`,
		`SELECT * FROM rl.decide(4, 3, 1000000, 0, 0, 0, 0, 0, '{}', 0, 1, 'settle', 0, 0, 0)`,
		`SELECT * FROM rl.rl_settle('role:1', 'token_bucket', 10, '1 minute', -1)`,
		`SELECT * FROM rl.rl_settle_us('role:2', 'gcra', 3, 1000000, 2)`,
		`SELECT * FROM rl.rl_settle_multi('role:1', '[{"name":"a","algorithm":"gcra","limit":3,"window":"1 second"}]', 1)`,
		`SELECT * FROM rl.rl_settle_decide('role:1', '{a}', '{6}', '{3}', '{1000000}', '{0}', -1)`,
		`SELECT * FROM rl.rl_decide_batch('{role:3}', '{a}', '{6}', '{3}', '{1000000}', '{0}', '{1}', NULL, NULL, NULL, '{true}')`,
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	for _, q := range []string{
		`SELECT * FROM rl.state`,
		`DELETE FROM rl.state`,
		`INSERT INTO rl.state (key, name) VALUES ('x', 'y')`,
		`SELECT rl._take1('k', 'default', 4, 10, 1000000, 0, 1, 0, true)`,
		`SELECT rl._now()`,
		`SELECT rl.rl_expire(0)`,
		`SELECT * FROM rl.lock_states('role:1', '{a}')`,
		`SELECT * FROM rl.tenants`,
		`SELECT rl._request_now(0)`,
		`SELECT rl._check_tenant_key('k', NULL)`,
		`SELECT * FROM rl._take_many('k', '{a}', '{6}', '{3}', '{1000000}', '{0}', 1, 0, true)`,
		`SELECT rl._eval(4, 5, 1000, 0, 0, 0, 0, 0, '{}', 0, 0, 0, 0, 1, true)`,
		`SELECT rl._settle(4, 5, 1000, 0, 0, 0, 0, 0, '{}', 0, 0, 0, 0, 1)`,
		`SELECT * FROM rl._settle_many('k', '{a}', '{6}', '{3}', '{1000000}', '{0}', 1, 0)`,
		`SELECT * FROM rl.lock_states_batch('{role:1}', '{a}')`,
	} {
		_, err := conn.Exec(ctx, q)
		require.Equal(t, "42501", sqlState(err), "%s: %v", q, err)
	}
	var login bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT rolcanlogin FROM pg_roles WHERE rolname = 'rl_app'`).Scan(&login))
	require.False(t, login)
}

func TestDriverURL(t *testing.T) {
	for _, in := range []string{
		"postgres://u:p@h:5432/db?sslmode=disable",
		"postgresql://u:p@h:5432/db?sslmode=disable",
		"pgx5://u:p@h:5432/db?sslmode=disable",
	} {
		out, secret, err := migrations.DriverURL(in)
		require.NoError(t, err, in)
		u, err := url.Parse(out)
		require.NoError(t, err)
		require.Equal(t, "pgx5", u.Scheme)
		require.Equal(t, migrations.Table, u.Query().Get("x-migrations-table"))
		require.Equal(t, "10", u.Query().Get("connect_timeout"))
		require.Equal(t, "disable", u.Query().Get("sslmode"))
		require.Contains(t, secret, "p")
	}
	out, _, err := migrations.DriverURL("postgres://h/db?x-migrations-table=mine&connect_timeout=3")
	require.NoError(t, err)
	require.Contains(t, out, "x-migrations-table=mine")
	require.Contains(t, out, "connect_timeout=3")

	for _, bad := range []string{"", "mysql://h/db", "host=h dbname=db", "postgres://h", "postgres://h/", "://x"} {
		_, _, err := migrations.DriverURL(bad)
		var ue *migrations.URLError
		require.ErrorAs(t, err, &ue, bad)
	}
	require.Equal(t, "postgres://u:xxxxx@h/db", migrations.Redact("postgres://u:hunter2@h/db"))
	require.NotContains(t, migrations.Redact("postgres://u@h/db?password=hunter2"), "hunter2")
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Refused at once: no context deadline, so a retry loop or a wait
	// would hang until the test's deadline.
	err := migrations.Up(ctx, "postgres://u:hunter2@127.0.0.1:1/db?sslmode=disable")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
	require.Contains(t, err.Error(), "cannot open database postgres://u:xxxxx@127.0.0.1:1/db")

	// A server that accepts and never answers: the context bounds the wait
	// (it must fire: nothing else can end the call).
	ln := pgtest.HungServer(t)
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err = migrations.Up(cctx, "postgres://u@"+ln+"/db?sslmode=disable")
	require.Error(t, err)
	require.ErrorIs(t, err, context.DeadlineExceeded, "ended by the context")
}

func TestUpCanceled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, migrations.Up(ctx, dbURL), context.Canceled)
}

// TestDownLast: the last migration's down leaves the schema as the one
// before made it (every function's definition, grants and comment, the
// types' columns, the tables): a database migrated to Latest and back
// equals one migrated to Latest-1.
func TestDownLast(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	before, back := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	for u, steps := range map[string][]uint{before: {migrations.Latest - 1}, back: {migrations.Latest, migrations.Latest - 1}} {
		m, err := migrations.Open(ctx, u)
		require.NoError(t, err)
		for _, v := range steps {
			require.NoError(t, m.Goto(ctx, v))
		}
		require.NoError(t, m.Close())
	}
	requireSameCatalog(t, catalog(t, before), catalog(t, back), fmt.Sprintf("migrated to %d and back", migrations.Latest))
}
