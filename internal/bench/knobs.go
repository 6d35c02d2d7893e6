package bench

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/inboxd/inboxd/internal/defaults"
)

// Knobs are the tuning settings a row runs with. The parent passes them to the child
// as flags of the same names.
type Knobs struct {
	BatchSize     int           `json:"batch_size"`
	Linger        time.Duration `json:"linger"`
	Prefetch      int           `json:"prefetch"`
	InFlight      int           `json:"commits_in_flight"`
	AckMode       string        `json:"ack_mode"`
	PoolSize      int           `json:"pool_size"`
	Concurrency   int           `json:"concurrency"`
	SweepInterval time.Duration `json:"sweep_interval"`
	FeedFlush     time.Duration `json:"feed_flush"`
	KickLinger    time.Duration `json:"kick_linger"`
	// Tracing records every span with the OpenTelemetry SDK (tracing.go).
	Tracing bool `json:"tracing,omitempty"`
}

// defaultKnobs are inboxd's own defaults (the one table, package defaults), with the
// bench's pool size and changefeed stand-in flush.
func defaultKnobs() Knobs {
	return Knobs{BatchSize: defaults.BatchSize, Linger: defaults.BatchLinger, Prefetch: defaults.Prefetch,
		InFlight: defaults.CommitsInFlight, AckMode: defaults.AckMode, PoolSize: 4, Concurrency: defaults.Concurrency(),
		SweepInterval: defaults.SweepInterval, FeedFlush: 200 * time.Millisecond, KickLinger: defaults.KickLinger}
}

func (k *Knobs) register(fs *flag.FlagSet) {
	fs.IntVar(&k.BatchSize, "batch-size", k.BatchSize, "ingest: messages per transaction, at most")
	fs.DurationVar(&k.Linger, "linger", k.Linger, "ingest: how long a partial batch waits for more messages")
	fs.IntVar(&k.Prefetch, "prefetch", k.Prefetch, "prefetch of every subscription (ActiveMQ activemq.prefetchSize, RabbitMQ prefetch-count)")
	fs.IntVar(&k.InFlight, "commits-in-flight", k.InFlight, "ingest: batches written at once (acks stay in order)")
	fs.StringVar(&k.AckMode, "ack-mode", k.AckMode, "ingest: client (one cumulative ack per batch) or client-individual")
	fs.IntVar(&k.PoolSize, "pool-size", k.PoolSize, "database connections of the row (pgxpool MaxConns)")
	fs.IntVar(&k.Concurrency, "concurrency", k.Concurrency, "e2e: events processed in parallel")
	fs.DurationVar(&k.SweepInterval, "sweep-interval", k.SweepInterval, "e2e-sweeper: how often the sweeper looks for work")
	fs.DurationVar(&k.KickLinger, "kick-linger", k.KickLinger, "e2e: how long the workers let ingest commits' kicks gather before claiming (negative: none)")
	fs.BoolVar(&k.Tracing, "tracing", k.Tracing, "record OpenTelemetry spans (SDK, always sampled, exported nowhere) and publish messages with a traceparent")
	fs.DurationVar(&k.FeedFlush, "feed-flush", k.FeedFlush, "e2e-webhook: the changefeed stand-in's flush frequency (webhook_sink_config Flush.Frequency)")
}

func (k Knobs) args() []string {
	return []string{
		"-batch-size=" + strconv.Itoa(k.BatchSize),
		"-linger=" + k.Linger.String(),
		"-prefetch=" + strconv.Itoa(k.Prefetch),
		"-commits-in-flight=" + strconv.Itoa(k.InFlight),
		"-ack-mode=" + k.AckMode,
		"-pool-size=" + strconv.Itoa(k.PoolSize),
		"-concurrency=" + strconv.Itoa(k.Concurrency),
		"-sweep-interval=" + k.SweepInterval.String(),
		"-kick-linger=" + k.KickLinger.String(),
		"-feed-flush=" + k.FeedFlush.String(),
		"-tracing=" + strconv.FormatBool(k.Tracing),
	}
}

func (k Knobs) validate() error {
	switch {
	case k.BatchSize < 1:
		return fmt.Errorf("batch-size must be at least 1")
	case k.Prefetch < 1:
		return fmt.Errorf("prefetch must be at least 1")
	case k.InFlight < 1:
		return fmt.Errorf("commits-in-flight must be at least 1")
	case k.AckMode != "client" && k.AckMode != "client-individual":
		return fmt.Errorf("ack-mode must be client or client-individual, not %q", k.AckMode)
	case k.PoolSize < 1:
		return fmt.Errorf("pool-size must be at least 1")
	case k.Concurrency < 1:
		return fmt.Errorf("concurrency must be at least 1")
	case k.SweepInterval <= 0 || k.FeedFlush <= 0:
		return fmt.Errorf("sweep-interval and feed-flush must be positive")
	}
	return nil
}

// label names the knobs that matter for row; rows ignore the others.
func (k Knobs) label(row string) string {
	if k.Tracing {
		return k.untracedLabel(row) + " tracing"
	}
	return k.untracedLabel(row)
}

func (k Knobs) untracedLabel(row string) string {
	switch row {
	case rowBroker:
		return fmt.Sprintf("auto-ack prefetch=%d", k.Prefetch)
	case rowNaive:
		return fmt.Sprintf("1 tx/msg client-individual prefetch=%d", k.Prefetch)
	case rowIngestPrune:
		return fmt.Sprintf("as ingest, pruning a backlog of N expired rows (%d per DELETE)", defaults.RetentionBatch)
	case rowIngest:
		return fmt.Sprintf("batch=%d linger=%s ack=%s prefetch=%d inflight=%d pool=%d", k.BatchSize, k.Linger, k.AckMode, k.Prefetch, k.InFlight, k.PoolSize)
	case rowShadow:
		return "over e2e-max's processed events; one rolled-back transaction each, no rate limit"
	case rowE2ESweeper, rowReplayLive:
		return fmt.Sprintf("batch=%d linger=%s ack=%s conc=%d push kick-linger=%s sweep=%s", k.BatchSize, k.Linger, k.AckMode, k.Concurrency, k.KickLinger, k.SweepInterval)
	case rowE2EMax:
		return fmt.Sprintf("pre-published; batch=%d conc=%d push kick-linger=%s", k.BatchSize, k.Concurrency, k.KickLinger)
	default:
		return fmt.Sprintf("batch=%d ack=%s conc=%d feed-flush=%s", k.BatchSize, k.AckMode, k.Concurrency, k.FeedFlush)
	}
}

func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}
