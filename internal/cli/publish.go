package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/loadgen"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
)

func init() {
	commands["publish"] = command{
		settings: []string{config.GroupDatabase, config.GroupBroker, config.GroupDestinations, "max-body-bytes", "id-source", "default-event-type"},
		summary:  "publish one event of your own (-body or -body-file), or generated events with duplicates and malformed ones, to the broker, and optionally verify the journal",
		run:      runPublish,
	}
}

func runPublish(ctx context.Context, e *env, args []string) error {
	var (
		n                    int
		dupRatio, malRatio   float64
		seed                 uint64
		verify               bool
		verifyWithin         time.Duration
		eventType, destOverr string
		body, bodyFile, typ  string
		headers              = headerFlag{}
	)
	cfg, _, err := parseFlags(e, "publish", "[flags]", args, func(fs *flag.FlagSet) {
		fs.IntVar(&n, "n", 1000, "messages to publish, duplicates and malformed included")
		fs.Float64Var(&dupRatio, "duplicates", 0.3, "fraction of messages that repeat an earlier one byte for byte")
		fs.Float64Var(&malRatio, "malformed", 0.01, "fraction of messages that must be quarantined")
		fs.Uint64Var(&seed, "seed", 1, "same seed, same messages")
		fs.StringVar(&eventType, "event-type", "loadgen", "the payload's type")
		fs.StringVar(&destOverr, "to", "", "destination (default: the first -destination)")
		fs.BoolVar(&verify, "verify", false, "wait until ingest is done, then check journal and quarantine hold exactly what was sent")
		fs.DurationVar(&verifyWithin, "verify-timeout", 5*time.Minute, "how long -verify waits for ingest")
		fs.StringVar(&body, "body", "", `publish this one message body instead of generated ones, e.g. '{"id":"ord-1","type":"order-placed"}'`)
		fs.StringVar(&bodyFile, "body-file", "", "publish the content of this file (- for standard input) as the one message body")
		fs.StringVar(&typ, "type", "", "with -body or -body-file: the event-type header (default: the body's \"type\")")
		fs.Var(headers, "header", "with -body or -body-file: a header name=value, repeatable (e.g. -header aggregate-id=cust-7)")
	})
	if err != nil {
		return err
	}
	dest := cfg.Destinations[0]
	if destOverr != "" {
		dest = destOverr
	}
	if body != "" || bodyFile != "" || typ != "" || len(headers) > 0 {
		return publishOne(ctx, e, cfg, dest, body, bodyFile, typ, headers, verify, verifyWithin)
	}
	start := time.Now()
	exp, err := loadgen.Publish(ctx, loadgen.Config{
		Broker:      cfg.Stomp(nil),
		Destination: dest, Messages: n, DuplicateRatio: dupRatio, MalformedRatio: malRatio, Seed: seed,
		EventType: eventType, MaxBodyBytes: cfg.MaxBodyBytes,
	})
	if err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Fprintf(e.stdout, "published %d persistent messages to %s in %s (%.0f msg/s): %d unique valid, %d duplicates, %d malformed %v\n",
		exp.Sent, dest, took.Round(time.Millisecond), float64(exp.Sent)/took.Seconds(), len(exp.IDs), exp.Duplicates, exp.MalformedCount(), exp.Malformed)
	if !verify {
		return nil
	}
	err = pollJournal(ctx, cfg, verifyWithin, func(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
		err := loadgen.Verify(ctx, pool, exp)
		if err != nil && ctx.Err() != nil {
			return false, fmt.Errorf("after %s: %w", verifyWithin, err)
		}
		return err == nil, nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "verified after %s: journal holds exactly the %d unique valid ids, quarantine exactly the %d malformed messages\n",
		time.Since(start).Round(time.Millisecond), len(exp.IDs), exp.MalformedCount())
	return nil
}

// headerFlag is -header name=value, repeatable.
type headerFlag map[string]string

func (h headerFlag) String() string { return "" }

func (h headerFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("want name=value: %q", v)
	}
	h[strings.TrimSpace(name)] = value
	return nil
}

// publishOne publishes one given body with its headers, as a producer would, after
// checking that inboxd would journal it rather than quarantine it; with verify it waits
// until the journal holds the event.
func publishOne(ctx context.Context, e *env, cfg *config.Config, dest, body, bodyFile, typ string, headers map[string]string,
	verify bool, within time.Duration) error {
	switch {
	case body != "" && bodyFile != "":
		return errors.New("-body and -body-file: give one")
	case bodyFile == "-":
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return fmt.Errorf("reading the body from standard input: %w", err)
		}
		body = string(b)
	case bodyFile != "":
		b, err := os.ReadFile(bodyFile)
		if err != nil {
			return fmt.Errorf("reading -body-file: %w", err)
		}
		body = string(b)
	case body == "":
		return errors.New("-type and -header need -body or -body-file")
	}
	if typ != "" {
		headers["event-type"] = typ
	}
	src, err := message.ParseIDSource(cfg.IDSource)
	if err != nil {
		return err
	}
	ev, err := message.Decode([]byte(body), func(name string) string { return headers[name] },
		message.Options{MaxBodyBytes: cfg.MaxBodyBytes, DefaultEventType: cfg.DefaultEventType, IDSource: src})
	if err != nil {
		return fmt.Errorf("inboxd would quarantine this message, not publishing it: %w", err)
	}
	pub := stompx.NewPublisher(cfg.Stomp(nil), 1)
	defer pub.Close()
	if err := pub.Publish(ctx, dest, []byte(body), headers); err != nil {
		return fmt.Errorf("publishing to %s: %w", dest, err)
	}
	fmt.Fprintf(e.stdout, "published event %s (type %s) to %s: journal id %s\n", message.EventKey(ev.Payload, src), ev.EventType, dest, ev.ID)
	if !verify {
		return nil
	}
	err = pollJournal(ctx, cfg, within, func(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
		_, err := journal.Get(ctx, pool, ev.ID)
		switch {
		case err == nil:
			return true, nil
		case ctx.Err() != nil:
			return false, fmt.Errorf("the journal does not hold event %s after %s", ev.ID, within)
		case !errors.Is(err, journal.ErrNotFound):
			return false, fmt.Errorf("reading the journal: %w", err)
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "verified: the journal holds event %s\n", ev.ID)
	return nil
}

// pollJournal asks done every 200 ms, for at most within, until it reports true or an
// error. done sees the bounded context, so it can tell its own failure from the end
// of the wait; one that returns false after the wait ended gets one more call's error.
func pollJournal(ctx context.Context, cfg *config.Config, within time.Duration, done func(context.Context, *pgxpool.Pool) (bool, error)) error {
	pool, err := openPool(ctx, cfg, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := done(ctx, pool)
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			// One more call, which sees the ended context and names what was missing.
			if _, err := done(ctx, pool); err != nil {
				return err
			}
			return fmt.Errorf("waiting for the journal: %w", ctx.Err())
		case <-tick.C:
		}
	}
}
