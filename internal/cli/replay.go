package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/inboxd/inboxd"
)

func init() {
	commands["replay"] = command{
		summary: "reprocess past events for real: plan, start, status, pause, resume, cancel or run a replay",
		run:     runReplay,
	}
}

// runReplay is "replay plan [selection flags]", "replay start -reason … RUN",
// "replay status|pause|resume|cancel RUN" and "replay run RUN" (execute it here, with
// the program's handlers, until it ends). It prints the run as JSON.
func runReplay(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("replay: plan, start, status, pause, resume, cancel or run")
	}
	verb, rest := args[0], args[1:]
	if strings.HasPrefix(verb, "-") { // "replay -h": the flags of every verb
		verb, rest = "", args
	}
	var sel inboxd.ReplaySelection
	var statuses, ids listFlag
	var reason, by string
	var rate float64
	var publish bool
	cfg, fs, err := parseFlags(e, "replay", "plan|start|status|pause|resume|cancel|run [flags] [run id]", rest, func(fs *flag.FlagSet) {
		// Every verb's flags, on every verb: one flag set documents them all.
		fs.StringVar(&sel.EventType, "type", "", "select events of this type")
		fs.Var(&statuses, "status", "select by status: PROCESSED, REJECTED (repeat or comma-separate; default both)")
		fs.Var(timeFlag{&sel.Since}, "since", "select events received at or after this RFC 3339 time")
		fs.Var(timeFlag{&sel.Until}, "until", "select events received before this RFC 3339 time")
		fs.StringVar(&sel.AggregateID, "aggregate", "", "select one aggregate's events")
		fs.Var(&ids, "id", "select events by journal id (repeat or comma-separate)")
		fs.BoolVar(&sel.NoTail, "no-tail", false, "replay only the selected events, not the later settled events of their aggregates")
		fs.StringVar(&reason, "reason", "", "why the run is started (recorded; required)")
		fs.StringVar(&by, "by", "cli", "who starts it (recorded)")
		fs.Float64Var(&rate, "rate", 0, "replay at most this many events per second (0: no bound)")
		fs.BoolVar(&publish, "publish", false, "publish the messages the handlers emit, with ids of their own (default: suppress them)")
	})
	if err != nil {
		return err
	}
	if verb == "" {
		return fmt.Errorf("replay: plan, start, status, pause, resume, cancel or run")
	}
	var runID string
	if verb != "plan" && (sel.EventType != "" || len(statuses) > 0 || sel.AggregateID != "" || len(ids) > 0 || sel.NoTail ||
		!sel.Since.IsZero() || !sel.Until.IsZero()) {
		return fmt.Errorf("replay %s: selection flags belong to replay plan", verb)
	}
	if verb != "start" && (reason != "" || rate != 0 || publish) {
		return fmt.Errorf("replay %s: -reason, -rate and -publish belong to replay start", verb)
	}
	switch {
	case verb == "plan" && fs.NArg() == 0:
	case verb != "plan" && fs.NArg() == 1:
		runID = fs.Arg(0)
	default:
		return fmt.Errorf("replay %s: unexpected arguments %q", verb, fs.Args())
	}
	if verb == "start" && reason == "" {
		return fmt.Errorf("replay start: -reason is required")
	}
	sel.Statuses, sel.IDs = statuses, ids
	pool, err := openPool(ctx, cfg, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	lib := cfg.Config
	lib.Logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := inboxd.New(pool, lib)
	if err != nil {
		return err
	}
	if e.opts.Handle != nil {
		e.opts.Handle(c)
	}
	switch verb {
	case "plan":
		run, err := c.PlanReplay(ctx, sel)
		if err != nil {
			return err
		}
		runID = run.ID
	case "start":
		err = c.StartReplay(ctx, runID, inboxd.ReplayStart{Reason: reason, StartedBy: by, Rate: rate, Publish: publish})
	case "pause":
		err = c.PauseReplay(ctx, runID)
	case "resume":
		err = c.ResumeReplay(ctx, runID)
	case "cancel":
		err = c.CancelReplay(ctx, runID)
	case "run":
		_, err = c.ExecuteReplay(ctx, runID)
	case "status":
	default:
		return fmt.Errorf("replay %q: plan, start, status, pause, resume, cancel or run", verb)
	}
	if err != nil {
		return err
	}
	run, err := c.ReplayStatus(ctx, runID)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(run)
}
