package inboxd

import (
	"context"
	"fmt"

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
	if _, err := schema.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("inboxd: migrating: %w", err)
	}
	if !dialect.RowTTL() {
		return nil // PostgreSQL: Run deletes expired rows itself
	}
	if _, err := feed.NewManager(pool, dialect, nil).ApplyRetention(ctx, migrateOptionsOf(opts).retention); err != nil {
		return fmt.Errorf("inboxd: setting retention: %w", err)
	}
	return nil
}
