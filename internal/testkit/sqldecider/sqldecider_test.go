package sqldecider

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rlcore/rl/core"
)

// The decisions themselves are tested against the core by internal/testkit/difftest
// and sql/migrations; this is the mapping of the functions' errors.
func TestMapError(t *testing.T) {
	other := errors.New("connection refused")
	for _, tc := range []struct {
		name  string
		in    error
		index int
		want  error
	}{
		{"single limit", &pgconn.PgError{Code: "RL008"}, 0, core.ErrState},
		{"limit index", &pgconn.PgError{Code: "RL002", Detail: "limit index 11"}, 11, core.ErrLimit},
		{"ErrLimits", &pgconn.PgError{Code: "RL010", Detail: "limit index 0"}, 0, core.ErrLimits},
		{"unknown RL code", &pgconn.PgError{Code: "RL011"}, 0, nil},
		{"other SQLSTATE", &pgconn.PgError{Code: "22003", Message: "bigint out of range"}, 0, nil},
		{"not from PostgreSQL", other, 0, other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, err := mapError(tc.in)
			if i != tc.index {
				t.Errorf("index %d, want %d", i, tc.index)
			}
			switch {
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("error %v, want %v", err, tc.want)
			case tc.want == nil && !errors.Is(err, tc.in):
				t.Errorf("error %v does not wrap %v", err, tc.in)
			}
			var ce core.Error
			if isCore := errors.As(err, &ce); isCore != errors.As(tc.want, &ce) {
				t.Errorf("error %v: a core.Error %v", err, isCore)
			}
		})
	}
}
