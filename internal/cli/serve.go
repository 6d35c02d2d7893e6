package cli

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/stompx"

	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/service"
)

func init() {
	commands["serve"] = command{summary: "run inboxd: STOMP ingest, changefeed webhook, retry sweeper and REST API", run: runServe}
}

// Handlers is the registry "serve" processes events with. It starts with the demo's
// registration handler; programs embedding inboxd add their own before calling Main.
var Handlers = defaultHandlers()

func defaultHandlers() *process.Registry {
	reg := process.NewRegistry()
	reg.Register(registration.EventType, process.HandlerFunc(registration.Handle))
	return reg
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
	// Wait for the database (create it, migrate), each try logged, instead of exiting:
	// inboxd started before its database, or during an outage, comes up once it answers.
	bo := stompx.Backoff{Initial: 200 * time.Millisecond}
	var svc *service.Service
	for {
		err := ensureDatabase(ctx, cfg)
		if err == nil {
			svc, err = service.New(ctx, cfg, Handlers, log)
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
	return svc.Run(ctx)
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
