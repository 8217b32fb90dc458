package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rlcore/rl/internal/testkit/pgtest"
)

// ordinaryOwner prepares the database at dbURL (a superuser's URL) to be
// migrated by an ordinary role, doing once, as a superuser, exactly what
// sql/README.md's "Installing without a superuser" says only a superuser
// (or a role with CREATEROLE) must do: create the cluster's roles rl_app
// and rl_admin (rl_admin a member of rl_app) if they are missing, and
// create the owner role, a LOGIN role with no SUPERUSER, CREATEROLE or
// CREATEDB, given the database. It returns the owner's URL and a function
// that drops the role (after the database is dropped).
func ordinaryOwner(ctx context.Context, dbURL string) (ownerURL string, dropOwner func(context.Context) error, err error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", nil, err
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "rltest_" + hex.EncodeToString(b) + "_owner"
	_, _ = rand.Read(b)
	pw := hex.EncodeToString(b)

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	su, err := pgx.Connect(cctx, pgtest.URL())
	if err != nil {
		return "", nil, fmt.Errorf("owner role: %w", err)
	}
	defer su.Close(ctx)
	// The cluster's roles, once; other test packages may create them at the
	// same moment through the migrations, hence the retries.
	const roles = `DO $do$
	BEGIN
		FOR attempt IN 1 .. 5 LOOP
			BEGIN
				IF to_regrole('rl_app') IS NULL THEN CREATE ROLE rl_app NOLOGIN; END IF;
				IF to_regrole('rl_admin') IS NULL THEN CREATE ROLE rl_admin NOLOGIN; END IF;
				IF NOT pg_has_role('rl_admin', 'rl_app', 'MEMBER') THEN GRANT rl_app TO rl_admin; END IF;
				RETURN;
			EXCEPTION WHEN duplicate_object OR unique_violation OR undefined_object THEN
				IF attempt = 5 THEN RAISE; END IF;
			END;
		END LOOP;
	END $do$`
	for _, q := range []string{
		roles,
		"CREATE ROLE " + name + " LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB PASSWORD '" + pw + "'",
		"ALTER DATABASE " + dbName + " OWNER TO " + name,
	} {
		if _, err := su.Exec(cctx, q); err != nil {
			return "", nil, fmt.Errorf("owner role: %w", err)
		}
	}
	dropOwner = func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, pgtest.URL())
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, "DROP ROLE IF EXISTS "+name)
		return err
	}
	u.User = url.UserPassword(name, pw)
	return u.String(), dropOwner, nil
}
