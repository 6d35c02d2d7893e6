package cli

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/api"
	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/config"

	"github.com/inboxd/inboxd/internal/journal"

	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/service"
)

func init() {
	commands["serve"] = command{summary: "run inboxd: STOMP ingest, changefeed webhook, retry sweeper and REST API", run: runServe}
}

// Server runs inboxd over pool until ctx is cancelled, with the handlers of reg and the
// API routes given: the root package's Client, which this package cannot import. The
// pool stays the caller's.
type Server func(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, reg *process.Registry, log *slog.Logger, routes []api.Extension) error

func runServe(ctx context.Context, e *env, args []string) error {
	cfg, _, err := parseFlags(e, "serve", "[flags]", args, nil)
	if err != nil {
		return err
	}
	if e.opts.Serve == nil {
		return errors.New("this program cannot serve: run it through inboxd.Main")
	}
	log := cfg.Logger(e.stderr)
	if _, err := cfg.ConnConfig(); err != nil {
		return err // a malformed URL or password file: waiting will not fix it
	}
	reg := e.opts.Handlers
	if reg == nil {
		reg = process.NewRegistry()
	}
	var routes []api.Extension
	if cfg.Demo {
		// The demo is the command line's, never the core's.
		routes = registration.Wire(cfg, reg)
	}
	// Wait for the database (create it, migrate), each try logged, instead of exiting:
	// inboxd started before its database, or during an outage, comes up once it answers.
	bo := backoff.Waiter{Policy: backoff.Policy{Initial: 150 * time.Millisecond}} // 100-200 ms, doubling to 0.5-1 s
	var pool *pgxpool.Pool
	for {
		err := ensureDatabase(ctx, cfg)
		if err == nil {
			pool, err = service.OpenPool(ctx, cfg, log)
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
	defer pool.Close()
	return e.opts.Serve(ctx, pool, cfg, reg, log, routes)
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
