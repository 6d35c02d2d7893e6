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
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/tracing/otlpenv"
	"github.com/inboxd/inboxd/schema"
)

func init() {
	commands["serve"] = command{summary: "run inboxd: STOMP ingest, changefeed webhook, retry sweeper and REST API", run: runServe}
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
	// Wait for the database (create it, migrate), each try logged, instead of exiting:
	// inboxd started before its database, or during an outage, comes up once it answers.
	bo := backoff.Waiter{Policy: backoff.Policy{Initial: 150 * time.Millisecond}} // 100-200 ms, doubling to 0.5-1 s
	var pool *pgxpool.Pool
	for {
		err := ensureDatabase(ctx, cfg)
		if err == nil {
			pool, err = openServePool(ctx, cfg, log)
		}
		if err == nil && cfg.Demo {
			if err = registration.Migrate(ctx, pool); err != nil {
				pool.Close()
			}
		}
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

// openServePool connects a pool large enough for every part (inboxd.Config.MinPoolSize)
// and applies inboxd's migrations. The caller closes the pool.
func openServePool(ctx context.Context, cfg *config.Config, log *slog.Logger) (*pgxpool.Pool, error) {
	pool, err := openPool(ctx, cfg, cfg.MinPoolSize())
	if err != nil {
		return nil, err
	}
	applied, err := schema.Migrate(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrating (is the database reachable? run inboxd migrate for details): %w", err)
	}
	for _, name := range applied {
		log.Info("applied migration", "name", name)
	}
	return pool, nil
}

// retryableAtStart reports whether serve should wait and try again: the database is
// unavailable, or another instance is creating or migrating it at the same moment (a
// duplicate object). Any other schema error (class 42) will not heal by waiting.
func retryableAtStart(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok {
		return true
	}
	switch pgErr.Code {
	case "42P04", "42P06", "42P07", "42710", "42723", "23505": // duplicate database, schema, table, object, function; unique violation in a catalog
		return true
	}
	return !strings.HasPrefix(pgErr.Code, "42") && journal.IsUnavailable(err)
}
