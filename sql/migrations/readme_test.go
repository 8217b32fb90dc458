package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/sql/migrations"
)

// TestReadmeQuickStart runs the README's PostgreSQL quick start, statement
// by statement, on a database of its own: a statement followed by a
// commented result row returns that row (but its now_us, the clock's), one
// followed by "-- ERROR:" fails with that message, and every other one
// succeeds.
func TestReadmeQuickStart(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## PostgreSQL\n")
	require.True(t, ok, "README.md has no section \"PostgreSQL\"")
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```sql\n")
	require.True(t, ok, "the quick start shows no SQL")
	block, _, ok = strings.Cut(block, "```\n")
	require.True(t, ok)

	type step struct {
		sql      string
		comments []string
	}
	var steps []step
	var cur strings.Builder
	for _, line := range strings.Split(block, "\n") {
		switch {
		case strings.HasPrefix(line, "--"):
			require.NotEmpty(t, steps, "a comment before any statement: %q", line)
			steps[len(steps)-1].comments = append(steps[len(steps)-1].comments, strings.TrimSpace(strings.TrimPrefix(line, "--")))
		case strings.TrimSpace(line) == "":
		default:
			cur.WriteString(line + "\n")
			if strings.HasSuffix(strings.TrimSpace(line), ";") {
				steps = append(steps, step{sql: cur.String()})
				cur.Reset()
			}
		}
	}
	require.Empty(t, strings.TrimSpace(cur.String()), "a statement without its semicolon")
	require.Len(t, steps, 5)

	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	require.NoError(t, migrations.Up(ctx, url))
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })

	for _, s := range steps {
		var wantErr string
		var header, row []string
		for _, c := range s.comments {
			switch {
			case strings.HasPrefix(c, "ERROR:"):
				wantErr = strings.TrimSpace(strings.TrimPrefix(c, "ERROR:"))
			case strings.HasPrefix(c, "DETAIL:"):
			case header == nil:
				header = fields(c)
			default:
				row = fields(c)
			}
		}
		rows, err := conn.Query(ctx, s.sql)
		require.NoError(t, err, s.sql)
		var got [][]string
		for rows.Next() {
			vals, err := rows.Values()
			require.NoError(t, err)
			var r []string
			for _, v := range vals {
				if bv, ok := v.(bool); ok {
					v = map[bool]string{true: "t", false: "f"}[bv]
				}
				r = append(r, fmt.Sprint(v))
			}
			got = append(got, r)
		}
		err = rows.Err()
		if wantErr != "" {
			var pe *pgconn.PgError
			require.True(t, errors.As(err, &pe), "%s: want the error %q, got %v", s.sql, wantErr, err)
			require.Equal(t, wantErr, pe.Message, s.sql)
			require.Equal(t, "RL429", pe.Code, s.sql)
			continue
		}
		require.NoError(t, err, s.sql)
		if header == nil {
			continue
		}
		var names []string
		for _, f := range rows.FieldDescriptions() {
			names = append(names, f.Name)
		}
		require.Equal(t, header, names, "%s: the columns the README shows", s.sql)
		require.Len(t, got, 1, s.sql)
		for i, name := range names {
			if name != "now_us" {
				require.Equal(t, row[i], got[0][i], "%s: %s", s.sql, name)
			}
		}
	}
}

// fields splits a psql result line ("a | b | c") into its cells.
func fields(line string) []string {
	var out []string
	for _, f := range strings.Split(line, "|") {
		out = append(out, strings.TrimSpace(f))
	}
	return out
}
