package cli

import (
	"context"
	"fmt"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/schema"
)

func init() {
	commands["migrate"] = command{summary: "create or update the database schema (idempotent)", run: runMigrate}
}

func runMigrate(ctx context.Context, e *env, args []string) error {
	cfg, _, err := parseFlags(e, "migrate", "[flags]", args, nil)
	if err != nil {
		return err
	}
	if err := ensureDatabase(ctx, cfg); err != nil {
		return err
	}
	pool, err := openPool(ctx, cfg, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := checkServerVersion(ctx, pool, e.stderr); err != nil {
		return err
	}
	applied, err := schema.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(e.stdout, "schema is up to date")
	}
	for _, name := range applied {
		fmt.Fprintln(e.stdout, "applied", name)
	}
	if cfg.Demo {
		if err := registration.Migrate(ctx, pool); err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, "demo: the customers table exists")
	}
	// Retention: row-level TTL on CockroachDB; on PostgreSQL "inboxd serve" prunes.
	d, err := database.Detect(ctx, pool)
	if err != nil {
		return err
	}
	if !d.RowTTL() {
		fmt.Fprintf(e.stdout, "retention: PostgreSQL, so inboxd serve deletes expired rows (journal %s, quarantine %s)\n",
			cfg.Retention, cfg.QuarantineRetention)
		return nil
	}
	ran, err := feed.NewManager(pool, d, cfg.Logger(e.stderr)).ApplyRetention(ctx, feed.Retention{Journal: cfg.Retention, Quarantine: cfg.QuarantineRetention})
	for _, stmt := range ran {
		fmt.Fprintln(e.stdout, "retention:", stmt)
	}
	return err
}
