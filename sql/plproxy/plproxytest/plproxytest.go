// Package plproxytest gives tests a sharded rl of their own on the test
// PostgreSQL server: shard databases migrated with sql/migrations and a
// router database with the PL/Proxy router schema, all dropped when the
// test ends. The shards commit with synchronous_commit = off (each call
// through the router commits on its shard; the tests are about decisions,
// not crash durability). The server needs the PL/Proxy extension (Debian package
// postgresql-15-plproxy; .ci/run installs it). Like internal/pgtest, an
// unreachable server or a missing extension fails the test, never skips it.
package plproxytest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/rlcore/rl/internal/pgtest"
	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/sql/plproxy"
)

// Cluster is a router and its shards.
type Cluster struct {
	Router     string   // URL of the router database
	Shards     []string // URLs of the shard databases, migrated
	Partitions int      // partition count; partition i lives on Shards[i % len(Shards)]
}

// New creates shards migrated databases and a router over them with
// partitions partitions (0: as many as shards, rounded up to a power of
// two).
func New(t testing.TB, shards, partitions int) *Cluster {
	t.Helper()
	c := &Cluster{Router: pgtest.NewDatabase(t)}
	for range shards {
		u := pgtest.NewDatabase(t)
		if err := migrations.Up(context.Background(), u); err != nil {
			t.Fatalf("plproxytest: migrate a shard: %v", err)
		}
		if err := fastCommit(u); err != nil {
			t.Fatalf("plproxytest: %v", err)
		}
		c.Shards = append(c.Shards, u)
	}
	cfg := plproxy.Config{Shards: c.Shards, Partitions: partitions}
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

// fastCommit sets synchronous_commit = off for the sessions of the
// database at u: every call through the router is a transaction of its own
// on a shard, and the tests are about decisions, not crash durability.
func fastCommit(u string) error {
	conn, err := pgx.Connect(context.Background(), u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), "DO $$BEGIN EXECUTE format('ALTER DATABASE %I SET synchronous_commit = off', current_database()); END$$")
	return err
}

// ShardOf returns the index in Shards of the shard holding key.
func (c *Cluster) ShardOf(key string) int {
	return plproxy.Partition(key, c.Partitions) % len(c.Shards)
}
