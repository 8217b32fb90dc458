package migrations_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/rlcore/rl/sql/migrations"
)

// Migrate at service start; several instances may do it at once.
func ExampleUp() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrations.Up(ctx, os.Getenv("DATABASE_URL")); err != nil {
		log.Fatal(err)
	}
}

// The commands of rl-migrate, from Go.
func ExampleOpen() {
	ctx := context.Background()
	m, err := migrations.Open(ctx, "postgres://postgres@127.0.0.1:5432/app?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	if err := m.Steps(ctx, -1); err != nil { // revert the last migration
		log.Fatal(err)
	}
	v, dirty, err := m.Version(ctx)
	log.Println(v, dirty, err)
}
