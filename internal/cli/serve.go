package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/tracing/otlpenv"
	"github.com/inboxd/inboxd/schema"
)

func init() {
	commands["serve"] = command{summary: "run inboxd: STOMP ingest, processing, retry sweeper and REST API (and, on CockroachDB, the changefeed webhook)", run: runServe}
}

func runServe(ctx context.Context, e *env, args []string) error {
	cfg, _, err := parseFlags(e, "serve", "[flags]", args, nil)
	if err != nil {
		return err
	}
	log := cfg.Logger(e.stderr)
	if _, err := cfg.ConnConfig(); err != nil {
		return err // a malformed URL or password file: waiting will not fix it
	}
	if cfg.Demo {
		// The demo is the command line's, never the core's.
		registration.Configure(&cfg.Config)
	}
	// Wait for the database (with migrate auto: create it and migrate), each try logged,
	// instead of exiting: inboxd started before its database, or during an outage, comes
	// up once it answers.
	bo := backoff.Waiter{Policy: backoff.Policy{Initial: 150 * time.Millisecond}} // 100-200 ms, doubling to 0.5-1 s
	var pool *pgxpool.Pool
	for {
		pool, err = openServePool(ctx, cfg, log)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if !retryableAtStart(err) {
			return err // a broken migration or schema: waiting will not fix it
		}
		log.Warn("waiting for the database", "try", bo.Attempt()+1, "err", err)
		if bo.Wait(ctx) != nil {
			return nil
		}
	}
	// Bounded: a pool on a database that does not answer is abandoned, not waited for.
	defer closeWithin("the database pool", exitBudget/2, log, pool.Close)
	return serve(ctx, e, pool, cfg, log)
}

// serve runs a Client over pool with the program's handlers (Options.Handle) and, with
// -demo, the demo's.
//
// Its tracing is configured by the standard OTEL_* variables only (otlpenv.FromEnv):
// with no OTLP exporter named there, spans are neither recorded nor exported.
func serve(ctx context.Context, e *env, pool *pgxpool.Pool, cfg *config.Config, log *slog.Logger) (err error) {
	tp, shutdown, err := otlpenv.FromEnv(ctx, os.Getenv)
	if err != nil {
		return fmt.Errorf("configuring tracing: %w", err)
	}
	if _, off := tp.(noop.TracerProvider); !off {
		// Global too, so that a handler's own otel.Tracer spans are exported with inboxd's.
		otel.SetTracerProvider(tp)
		log.Info("tracing: exporting spans over OTLP (OTEL_* variables)")
	}
	defer func() {
		// Bounded: a collector that is down must not hold the exit.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), exitBudget/2)
		defer cancel()
		if serr := shutdown(sctx); serr != nil {
			log.Warn("flushing spans at exit", "err", serr)
		}
	}()
	lib := cfg.Config
	lib.Logger, lib.TracerProvider = log, tp
	lib.MigrateAtStart = false // done by openServePool, with the demo's table
	c, err := inboxd.New(pool, lib)
	if err != nil {
		return err
	}
	if e.opts.Handle != nil {
		e.opts.Handle(c)
	}
	if cfg.Demo {
		ctx = registration.Wire(c)(ctx)
	}
	return c.Run(defaults.WithCommandLine(ctx)) // hints name INBOXD_* settings
}

// openServePool connects a pool large enough for every part (inboxd.Config.MinPoolSize).
// With migrate auto it creates the database if need be and applies inboxd's migrations
// (and, with -demo, the demo's table) under the migration lock; Client.Run then finds
// the schema current. Otherwise it changes nothing: Run checks the schema, and with
// -demo the customers table must exist. The caller closes the pool.
func openServePool(ctx context.Context, cfg *config.Config, log *slog.Logger) (*pgxpool.Pool, error) {
	if cfg.MigrateAtStart {
		if err := ensureDatabase(ctx, cfg); err != nil {
			return nil, err
		}
	}
	pool, err := openPool(ctx, cfg, cfg.MinPoolSize())
	if err != nil {
		return nil, err
	}
	if !cfg.MigrateAtStart {
		// Checked here too (Run checks again), so that a database that does not answer yet
		// is waited for, while a schema that is behind or ahead ends serve at once.
		if err := schema.Check(ctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
		if cfg.Demo {
			if _, err := registration.Count(ctx, pool); err != nil {
				pool.Close()
				return nil, fmt.Errorf("demo (run inboxd migrate -demo first, or start with INBOXD_MIGRATE=auto): %w", err)
			}
		}
		return pool, nil
	}
	var also []func(context.Context, database.DB) error
	if cfg.Demo {
		also = append(also, registration.Migrate)
	}
	applied, err := schema.Migrate(ctx, pool, also...)
	for _, name := range applied {
		log.Info("applied migration", "name", name)
	}
	if err == nil {
		err = retentionAtStart(ctx, pool, cfg, log)
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrating (is the database reachable? run inboxd migrate for details): %w", err)
	}
	return pool, nil
}

// retentionAtStart sets, on CockroachDB, the row-level TTL of the configured retention,
// as inboxd migrate does: with migrate auto, serve is the migrating step, and Run only
// compares the TTL in force with its configuration.
func retentionAtStart(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, log *slog.Logger) error {
	d, err := database.Detect(ctx, pool)
	if err != nil || !d.RowTTL() {
		return err
	}
	ran, err := feed.NewManager(pool, d, log).ApplyRetention(ctx, feed.Retention{Journal: cfg.Retention, Quarantine: cfg.QuarantineRetention})
	for _, stmt := range ran {
		log.Info("set retention", "statement", stmt)
	}
	return err
}

// retryableAtStart reports whether serve should wait and try again: the database is
// unavailable. A schema that is behind or ahead (schema.VersionError), or any other
// schema error (class 42, a missing table included), will not heal by waiting;
// migrations no longer collide (the migration lock).
func retryableAtStart(err error) bool {
	if _, ok := errors.AsType[*schema.VersionError](err); ok {
		return false // run inboxd migrate (or the newer release)
	}
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok {
		return true
	}
	return !strings.HasPrefix(pgErr.Code, "42") && journal.IsUnavailable(err)
}
