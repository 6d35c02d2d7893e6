package cli

import (
	"context"

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
	if err := ensureDatabase(ctx, cfg); err != nil {
		return err
	}
	svc, err := service.New(ctx, cfg, Handlers, log)
	if err != nil {
		return err
	}
	return svc.Run(ctx)
}
