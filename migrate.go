package inboxd

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/schema"
)

// Migrate creates or updates inboxd's tables in the database of pool (idempotent). On
// CockroachDB it also sets the row-level TTL of the journal's attempt history and the
// quarantine, the defaults or a Config's with WithRetention, and removes the journal's
// (Run's pruner deletes expired entries, whose status is in journal_state).
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

// MigrateOption shapes Migrate.
type MigrateOption func(*migrateOptions)

type migrateOptions struct {
	retention feed.Retention
}

// WithRetention makes Migrate set, on CockroachDB, the row-level TTL that keeps the
// journal's attempt history and the quarantine as long as cfg says (Config.Retention and
// QuarantineRetention: zero the default, negative forever), instead of the defaults (7
// and 30 days). The journal's entries themselves are deleted by Run's pruner, after
// Config.Retention, on either database. A TTL is a schema change, so it is the migrating step's (an owner
// role's), never Run's: Run only compares the TTL in force with its Config and warns
// when they differ. On PostgreSQL Run deletes expired rows itself, and this does nothing.
// https://www.cockroachlabs.com/docs/stable/row-level-ttl
func WithRetention(cfg Config) MigrateOption {
	return func(o *migrateOptions) { o.retention = retentionOf(cfg.WithDefaults()) }
}

// retentionOf is the retention cfg (with defaults) asks for, in feed's terms: zero is
// forever there.
func retentionOf(cfg Config) feed.Retention {
	keep := func(d time.Duration) time.Duration { return max(d, 0) }
	return feed.Retention{Journal: keep(cfg.Retention), Quarantine: keep(cfg.QuarantineRetention)}
}

func migrateOptionsOf(opts []MigrateOption) migrateOptions {
	o := migrateOptions{retention: feed.Retention{Journal: defaults.Retention, Quarantine: defaults.QuarantineRetention}}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// checkRetention compares, on CockroachDB, the row-level TTL in force with cfg and
// warns when they differ: Run applies no DDL (a runtime role may hold none), so a
// retention changed in the Config takes effect once the migrating step sets it
// (Migrate with WithRetention, or inboxd migrate with the same settings).
func checkRetention(ctx context.Context, pool *pgxpool.Pool, d database.Dialect, cfg Config, log *slog.Logger) {
	if !d.RowTTL() {
		return // PostgreSQL: Run's pruner applies cfg itself
	}
	journal, quarantine, err := feed.NewManager(pool, d, log).RetentionInForce(ctx)
	if err != nil {
		log.Warn("could not read the row-level TTL in force to compare it with the retention configured", "err", err)
		return
	}
	for _, drift := range feed.RetentionDrift(retentionOf(cfg), journal, quarantine) {
		log.Warn("the retention configured is not in force on CockroachDB: row-level TTL is set by the migrating step; "+
			"run inboxd migrate with the same INBOXD_RETENTION and INBOXD_QUARANTINE_RETENTION, or inboxd.Migrate with inboxd.WithRetention(cfg)",
			"difference", drift)
	}
}
