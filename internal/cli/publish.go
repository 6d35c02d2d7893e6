package cli

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/loadgen"
)

func init() {
	commands["publish"] = command{
		summary: "publish generated events (with duplicates and malformed ones) to the broker, and optionally verify the journal",
		run:     runPublish,
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
	})
	if err != nil {
		return err
	}
	dest := cfg.Destinations[0]
	if destOverr != "" {
		dest = destOverr
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
	pool, err := openPool(ctx, cfg, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	vctx, cancel := context.WithTimeout(ctx, verifyWithin)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		err := loadgen.Verify(vctx, pool, exp)
		if err == nil {
			break
		}
		select {
		case <-vctx.Done():
			return fmt.Errorf("after %s: %w", verifyWithin, err)
		case <-tick.C:
		}
	}
	fmt.Fprintf(e.stdout, "verified after %s: journal holds exactly the %d unique valid ids, quarantine exactly the %d malformed messages\n",
		time.Since(start).Round(time.Millisecond), len(exp.IDs), exp.MalformedCount())
	return nil
}
