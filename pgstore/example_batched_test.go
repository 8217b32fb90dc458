package pgstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/pgstore"
)

// A limiter over PostgreSQL whose concurrent decisions share statements and
// commits: under load, many decisions per transaction; alone, one statement.
func ExampleNewBatched() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app") // migrated with sql/migrations
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	s, err := pgstore.NewBatched(pool, pgstore.Config{Mode: pgstore.ModeSQL}, pgstore.BatchConfig{MaxBatch: 256})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	p, err := rl.NewPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	l, err := rl.New(rl.Config{Store: s, Policy: p, BaseKey: "api"})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	r, err := l.Allow(ctx, "user:42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed, s.Stats().Batches)
}
