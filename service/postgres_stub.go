//go:build !pgstore

package service

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// PostgresConfig configures the PostgreSQL store.
type PostgresConfig struct {
	URL                        string
	Migrate, Durable, Failover bool
	Decide                     string
	MaxConns                   int32
	Timeout, FailoverCooldown  time.Duration
	FailoverThreshold          int
}

func openPostgres(ctx context.Context, pc PostgresConfig, maxKeys int, log *slog.Logger, hooks storeHooks) (*storeHandle, error) {
	return nil, errors.New("postgres: not built yet")
}
