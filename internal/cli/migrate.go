package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/schema"
)

func init() {
	commands["migrate"] = command{settings: []string{config.GroupDatabase, config.GroupSchema, config.GroupRetention, config.GroupLogging}, summary: "create or update the database schema (idempotent), as the schema's owner; -print-grants ROLE prints the grants of a runtime role", run: runMigrate}
}

func runMigrate(ctx context.Context, e *env, args []string) error {
	var grantsTo string
	var force bool
	cfg, _, err := parseFlags(e, "migrate", "[flags]", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&force, "force", false, "apply a migration that requires a release this database skipped (the error names it); "+
			"only once no instance of an older release writes to the database")
		fs.StringVar(&grantsTo, "print-grants", "", "print, without connecting, the GRANT statements a runtime role of that name needs "+
			"(DML only; with -demo, on the customers table too) for PostgreSQL and CockroachDB, then exit")
	})
	if err != nil {
		return err
	}
	if grantsTo != "" {
		return printGrants(e.stdout, grantsTo, cfg.Demo)
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
	// The demo's table is created under the same migration lock.
	var also []func(context.Context, database.DB) error
	if cfg.Demo {
		also = append(also, registration.Migrate)
	}
	applied, err := schema.MigrateWith(ctx, pool, schema.Options{Also: also, Force: force})
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

// printGrants writes the grants of a runtime role (schema.Grants), for PostgreSQL and
// CockroachDB, and those "inboxd changefeed create" needs on CockroachDB, as SQL that
// the schema's owner runs after each migrate.
func printGrants(w io.Writer, role string, demo bool) error {
	var extra []string
	if demo {
		extra = append(extra, "customers")
	}
	grants, err := schema.Grants(role, extra...)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "-- The runtime role of inboxd serve (and of a program that embeds inboxd): DML only.\n"+
		"-- Run as the schema's owner after inboxd migrate, on PostgreSQL and CockroachDB alike;\n"+
		"-- again after each migrate (they are idempotent), as a release may add tables.\n"+
		"-- PostgreSQL: LISTEN and pg_notify need no grant.\n")
	for _, g := range grants {
		fmt.Fprintln(w, g+";")
	}
	fmt.Fprintf(w, "-- CockroachDB only, for the role that runs inboxd changefeed create (this one, or the owner);\n"+
		"-- with -enable-rangefeeds (the default) it also needs MODIFYCLUSTERSETTING, or an admin sets\n"+
		"-- kv.rangefeed.enabled = true once and it passes -enable-rangefeeds=false.\n")
	for _, g := range schema.ChangefeedGrants(role) {
		fmt.Fprintln(w, "-- "+g+";")
	}
	return nil
}
