package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/inboxd/inboxd"
)

func init() {
	commands["shadow"] = command{
		summary: "run the program's handlers over past events, rolled back, and report what they would do differently",
		run:     runShadow,
	}
}

// errTooManyDifferences is a shadow run over -max-differences: exit 1, for a deploy gate.
var errTooManyDifferences = errors.New("too many differences")

// listFlag is a flag given several times or as a comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// timeFlag is an RFC 3339 time.
type timeFlag struct{ t *time.Time }

func (f timeFlag) String() string {
	if f.t == nil || f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f timeFlag) Set(s string) error {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return fmt.Errorf("want an RFC 3339 time such as 2026-01-02T15:04:05Z: %w", err)
	}
	*f.t = t
	return nil
}

func runShadow(ctx context.Context, e *env, args []string) error {
	var o inboxd.ShadowOptions
	var statuses, ids, ignore listFlag
	var format, out, baseline string
	maxDiff := -1
	cfg, fs, err := parseFlags(e, "shadow", "[flags]", args, func(fs *flag.FlagSet) {
		fs.StringVar(&o.EventType, "type", "", "select events of this type")
		fs.Var(&statuses, "status", "select by status: PROCESSED, REJECTED, FAILED, DEAD (repeat or comma-separate; default PROCESSED,REJECTED)")
		fs.Var(timeFlag{&o.Since}, "since", "select events received at or after this RFC 3339 time")
		fs.Var(timeFlag{&o.Until}, "until", "select events received before this RFC 3339 time")
		fs.StringVar(&o.AggregateID, "aggregate", "", "select one aggregate's events")
		fs.Var(&ids, "id", "select events by journal id (repeat or comma-separate)")
		fs.IntVar(&o.Limit, "limit", 0, "run at most this many events, oldest first (0: all selected)")
		fs.Var(&ignore, "ignore", "a noise rule: body.$.field (JSON path) or headers.name, left out of the comparison (repeat or comma-separate)")
		fs.Float64Var(&o.Rate, "rate", 0, "run at most this many events per second (0: no bound)")
		fs.DurationVar(&o.Timeout, "timeout", 0, "bound each handler run; an overrun is reported as timed out (0: the handler timeout)")
		fs.DurationVar(&o.LockTimeout, "lock-timeout", 0, "bound each wait for a row lock held by live traffic (0: 1s)")
		fs.StringVar(&baseline, "baseline", "", "a JSON report of an earlier run whose table writes this run compares with its own")
		fs.StringVar(&format, "format", inboxd.ShadowJSON, "report format: json, markdown or html")
		fs.StringVar(&out, "out", "", "write the report to this file (default: standard output)")
		fs.IntVar(&maxDiff, "max-differences", -1, "exit 1 when more events than this differ (-1: never)")
	})
	if err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("shadow takes no arguments, got %q", fs.Args())
	}
	switch format {
	case inboxd.ShadowJSON, inboxd.ShadowMarkdown, inboxd.ShadowHTML:
	default:
		return fmt.Errorf("-format %q: json, markdown or html", format)
	}
	o.Statuses, o.IDs, o.Ignore = statuses, ids, ignore
	if baseline != "" {
		f, err := os.Open(baseline)
		if err != nil {
			return fmt.Errorf("reading -baseline: %w", err)
		}
		o.Baseline, err = inboxd.ReadShadowReport(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("reading -baseline: %w", err)
		}
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	last := time.Now()
	o.Progress = func(p inboxd.ShadowProgress) {
		if time.Since(last) >= 2*time.Second {
			last = time.Now()
			fmt.Fprintf(e.stderr, "inboxd shadow: %d events, %d differing, %s\n", p.Done, p.Differing, p.Elapsed.Round(time.Second))
		}
	}
	pool, err := openPool(ctx, cfg, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	lib := cfg.Config
	lib.Logger = log
	c, err := inboxd.New(pool, lib)
	if err != nil {
		return err
	}
	if e.opts.Handle != nil {
		e.opts.Handle(c)
	}
	rep, err := c.ShadowReplay(ctx, o)
	if err != nil {
		return err
	}
	var w io.Writer = e.stdout
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return fmt.Errorf("writing -out: %w", err)
		}
		defer f.Close()
		w = f
	}
	if err := rep.Write(w, format); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	s := rep.Summary
	fmt.Fprintf(e.stderr, "inboxd shadow: %d events, %d same, %d differing (%d outcome, %d error, %d messages added, %d removed, %d changed, %d table writes, %d timed out; %d with no recorded messages), %.0f events/s\n",
		s.Events, s.Same, s.Differing, s.OutcomeChanged, s.ErrorChanged, s.MessagesAdded, s.MessagesRemoved, s.MessagesChanged,
		s.TableWritesChanged, s.TimedOut, s.MessagesUnknown, s.Rate)
	if maxDiff >= 0 && s.Differing > maxDiff {
		return fmt.Errorf("%w: %d events differ, more than -max-differences %d", errTooManyDifferences, s.Differing, maxDiff)
	}
	if out != "" {
		if err := w.(*os.File).Close(); err != nil {
			return fmt.Errorf("writing -out: %w", err)
		}
	}
	return nil
}
