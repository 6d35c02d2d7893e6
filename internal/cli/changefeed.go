package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/process"
)

func init() {
	commands["changefeed"] = command{
		settings: []string{config.GroupDatabase, config.GroupWebhook, config.GroupProcessing, config.GroupLogging},
		summary:  "manage the CockroachDB changefeed to the webhook: create|status|pause|resume|cancel",
		run:      runChangefeed,
	}
}

func runChangefeed(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(e.stderr, "Usage: inboxd changefeed create|status|pause|resume|cancel [flags]")
		return errUsage
	}
	action := args[0]
	var (
		jobID      int64
		mode       string
		insecure   bool
		cursor     string
		resolved   time.Duration
		timeout    time.Duration
		enableFeed bool
		ifCRDB     bool
		dryRun     bool
	)
	cfg, _, err := parseFlags(e, "changefeed", action+" [flags]", args[1:], func(fs *flag.FlagSet) {
		fs.Int64Var(&jobID, "job", 0, "changefeed job id (default: the job whose sink is -webhook-url)")
		fs.StringVar(&mode, "mode", string(feed.ModeFiltered), "create: filtered (CDC query: journaled and edited events, no deletes) or table (every change)")
		fs.BoolVar(&insecure, "insecure-skip-verify", false, "create: skip TLS verification instead of passing the CA (not recommended)")
		fs.StringVar(&cursor, "cursor", "", "create: resume from this HLC (e.g. the last resolved timestamp) without an initial scan")
		fs.DurationVar(&resolved, "resolved", 10*time.Second, "create: resolved timestamp interval (also min_checkpoint_frequency)")
		fs.DurationVar(&timeout, "client-timeout", 10*time.Second, "create: webhook_client_timeout")
		fs.BoolVar(&enableFeed, "enable-rangefeeds", true, "create: SET CLUSTER SETTING kv.rangefeed.enabled = true first")
		fs.BoolVar(&dryRun, "dry-run", false, "create: print the statements it would run, secrets redacted, without connecting")
		fs.BoolVar(&ifCRDB, "if-cockroachdb", false, "succeed without doing anything when the database is not CockroachDB (for scripts that run on both)")
	})
	if err != nil {
		return err
	}
	createOpts := func() (feed.Options, error) {
		opts := feed.DefaultOptions(cfg.WebhookURL, "", "")
		opts.Mode = feed.Mode(mode)
		opts.Cursor = cursor
		opts.Resolved, opts.MinCheckpointFrequency = resolved, resolved
		opts.ClientTimeout = timeout
		// The token serve demands: INBOXD_WEBHOOK_TOKEN, else the one generated in INBOXD_CERT_DIR.
		token, _, err := cfg.WebhookAuthToken()
		if err != nil {
			return opts, err
		}
		opts.AuthHeader = "Bearer " + token
		if insecure {
			opts.InsecureSkipVerify = true
		} else if opts.CACertBase64, err = readCA(cfg); err != nil {
			return opts, err
		}
		// The sink's timeout, the batch size and the handler timeout: refused if they
		// cannot work together, else explained.
		explain, err := feed.CheckTiming(feed.Timing{ClientTimeout: opts.ClientTimeout, FlushMessages: opts.Flush.Messages,
			Retry: opts.Retry, HandlerTimeout: cfg.HandlerTimeout, ProcessTimeout: cfg.WebhookProcessTimeout,
			Workers: process.Parts(opts.Flush.Messages, cfg.Concurrency)})
		if err != nil {
			return opts, err
		}
		fmt.Fprint(e.stderr, explain)
		return opts, nil
	}
	if dryRun {
		if action != "create" {
			return fmt.Errorf("-dry-run applies to create only")
		}
		opts, err := createOpts()
		if err != nil {
			return err
		}
		stmts, err := createStatements(opts, enableFeed)
		if err != nil {
			return err
		}
		for _, s := range stmts {
			fmt.Fprintln(e.stdout, feed.RedactStatement(s)+";")
		}
		return nil
	}
	pool, err := openPool(ctx, cfg, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	d, err := database.Detect(ctx, pool)
	if err != nil {
		return err
	}
	m := feed.NewManager(pool, d, cfg.Logger(e.stderr))
	if ifCRDB {
		if !d.Changefeed() {
			fmt.Fprintln(e.stdout, "not CockroachDB: no changefeed; the sweeper processes the journal instead")
			return nil
		}
	}

	job := func() (int64, error) {
		if jobID != 0 {
			return jobID, nil
		}
		j, err := m.Find(ctx, cfg.WebhookURL)
		if err != nil {
			return 0, fmt.Errorf("finding the changefeed for %s: %w", cfg.WebhookURL, err)
		}
		return j.ID, nil
	}

	switch action {
	case "create":
		if err := checkServerVersion(ctx, pool, e.stderr); err != nil {
			return err
		}
		if enableFeed {
			if err := m.EnableRangefeeds(ctx); err != nil {
				return err
			}
		}
		opts, err := createOpts()
		if err != nil {
			return err
		}
		id, err := m.Create(ctx, opts)
		switch {
		case errors.Is(err, feed.ErrFeedExists):
			// Idempotent on purpose: re-running a deployment must not fail here.
			fmt.Fprintf(e.stdout, "changefeed for %s already exists: %v\n", cfg.WebhookURL, err)
		case err != nil:
			return err
		default:
			fmt.Fprintf(e.stdout, "created changefeed job %d → %s\n", id, cfg.WebhookURL)
		}
		// The outbox table's feed wakes the outbox relay through the same webhook.
		opts.SinkURL = cfg.WebhookURL + feed.OutboxSinkSuffix
		opts.Cursor = ""
		id, err = m.CreateOutbox(ctx, opts)
		switch {
		case errors.Is(err, feed.ErrFeedExists):
			fmt.Fprintf(e.stdout, "changefeed for %s already exists: %v\n", opts.SinkURL, err)
		case err != nil:
			return err
		default:
			fmt.Fprintf(e.stdout, "created outbox changefeed job %d → %s\n", id, opts.SinkURL)
		}
		return nil
	case "status":
		id, err := job()
		if err != nil {
			return err
		}
		j, err := m.Status(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "job:         %d\nstatus:      %s\nrunning:     %s\nhigh water:  %s", j.ID, j.Status, j.RunningStatus, j.HighWater)
		if t := j.HighWaterTime(); !t.IsZero() {
			fmt.Fprintf(e.stdout, " (%s, %s behind)", t.UTC().Format(time.RFC3339), time.Since(t).Round(time.Millisecond))
		}
		fmt.Fprintf(e.stdout, "\nsink:        %s\nerror:       %s\n", j.SinkURI, j.Error)
		return nil
	case "pause", "resume", "cancel":
		id, err := job()
		if err != nil {
			return err
		}
		do := map[string]func(context.Context, int64) error{"pause": m.Pause, "resume": m.Resume, "cancel": m.Cancel}[action]
		if err := do(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s: job %d\n", action, id)
		return nil
	default:
		fmt.Fprintf(e.stderr, "inboxd changefeed: unknown action %q (want create, status, pause, resume or cancel)\n", action)
		return errUsage
	}
}

// createStatements are the statements create runs, in order (the dry run prints them).
func createStatements(o feed.Options, enableRangefeeds bool) ([]string, error) {
	create, err := feed.BuildCreate(o)
	if err != nil {
		return nil, err
	}
	if enableRangefeeds {
		return []string{feed.EnableRangefeedsSQL, create}, nil
	}
	return []string{create}, nil
}

// readCA returns the base64 CA for ca_cert=: from the generated cert dir (which the
// serving inboxd writes; it may be mounted read-only here), else from -cert-file's CA.
func readCA(cfg *config.Config) (string, error) {
	b, err := os.ReadFile(filepath.Join(cfg.CertDir, certs.CABase64File))
	if err != nil {
		return "", fmt.Errorf("reading the webhook CA (start \"inboxd serve\" once to generate it, or pass -insecure-skip-verify): %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
