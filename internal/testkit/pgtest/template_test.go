package pgtest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/migrations"
)

// TestNewMigrated: each copy is a database of its own, migrated to the
// newest version; a write in one is not seen in the other.
func TestNewMigrated(t *testing.T) {
	ctx := context.Background()
	a, b := pgtest.NewMigrated(t), pgtest.NewMigrated(t)
	if a == b {
		t.Fatalf("two copies share the URL %s", a)
	}
	for _, u := range []string{a, b} {
		m, err := migrations.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		v, dirty, err := m.Version(ctx)
		m.Close()
		if err != nil || dirty || v != migrations.Latest {
			t.Fatalf("copy at version %d (dirty %v, err %v), want %d, clean", v, dirty, err, migrations.Latest)
		}
	}
	exec(t, a, "CREATE TABLE public.only_in_a (x int)")
	var n int
	conn, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relname = 'only_in_a'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the table made in one copy is in the other (%d, %v)", n, err)
	}
}

// TestTemplateBuiltOnce: callers asking for one key at once (as the test
// binaries of several packages do) build it once between them, and every
// copy has what the build made; another key is another template.
func TestTemplateBuiltOnce(t *testing.T) {
	pgtest.SkipShort(t)
	ctx := context.Background()
	r := make([]byte, 6)
	rand.Read(r)
	key := "selftest_" + hex.EncodeToString(r)
	var builds atomic.Int32
	build := func(ctx context.Context, u string) error {
		builds.Add(1)
		exec(t, u, "CREATE TABLE public.built (x int)")
		return nil
	}
	names := make([]string, 4)
	var wg sync.WaitGroup
	for i := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := pgtest.Template(ctx, pgtest.URL(), key, build)
			if err != nil {
				t.Error(err)
			}
			names[i] = n
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		exec(t, pgtest.URL(), "ALTER DATABASE "+names[0]+" WITH IS_TEMPLATE false")
		exec(t, pgtest.URL(), "DROP DATABASE "+names[0])
	})
	if got := builds.Load(); got != 1 {
		t.Fatalf("built %d times, want once", got)
	}
	for _, n := range names[1:] {
		if n != names[0] {
			t.Fatalf("one key, two templates: %s and %s", names[0], n)
		}
	}
	u, drop, err := pgtest.CreateFrom(ctx, pgtest.URL(), names[0])
	if err != nil {
		t.Fatal(err)
	}
	defer drop(ctx)
	exec(t, u, "INSERT INTO public.built VALUES (1)")

	other, err := pgtest.Template(ctx, pgtest.URL(), key+"_other", build)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec(t, pgtest.URL(), "ALTER DATABASE "+other+" WITH IS_TEMPLATE false")
		exec(t, pgtest.URL(), "DROP DATABASE "+other)
	})
	if other == names[0] || builds.Load() != 2 {
		t.Fatalf("another key gave template %s after %d builds, want a new one built", other, builds.Load())
	}
}

func exec(t *testing.T, u, q string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
