package migrations_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/internal/testkit/sqldecider"
	"github.com/rlcore/rl/sql/extension"
	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/tests/vectors/vectorstest"
)

// The extension rl (sql/extension), installed from the server's share
// directory by make -C sql/extension install. These tests install it as an
// ordinary role that owns its database (ordinaryOwner, as TestMain migrates),
// and fail, never skip, when the server does not offer it.

const extensionInstallHint = "install the extension's files into the server's share directory: " +
	"make -C sql/extension install (as root; scripts/test-setup.sh, which make test runs, does it; PG_CONFIG=... for another server than pg_config's)"

// TestExtensionCatalog: CREATE EXTENSION rl gives the catalog the
// migrations give (the renderer's text: functions with their
// definitions and comments, types, tables, indexes, grants; owners aside),
// with every object of schema rl a member of the extension, none owned by
// a superuser, every table's rows kept by pg_dump, no rl_schema_migrations,
// and the session's search_path as it was.
func TestExtensionCatalog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	migrated := pgtest.NewDatabase(t)
	require.NoError(t, migrations.Up(ctx, migrated))
	_, owner := extensionDatabase(t, "")

	want, err := renderer{conn: connect(t, migrated)}.render(ctx)
	require.NoError(t, err)
	conn := connect(t, owner)
	got, err := renderer{conn: conn, extension: extension.Name}.render(ctx)
	require.NoError(t, err)
	if got != want {
		t.Errorf("CREATE EXTENSION rl gives another schema rl than the migrations (stale files installed? %s)\n%s",
			extensionInstallHint, firstDifference("migrated", want, "extension", got))
	}
	requireExtensionShape(t, conn, strconv.Itoa(extension.Version))
	require.False(t, exists(t, conn, "SELECT FROM pg_class WHERE relname = $1", migrations.Table),
		"the extension records its version in pg_extension, not in "+migrations.Table)
	// One database uses one of the two: the migrations refuse it, saying
	// how to upgrade instead, and change nothing.
	var xe *migrations.ExtensionError
	require.ErrorAs(t, migrations.Up(ctx, owner), &xe)
	require.Equal(t, strconv.Itoa(extension.Version), xe.Version)
	require.ErrorContains(t, xe, "ALTER EXTENSION rl UPDATE")
	again, err := renderer{conn: conn, extension: extension.Name}.render(ctx)
	require.NoError(t, err)
	require.Equal(t, got, again, "the refused migrations changed schema rl")
}

// TestExtensionVectors runs every conformance vector on a database where
// CREATE EXTENSION rl installed rl, through the harnesses of
// TestVectorsPure and TestVectorsTable.
func TestExtensionVectors(t *testing.T) {
	t.Parallel()
	su, _ := extensionDatabase(t, "")
	cfg, err := pgxpool.ParseConfig(su)
	require.NoError(t, err)
	cfg.MaxConns = 20
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off" // as TestMain's pool
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	d := sqldecider.New(pool)
	t.Run("pure/single", func(t *testing.T) { vectorstest.Run(t, d, false) })
	t.Run("pure/all", func(t *testing.T) { vectorstest.Run(t, d, true) })
	t.Run("table", func(t *testing.T) { runVectorsTable(t, pool) })
}

// TestExtensionUpdate: the extension installed at each version from
// extension.Oldest, in use, then ALTER EXTENSION rl UPDATE, keeps its rows
// and ends with the catalog of a fresh install of the latest version.
func TestExtensionUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, fresh := extensionDatabase(t, "")
	want, err := renderer{conn: connect(t, fresh), extension: extension.Name}.render(ctx)
	require.NoError(t, err)
	for v := extension.Oldest; v < extension.Version; v++ {
		t.Run(fmt.Sprintf("from=%d", v), func(t *testing.T) {
			t.Parallel()
			_, owner := extensionDatabase(t, strconv.Itoa(v))
			conn := connect(t, owner)
			requireExtensionShape(t, conn, strconv.Itoa(v))
			_, err := conn.Exec(ctx, `SELECT rl.rl_allow('update:' || i, 'gcra', 5, '1 minute') FROM generate_series(1, 20) i`)
			require.NoError(t, err)

			_, err = conn.Exec(ctx, "ALTER EXTENSION rl UPDATE")
			require.NoError(t, err)
			requireExtensionShape(t, conn, strconv.Itoa(extension.Version))
			got, err := renderer{conn: conn, extension: extension.Name}.render(ctx)
			require.NoError(t, err)
			if got != want {
				t.Errorf("version %d updated differs from a fresh install of %d\n%s",
					v, extension.Version, firstDifference("fresh", want, "updated", got))
			}
			var n int64
			require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM rl.state WHERE key LIKE 'update:%'`).Scan(&n))
			require.Equal(t, int64(20), n, "the state survives the update")
		})
	}
}

// TestExtensionDrop: DROP EXTENSION rl refuses while a trigger uses
// rl.enforce_limit(), then removes everything CREATE EXTENSION rl made in
// the database (the cluster's roles rl_app and rl_admin stay), and the
// extension installs again.
func TestExtensionDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, owner := ownedDatabase(t)
	conn := connect(t, owner)
	before := databaseObjects(t, conn)

	createExtension(t, conn, "")
	require.NotEqual(t, before, databaseObjects(t, conn))
	_, err := conn.Exec(ctx, `CREATE TABLE comments (user_id text);
		CREATE TRIGGER comments_rate BEFORE INSERT ON comments
		    FOR EACH ROW EXECUTE FUNCTION rl.enforce_limit('user_id', 'sliding_window', '5', '1 minute')`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "DROP EXTENSION rl")
	require.Equal(t, "2BP01", sqlState(err), "DROP EXTENSION rl while a trigger uses rl.enforce_limit: %v", err)
	_, err = conn.Exec(ctx, "DROP TABLE comments")
	require.NoError(t, err)

	_, err = conn.Exec(ctx, "DROP EXTENSION rl")
	require.NoError(t, err)
	require.Equal(t, before, databaseObjects(t, conn), "DROP EXTENSION rl leaves objects behind")
	for _, role := range []string{"rl_app", "rl_admin"} {
		require.True(t, exists(t, conn, "SELECT FROM pg_roles WHERE rolname = $1", role), "%s belongs to the cluster and stays", role)
	}
	createExtension(t, conn, "")
}

// ownedDatabase creates a database for t, owned by a fresh ordinary role
// (ordinaryOwner: no SUPERUSER, CREATEROLE or CREATEDB), and returns its
// URL for a superuser and for the owner. Both go when t ends.
func ownedDatabase(t *testing.T) (superuserURL, ownerURL string) {
	t.Helper()
	return pgtest.NewOwnedDatabase(t)
}

// extensionDatabase is ownedDatabase with the extension rl installed at
// version ("": the default) by the owner.
func extensionDatabase(t *testing.T, version string) (superuserURL, ownerURL string) {
	t.Helper()
	su, owner := ownedDatabase(t)
	createExtension(t, connect(t, owner), version)
	return su, owner
}

// createExtension runs CREATE EXTENSION rl [VERSION version] on conn, in
// a transaction that then checks the session's search_path is unchanged:
// the migrations' SET LOCAL search_path lines end with the script. It fails
// t, saying how to install the files, when the server does not offer the
// extension at extension.Oldest and extension.Version.
func createExtension(t *testing.T, conn *pgx.Conn, version string) {
	t.Helper()
	ctx := context.Background()
	var versions []string
	var dflt *string
	require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(array_agg(v.version ORDER BY v.version), '{}'),
		       (SELECT e.default_version FROM pg_available_extensions e WHERE e.name = $1)
		  FROM pg_available_extension_versions v WHERE v.name = $1`, extension.Name).Scan(&versions, &dflt))
	if len(versions) == 0 {
		t.Fatalf("the server does not offer the extension rl: %s", extensionInstallHint)
	}
	for _, v := range []int{extension.Oldest, extension.Version} {
		if !slices.Contains(versions, strconv.Itoa(v)) {
			t.Fatalf("the server offers the extension rl at versions %v, not at %d: %s", versions, v, extensionInstallHint)
		}
	}
	if dflt == nil || *dflt != strconv.Itoa(extension.Version) {
		t.Fatalf("the server's rl.control has default_version %v, want %d: %s", dflt, extension.Version, extensionInstallHint)
	}

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	var before, after string
	require.NoError(t, tx.QueryRow(ctx, "SHOW search_path").Scan(&before))
	stmt := "CREATE EXTENSION " + extension.Name
	if version != "" {
		stmt += " VERSION " + pgx.Identifier{version}.Sanitize()
	}
	_, err = tx.Exec(ctx, stmt)
	require.NoError(t, err, "%s (as an ordinary owner)", stmt)
	require.NoError(t, tx.QueryRow(ctx, "SHOW search_path").Scan(&after))
	require.Equal(t, before, after, "%s changed the session's search_path", stmt)
	require.NoError(t, tx.Commit(ctx))
}

// requireExtensionShape checks the extension rl on conn's database, which
// conn's role installed: at version; owned by that role, as is every
// object of schema rl, none by a superuser (definer-rights functions run as
// their owner); the schema and each of its functions, tables, views and
// types a member, so that DROP EXTENSION removes them; and every table
// marked for pg_dump.
func requireExtensionShape(t *testing.T, conn *pgx.Conn, version string) {
	t.Helper()
	ctx := context.Background()
	var gotVersion, owner string
	require.NoError(t, conn.QueryRow(ctx, `SELECT extversion, extowner::regrole::text FROM pg_extension WHERE extname = $1`,
		extension.Name).Scan(&gotVersion, &owner))
	require.Equal(t, version, gotVersion)
	require.Equal(t, owner, currentUser(t, conn), "the extension's owner is the role that created it")

	rows, err := conn.Query(ctx, `
		WITH obj AS (
		    SELECT 'pg_namespace'::regclass AS classid, n.oid AS objid, n.nspowner AS owner FROM pg_namespace n WHERE n.nspname = 'rl'
		    UNION ALL SELECT 'pg_proc'::regclass, p.oid, p.proowner FROM pg_proc p WHERE p.pronamespace = 'rl'::regnamespace
		    UNION ALL SELECT 'pg_class'::regclass, c.oid, c.relowner FROM pg_class c
		     WHERE c.relnamespace = 'rl'::regnamespace AND c.relkind IN ('r', 'v')
		    UNION ALL SELECT 'pg_type'::regclass, ty.oid, ty.typowner FROM pg_type ty LEFT JOIN pg_class c ON c.oid = ty.typrelid
		     WHERE ty.typnamespace = 'rl'::regnamespace AND (c.relkind = 'c' OR ty.typtype IN ('e', 'd'))
		)
		SELECT format('%s: %s', pg_describe_object(o.classid, o.objid, 0), p.problems)
		  FROM obj o
		 CROSS JOIN LATERAL (SELECT concat_ws(', ',
		       CASE WHEN NOT EXISTS (SELECT FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
		                              WHERE d.classid = o.classid AND d.objid = o.objid AND d.deptype = 'e' AND e.extname = $1)
		            THEN 'not a member of the extension' END,
		       CASE WHEN o.owner <> current_user::regrole THEN 'owned by ' || o.owner::regrole::text END,
		       CASE WHEN (SELECT r.rolsuper FROM pg_roles r WHERE r.oid = o.owner) THEN 'owned by a superuser' END) AS problems) p
		 WHERE p.problems <> ''
		UNION ALL
		SELECT format('table %s: rows not kept by pg_dump (add it to configTables, sql/extension/files_test.go)', c.oid::regclass)
		  FROM pg_class c
		 WHERE c.relnamespace = 'rl'::regnamespace AND c.relkind = 'r'
		   AND c.oid <> ALL (coalesce((SELECT e.extconfig FROM pg_extension e WHERE e.extname = $1), '{}'))
		UNION ALL
		SELECT 'the schema rl holds only ' || count(*) || ' functions' FROM pg_proc
		 WHERE pronamespace = 'rl'::regnamespace HAVING count(*) < 50
		ORDER BY 1`, extension.Name)
	require.NoError(t, err)
	bad, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, bad)
}

// currentUser returns the role conn acts as.
func currentUser(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var u string
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT current_user::text").Scan(&u))
	return u
}

// databaseObjects lists what a database holds beyond a new one's: its
// schemas, relations, functions, types and extensions by name, and how
// many comments, dependencies, initial privileges and dependencies on
// roles (grants, ownership) it records.
func databaseObjects(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
		SELECT pg_describe_object(classid, objid, 0) FROM (
		    SELECT 'pg_namespace'::regclass AS classid, oid AS objid FROM pg_namespace WHERE oid >= 16384
		    UNION ALL SELECT 'pg_class'::regclass, oid FROM pg_class WHERE oid >= 16384
		    UNION ALL SELECT 'pg_proc'::regclass, oid FROM pg_proc WHERE oid >= 16384
		    UNION ALL SELECT 'pg_type'::regclass, oid FROM pg_type WHERE oid >= 16384
		    UNION ALL SELECT 'pg_extension'::regclass, oid FROM pg_extension WHERE oid >= 16384
		) o
		UNION ALL SELECT format('%s comments', count(*)) FROM pg_description WHERE objoid >= 16384
		UNION ALL SELECT format('%s dependencies', count(*)) FROM pg_depend WHERE objid >= 16384
		UNION ALL SELECT format('%s initial privileges', count(*)) FROM pg_init_privs WHERE objoid >= 16384
		UNION ALL SELECT format('%s dependencies on roles', count(*)) FROM pg_shdepend
		           WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY 1`)
	require.NoError(t, err)
	objs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return objs
}

// noticeConn connects to u, recording every notice (WARNING, NOTICE, ...)
// the server sends; notices returns them, "SEVERITY: message", in order.
func noticeConn(t *testing.T, u string) (conn *pgx.Conn, notices func() []string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(u)
	require.NoError(t, err)
	var (
		mu  sync.Mutex
		got []string
	)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, n.Severity+": "+n.Message)
	}
	conn, err = pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// TestExtensionSuperuser: CREATE EXTENSION rl and ALTER EXTENSION rl
// UPDATE refuse to run as a superuser (42501), naming the risk and the
// ordinary owner to use instead, and leave nothing behind, unless
// rl.allow_superuser is on: then they warn and go on. As the ordinary
// owner both are silent: no notice at all.
func TestExtensionSuperuser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	su, owner := ownedDatabase(t)
	conn, notices := noticeConn(t, su)
	suName := currentUser(t, conn)
	before := databaseObjects(t, conn)

	_, err := conn.Exec(ctx, "CREATE EXTENSION rl")
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe, "CREATE EXTENSION rl as a superuser")
	require.Equal(t, "42501", pe.Code)
	require.Equal(t, fmt.Sprintf(`refusing to install the extension rl as the superuser "%s": every SECURITY DEFINER function of rl would run with superuser rights for any caller`, suName), pe.Message)
	require.Contains(t, pe.Detail, "The owner of schema rl must be an ordinary role, never a superuser")
	require.Contains(t, pe.Hint, "Create an ordinary owner role (no SUPERUSER) that owns the database")
	require.Contains(t, pe.Hint, "connected as rl_owner, CREATE EXTENSION rl")
	require.Contains(t, pe.Hint, "SET rl.allow_superuser = on")
	require.Equal(t, before, databaseObjects(t, conn), "a refused CREATE EXTENSION rl leaves nothing")

	_, err = conn.Exec(ctx, "SET rl.allow_superuser = 'sometimes'")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE EXTENSION rl")
	require.Equal(t, "22023", sqlState(err), "rl.allow_superuser = sometimes: %v", err)
	require.ErrorContains(t, err, `rl.allow_superuser is "sometimes": want on or off`)
	require.Empty(t, notices())

	// Opted in: a WARNING per script, and the superuser owns the extension.
	_, err = conn.Exec(ctx, "SET rl.allow_superuser = on")
	require.NoError(t, err)
	prev := strconv.Itoa(extension.Version - 1)
	_, err = conn.Exec(ctx, "CREATE EXTENSION rl VERSION "+pgx.Identifier{prev}.Sanitize())
	require.NoError(t, err)
	warnings := notices()
	require.Len(t, warnings, extension.Version-extension.Oldest, "one WARNING per script: rl--%d.sql and each update to %s", extension.Oldest, prev)
	for _, w := range warnings {
		require.Contains(t, w, fmt.Sprintf(`WARNING: the superuser "%s" is about to `, suName))
		require.Contains(t, w, "every SECURITY DEFINER function of rl will run with superuser rights for any caller")
	}
	// An update as a superuser refuses as well, and changes nothing.
	_, err = conn.Exec(ctx, "RESET rl.allow_superuser")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ALTER EXTENSION rl UPDATE")
	require.ErrorAs(t, err, &pe, "ALTER EXTENSION rl UPDATE as a superuser")
	require.Equal(t, "42501", pe.Code)
	require.Contains(t, pe.Message, fmt.Sprintf(`refusing to update the extension rl to version %d as the superuser "%s"`, extension.Version, suName))
	require.Contains(t, pe.Hint, "Connect as the ordinary role that owns schema rl and run ALTER EXTENSION rl UPDATE as it")
	var version string
	require.NoError(t, conn.QueryRow(ctx, "SELECT extversion FROM pg_extension WHERE extname = 'rl'").Scan(&version))
	require.Equal(t, prev, version)
	_, err = conn.Exec(ctx, "DROP EXTENSION rl")
	require.NoError(t, err)

	// The ordinary owner: not a word, installing at the oldest version and
	// updating to the latest.
	oconn, onotices := noticeConn(t, owner)
	_, err = oconn.Exec(ctx, "CREATE EXTENSION rl VERSION "+pgx.Identifier{strconv.Itoa(extension.Oldest)}.Sanitize())
	require.NoError(t, err)
	_, err = oconn.Exec(ctx, "ALTER EXTENSION rl UPDATE")
	require.NoError(t, err)
	requireExtensionShape(t, oconn, strconv.Itoa(extension.Version))
	require.Empty(t, onotices(), "CREATE EXTENSION rl and ALTER EXTENSION rl UPDATE as the ordinary owner")
}
