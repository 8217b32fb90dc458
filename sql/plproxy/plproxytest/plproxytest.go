// Package plproxytest gives tests a sharded rl of their own on the test
// PostgreSQL server: shard databases migrated with sql/migrations and a
// router database with the PL/Proxy router schema, all dropped when the
// test ends. The shards commit with synchronous_commit = off (each call
// through the router commits on its shard; the tests are about decisions,
// not crash durability). The server needs the PL/Proxy extension (Debian package
// postgresql-15-plproxy; scripts/test-setup.sh, which make test runs, installs it). Like internal/testkit/pgtest, an
// unreachable server or a missing extension fails the test, never skips it
// (but with -short, where every test needing PostgreSQL skips).
//
// The router logs in to the shards as a login role of its own (ShardLogin),
// an ordinary role granted rl_app and rl_admin: the trusted shard login an
// operator opts into (see plproxy.Apply), so that the router's trusted
// callers (the test server's superuser) choose the request time, as the
// conformance vectors need. The tests of the default, untrusted shard login
// start clusters of their own (sql/plproxy, trust_test.go).
package plproxytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/plproxy"
)

// Cluster is a router and its shards.
type Cluster struct {
	Router     string   // URL of the router database, as the test server's user
	Shards     []string // URLs of the shard databases, migrated, as the test server's user
	Partitions int      // partition count; partition i lives on Shards[i % len(Shards)]
	ShardLogin string   // the role the router logs in to the shards as (rl_app and rl_admin)
	Owner      string   // the router's owner: an ordinary role (plproxy.Config.Owner)
}

// New creates shards migrated databases (copies of pgtest's migrated
// template) and a router over them with
// partitions partitions (0: as many as shards, rounded up to a power of
// two).
func New(t testing.TB, shards, partitions int) *Cluster {
	t.Helper()
	pgtest.SkipShort(t)
	b := make([]byte, 6)
	rand.Read(b)
	c := &Cluster{ShardLogin: "rlshard_" + hex.EncodeToString(b), Owner: "rlrouter_" + hex.EncodeToString(b)}
	// Registered before the databases, so it runs after they are dropped.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, r := range []string{c.ShardLogin, c.Owner} {
			if err := exec(ctx, pgtest.URL(), "DROP ROLE IF EXISTS "+r); err != nil {
				t.Errorf("plproxytest: drop role %s: %v", r, err)
			}
		}
	})
	c.Router = pgtest.NewDatabase(t)
	for range shards {
		u := pgtest.NewMigrated(t) // a copy of the migrated template
		if err := fastCommit(u); err != nil {
			t.Fatalf("plproxytest: %v", err)
		}
		c.Shards = append(c.Shards, u)
	}
	// rl_app and rl_admin exist once a shard is migrated.
	if err := exec(context.Background(), pgtest.URL(), "CREATE ROLE "+c.ShardLogin+" LOGIN IN ROLE rl_app, rl_admin"); err != nil {
		t.Fatalf("plproxytest: create the shard login: %v", err)
	}
	logins := make([]string, len(c.Shards))
	for i, s := range c.Shards {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("plproxytest: %v", err)
		}
		u.User = url.User(c.ShardLogin)
		logins[i] = u.String()
	}
	// The router's functions belong to an ordinary role (Apply runs as the
	// superuser PL/Proxy needs), as sql/README.md recommends.
	if err := exec(context.Background(), pgtest.URL(), "CREATE ROLE "+c.Owner+" NOLOGIN"); err != nil {
		t.Fatalf("plproxytest: create the router's owner: %v", err)
	}
	cfg := plproxy.Config{Shards: logins, Partitions: partitions, Owner: c.Owner}
	parts, _, _, err := cfg.Layout()
	if err != nil {
		t.Fatal(err)
	}
	c.Partitions = len(parts)
	if err := plproxy.Apply(context.Background(), c.Router, cfg); err != nil {
		t.Fatalf("plproxytest: %v", err)
	}
	return c
}

// exec runs one statement on the database at u.
func exec(ctx context.Context, u, stmt string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, stmt)
	return err
}

// fastCommit sets synchronous_commit = off for the sessions of the
// database at u: every call through the router is a transaction of its own
// on a shard, and the tests are about decisions, not crash durability.
func fastCommit(u string) error {
	err := exec(context.Background(), u,
		"DO $$BEGIN EXECUTE format('ALTER DATABASE %I SET synchronous_commit = off', current_database()); END$$")
	if err != nil {
		return fmt.Errorf("synchronous_commit: %w", err)
	}
	return nil
}

// ShardOf returns the index in Shards of the shard holding key.
func (c *Cluster) ShardOf(key string) int {
	return plproxy.Partition(key, c.Partitions) % len(c.Shards)
}
