package migrations_test

import (
	"context"

	"github.com/rlcore/rl/internal/testkit/pgtest"
)

// ordinaryOwner is pgtest.OrdinaryOwner: it prepares the database at dbURL
// (a superuser's URL) to be migrated by an ordinary role, as sql/README.md's
// "Installing without a superuser" says, and returns the owner's URL and a
// function that drops the role (after the database is dropped).
func ordinaryOwner(ctx context.Context, dbURL string) (ownerURL string, dropOwner func(context.Context) error, err error) {
	return pgtest.OrdinaryOwner(ctx, dbURL)
}
