package inboxd

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/schema"
)

// Migrate creates or updates inboxd's tables in the database of pool (idempotent). On
// CockroachDB it also sets the row-level TTL of the journal and quarantine: the defaults,
// or a Config's with WithRetention.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...MigrateOption) error {
	// Detected first: it refuses a CockroachDB older than database.MinVersion before
	// any migration runs.
	dialect, err := database.Detect(ctx, pool)
	if err != nil {
		return fmt.Errorf("inboxd: migrating: %w", err)
	}
	if _, err := migrate(ctx, pool, dialect, migrateOptionsOf(opts).retention, nil); err != nil {
		return fmt.Errorf("inboxd: %w", err)
	}
	return nil
}

// migrate is the migrating step, Migrate's and Run's with MigrateAtStart alike: the
// schema, then on CockroachDB the row-level TTL of retention r. It returns the
// migrations it applied; log (may be nil) gets the TTL statements it ran.
func migrate(ctx context.Context, pool *pgxpool.Pool, dialect database.Dialect, r feed.Retention, log *slog.Logger) ([]string, error) {
	applied, err := schema.Migrate(ctx, pool)
	if err != nil {
		return applied, fmt.Errorf("migrating: %w", err)
	}
	if !dialect.RowTTL() {
		return applied, nil // PostgreSQL: Run deletes expired rows itself
	}
	ran, err := feed.NewManager(pool, dialect, log).ApplyRetention(ctx, r)
	for _, stmt := range ran {
		if log != nil {
			log.Info("set retention", "statement", stmt)
		}
	}
	if err != nil {
		return applied, fmt.Errorf("setting retention: %w", err)
	}
	return applied, nil
}
