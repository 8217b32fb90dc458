package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rlcore/rl/sql/migrations"
)

// A template database is built once per server and content, then copied
// (CREATE DATABASE ... TEMPLATE, a file copy: milliseconds where migrating
// takes seconds) for every test that asks for one.
//
// Its name is templatePrefix plus a hash of everything it is built from
// (for Migrated: every file of sql/migrations and the server's version), so
// a template built from other content (another branch, an edited
// migration) is never used: a change of content is a new name. Building is
// serialized across processes by a PostgreSQL advisory lock on the name,
// so the test binaries of several packages, run in parallel, build it once
// between them; it is built under a temporary name and renamed when
// complete, so a build that died half way is never copied. A finished
// template is marked IS_TEMPLATE and ALLOW_CONNECTIONS false: no session
// can hold it open, which would make CREATE DATABASE ... TEMPLATE fail.
//
// Templates stay on the server for the next run (rebuilding costs what
// they save); one not used for templateMaxAge is dropped by the next build
// of another.
const (
	templatePrefix = "rltpl_"
	templateMaxAge = 7 * 24 * time.Hour
)

// Template returns the name of the template database for key on the
// server at serverURL, building it first if it does not exist yet: an empty
// database on which build runs (given its URL). key must name the content
// build creates (a hash of its inputs, see MigrationsKey); the name is
// derived from it.
func Template(ctx context.Context, serverURL, key string, build func(ctx context.Context, dbURL string) error) (string, error) {
	name := templatePrefix + key
	if len(name) > 63 {
		return "", fmt.Errorf("pgtest: template name %q is longer than PostgreSQL's 63 bytes: shorten the key", name)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("pgtest: bad DATABASE_URL: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("pgtest: PostgreSQL at %s is unreachable (set DATABASE_URL): %w", u.Redacted(), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if ok, err := templateExists(ctx, conn, name); err != nil || ok {
		if ok {
			touchTemplate(ctx, conn, name)
		}
		return name, err
	}
	// Another process may be building it: wait for its lock, then look
	// again.
	h := fnv.New64a()
	h.Write([]byte(name))
	lock := int64(h.Sum64())
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lock); err != nil {
		return "", fmt.Errorf("pgtest: lock template %s: %w", name, err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lock)
	if ok, err := templateExists(ctx, conn, name); err != nil || ok {
		return name, err
	}
	pruneTemplates(ctx, conn, name)
	building := name + "_b" // under the lock: a leftover is a build that died
	for _, q := range []string{
		"DROP DATABASE IF EXISTS " + building + " WITH (FORCE)",
		"CREATE DATABASE " + building,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("pgtest: build template %s: %w", name, err)
		}
	}
	bu := *u
	bu.Path = "/" + building
	if err := build(ctx, bu.String()); err != nil {
		conn.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)")
		return "", fmt.Errorf("pgtest: build template %s: %w", name, err)
	}
	for _, q := range []string{
		// Sessions the build left (a pool still closing) would block the
		// rename.
		"SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = '" + building + "' AND pid <> pg_backend_pid()",
		"ALTER DATABASE " + building + " RENAME TO " + name,
		"ALTER DATABASE " + name + " WITH IS_TEMPLATE true ALLOW_CONNECTIONS false",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("pgtest: finish template %s: %w", name, err)
		}
	}
	touchTemplate(ctx, conn, name)
	return name, nil
}

// touchTemplate records in the template's comment that it was used now,
// for pruneTemplates. Failures are ignored (two processes writing the
// comment at once may meet "tuple concurrently updated"): pruning is
// housekeeping.
func touchTemplate(ctx context.Context, conn *pgx.Conn, name string) {
	conn.Exec(ctx, "COMMENT ON DATABASE "+name+" IS '"+templateComment+time.Now().UTC().Format(time.RFC3339)+"'")
}

// templateComment starts a template's comment; the time it was last used
// follows.
const templateComment = "rl test template, last used "

func templateExists(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var n int
	err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1 AND datistemplate", name).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("pgtest: look up template %s: %w", name, err)
	}
	return n > 0, nil
}

// pruneTemplates drops the templates other than keep last used more than
// templateMaxAge ago (their comment says when). A template in use by a copy
// at that moment is not dropped (DROP DATABASE refuses); failures are
// ignored: pruning is housekeeping.
func pruneTemplates(ctx context.Context, conn *pgx.Conn, keep string) {
	rows, err := conn.Query(ctx, `SELECT d.datname, coalesce(shobj_description(d.oid, 'pg_database'), '')
		FROM pg_database d WHERE d.datistemplate AND d.datname LIKE 'rltpl\_%' AND d.datname <> $1`, keep)
	if err != nil {
		return
	}
	var old []string
	for rows.Next() {
		var name, comment string
		if rows.Scan(&name, &comment) != nil {
			continue
		}
		at, _ := strings.CutPrefix(comment, templateComment)
		built, err := time.Parse(time.RFC3339, at)
		if err == nil && time.Since(built) > templateMaxAge {
			old = append(old, name)
		}
	}
	rows.Close()
	for _, name := range old {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+name+" WITH IS_TEMPLATE false"); err == nil {
			conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name)
		}
	}
}

// CreateFrom creates a new database on the server at serverURL as a copy
// of the template database named template, and returns its URL and a
// function that drops it, as Create does.
func CreateFrom(ctx context.Context, serverURL, template string) (dbURL string, drop func(context.Context) error, err error) {
	return create(ctx, serverURL, template)
}

// MigrationsKey is the template key of a database migrated to the newest
// version by sql/migrations: a hash of every file of migrations.FS and of
// the server's version, so that an edited or added migration, or another
// server, never meets a template built before.
func MigrationsKey(ctx context.Context, serverURL string) (string, error) {
	h := sha256.New()
	var files []string
	err := fs.WalkDir(migrations.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := fs.ReadFile(migrations.FS, f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, serverURL)
	if err != nil {
		u, _ := url.Parse(serverURL)
		return "", fmt.Errorf("pgtest: PostgreSQL at %s is unreachable (set DATABASE_URL): %w", u.Redacted(), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version_num").Scan(&version); err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	fmt.Fprintf(h, "server %s\n", version)
	return "migrated_" + hex.EncodeToString(h.Sum(nil))[:24], nil
}

// migrated is the migrated template of this process's server, looked up
// (or built) once, or again once it has gone.
var migrated struct {
	mu   sync.Mutex
	name string
}

// MigratedTemplate returns the name of the template database migrated to
// the newest version by migrations.Up (as the server's superuser), building
// it if no process has yet.
func MigratedTemplate(ctx context.Context) (string, error) {
	migrated.mu.Lock()
	defer migrated.mu.Unlock()
	if migrated.name != "" {
		return migrated.name, nil
	}
	key, err := MigrationsKey(ctx, URL())
	if err != nil {
		return "", err
	}
	name, err := Template(ctx, URL(), key, migrations.Up)
	if err != nil {
		return "", err
	}
	migrated.name = name
	return name, nil
}

// CreateMigrated creates a new database migrated to the newest version (a
// copy of MigratedTemplate) on the server URL names, and returns its URL
// and a function that drops it.
func CreateMigrated(ctx context.Context) (dbURL string, drop func(context.Context) error, err error) {
	tpl, err := MigratedTemplate(ctx)
	if err != nil {
		return "", nil, err
	}
	dbURL, drop, err = CreateFrom(ctx, URL(), tpl)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "3D000" { // pruned by another process since: build it again
		migrated.mu.Lock()
		if migrated.name == tpl {
			migrated.name = ""
		}
		migrated.mu.Unlock()
		if tpl, err = MigratedTemplate(ctx); err == nil {
			dbURL, drop, err = CreateFrom(ctx, URL(), tpl)
		}
	}
	return dbURL, drop, err
}

// NewMigrated creates a new database for t migrated to the newest version
// by sql/migrations (a copy of the migrated template, MigratedTemplate),
// dropped when t ends, and returns its URL. A test that tests migrating
// itself starts from NewDatabase instead. It fails t when the server is
// unreachable, and skips t with -short (SkipShort).
func NewMigrated(t testing.TB) string {
	t.Helper()
	SkipShort(t)
	dbURL, drop, err := CreateMigrated(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Errorf("pgtest: drop database: %v", err)
		}
	})
	return dbURL
}

func randomName() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "rltest_" + hex.EncodeToString(b)
}
