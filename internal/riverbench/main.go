// Command inboxd-river runs the River rows of "inboxd bench": the same inbox built with
// River (github.com/riverqueue/river) as River's documentation builds one, so that the
// bench can set inboxd beside what a Go team would build instead (issue 29).
//
//   - The STOMP consumer reads a batch (the same batch size and linger as inboxd's
//     ingest), inserts one unique job per event id with Client.InsertManyTx
//     (UniqueOpts{ByArgs: true}, the id the only unique field) in one transaction, with
//     the malformed messages in a table of their own, and acks the batch after the
//     commit (one cumulative client ack, as inboxd's ingest).
//   - The worker writes the effect (the demo's registration handler: the customer and
//     its customer-registered outbox row, as in inboxd's e2e-max) and completes the job
//     with JobCompleteTx in its own transaction (River's "complete job within
//     transaction" example).
//
// Rows: river-ingest (the consumer alone, an insert-only client) and river (consumer
// and workers together, pre-published, the clock stopped when every message is acked
// and no job is left to work: inboxd's e2e-max). The parent ("inboxd bench") starts
// this binary as it starts its own children, and reads one "result {json}" line.
//
// It is a module of its own so that the library's go.mod does not name River.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/inboxd/inboxd/internal/bench"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/registration"
)

const (
	rowIngest = "river-ingest"
	rowMax    = "river"
)

type options struct {
	row, queue, dbURL, stompAddr, cpuProfile  string
	n, batchSize, prefetch, poolSize, workers int
	linger, fetchCooldown                     time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "inboxd-river:", err)
		os.Exit(1)
	}
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("inboxd-river", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.row, "row", "", rowIngest+" or "+rowMax)
	fs.StringVar(&o.queue, "queue", "", "STOMP destination")
	fs.IntVar(&o.n, "n", 0, "messages to drain")
	fs.StringVar(&o.dbURL, "db-url", "", "database of the row")
	fs.StringVar(&o.stompAddr, "stomp-addr", "127.0.0.1:61613", "STOMP address")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the row to this file")
	fs.IntVar(&o.batchSize, "batch-size", 500, "messages per insert transaction, at most")
	fs.DurationVar(&o.linger, "linger", 5*time.Millisecond, "how long a partial batch waits for more messages")
	fs.IntVar(&o.prefetch, "prefetch", 2000, "activemq.prefetchSize of the subscription")
	fs.IntVar(&o.poolSize, "pool-size", 40, "database connections (pgxpool MaxConns)")
	fs.IntVar(&o.workers, "workers", 200, "river: MaxWorkers of the queue")
	fs.DurationVar(&o.fetchCooldown, "fetch-cooldown", 10*time.Millisecond, "river: FetchCooldown")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.row != rowIngest && o.row != rowMax:
		return o, fmt.Errorf("-row must be %s or %s, not %q", rowIngest, rowMax, o.row)
	case o.queue == "" || o.dbURL == "":
		return o, errors.New("-queue and -db-url are required")
	case o.n < 1 || o.batchSize < 1 || o.prefetch < 1 || o.poolSize < 1 || o.workers < 1:
		return o, errors.New("-n, -batch-size, -prefetch, -pool-size and -workers must be at least 1")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	stopProfile, err := bench.StartCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	// The parent closing our stdin (or dying) ends the row.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	cfg, err := pgxpool.ParseConfig(o.dbURL)
	if err != nil {
		return fmt.Errorf("parsing database url: %w", err)
	}
	cfg.MaxConns = int32(o.poolSize)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connecting to the database: %w", err)
	}
	defer pool.Close()
	if err := migrate(ctx, pool); err != nil {
		return err
	}
	client, err := newClient(pool, o, log)
	if err != nil {
		return err
	}
	res, err := measure(ctx, pool, client, o, log)
	if err != nil {
		return err
	}
	return bench.WriteResult(stdout, res)
}

// migrate adds River's tables (rivermigrate, all versions) and the consumer's table for
// malformed messages to the row's database, which the parent made with inboxd's schema
// and the demo's customers.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrating river: %w", err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS river_inbox_rejected (
		message_id TEXT NOT NULL, reason TEXT NOT NULL, body BYTEA NOT NULL)`); err != nil {
		return fmt.Errorf("creating river_inbox_rejected: %w", err)
	}
	return nil
}

// eventArgs is one inbox event as a River job. ByArgs uniqueness hashes only the
// fields tagged river:"unique": the event id, as inboxd's journal keys on it.
type eventArgs struct {
	ID          string          `json:"id" river:"unique"`
	Type        string          `json:"type"`
	AggregateID string          `json:"aggregate_id"`
	Payload     json.RawMessage `json:"payload"`
}

func (eventArgs) Kind() string { return "inbox_event" }

// eventWorker writes the event's effect and completes the job in one transaction.
type eventWorker struct {
	river.WorkerDefaults[eventArgs]
	pool *pgxpool.Pool
}

func (w *eventWorker) Work(ctx context.Context, job *river.Job[eventArgs]) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ev := process.Event{ID: job.Args.ID, Type: job.Args.Type, AggregateID: job.Args.AggregateID, Payload: job.Args.Payload, Attempt: job.Attempt}
	if err := registration.Handle(ctx, tx, ev); err != nil {
		if errors.Is(err, process.ErrRejected) {
			return river.JobCancel(err)
		}
		return err
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func newClient(pool *pgxpool.Pool, o options, log *slog.Logger) (*river.Client[pgx.Tx], error) {
	cfg := &river.Config{Logger: log}
	if o.row == rowMax {
		workers := river.NewWorkers()
		river.AddWorker(workers, &eventWorker{pool: pool})
		cfg.Workers = workers
		cfg.FetchCooldown = o.fetchCooldown
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.workers}}
	}
	// river-ingest: an insert-only client (no queues, no workers).
	c, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return c, nil
}

// measure runs the consumer (and, for the river row, the client's workers) until every
// message is acked and, for the river row, no job is left to work.
func measure(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], o options, log *slog.Logger) (bench.RowResult, error) {
	var res bench.RowResult
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	if o.row == rowMax {
		if err := client.Start(runCtx); err != nil {
			return res, fmt.Errorf("starting river: %w", err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = client.Stop(sctx)
		}()
	}
	var acked, committed, batches atomic.Int64
	var commitNanos atomic.Int64
	done := make(chan error, 1)
	go func() { done <- consume(runCtx, pool, client, o, &acked, &committed, &batches, &commitNanos) }()
	t := time.NewTicker(time.Millisecond)
	if o.row == rowMax {
		t.Reset(20 * time.Millisecond) // as inboxd's e2e-max polls
	}
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case err := <-done:
			return res, fmt.Errorf("consumer stopped after %d of %d acks: %v", acked.Load(), o.n, err)
		case <-t.C:
		}
		if res.Received = int(acked.Load()); res.Received < o.n {
			continue
		}
		if o.row == rowIngest {
			break
		}
		var left int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')`).Scan(&left); err != nil {
			return res, err
		}
		if left == 0 {
			break
		}
	}
	res.DrainSeconds = time.Since(start).Seconds()
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return res, err
	}
	b := max(batches.Load(), 1)
	res.Note = fmt.Sprintf("%d batches of %.0f on average, mean commit %.1f ms (%.0f%% of the drain time), jobs inserted %d",
		batches.Load(), float64(o.n)/float64(b), float64(commitNanos.Load())/float64(b)/1e6,
		float64(commitNanos.Load())/1e9/res.DrainSeconds*100, committed.Load())
	return res, nil
}

// consume is the docs' inbox: read a batch, insert its jobs (and its malformed
// messages) in one transaction, commit, then ack the batch.
func consume(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], o options,
	acked, committed, batches, commitNanos *atomic.Int64) error {
	conn, err := bench.Dial(ctx, o.stompAddr)
	if err != nil {
		return err
	}
	defer conn.Disconnect()
	sub, err := conn.Subscribe(o.queue, stomp.AckClient, stomp.SubscribeOpt.Header("activemq.prefetchSize", strconv.Itoa(o.prefetch)))
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", o.queue, err)
	}
	batch := make([]*stomp.Message, 0, o.batchSize)
	for {
		batch = batch[:0]
		var linger <-chan time.Time
	fill:
		for len(batch) < o.batchSize {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-linger:
				break fill
			case m := <-sub.C:
				if m == nil || m.Err != nil {
					return fmt.Errorf("reading %s: subscription ended: %v", o.queue, m)
				}
				batch = append(batch, m)
				if linger == nil {
					linger = time.After(o.linger)
				}
			}
		}
		t := time.Now()
		n, err := insertBatch(ctx, pool, client, o.queue, batch)
		if err != nil {
			return err
		}
		commitNanos.Add(int64(time.Since(t)))
		batches.Add(1)
		committed.Add(int64(n))
		// One cumulative ack for the batch, after its commit.
		if err := conn.Ack(batch[len(batch)-1]); err != nil {
			return fmt.Errorf("acking: %w", err)
		}
		acked.Add(int64(len(batch)))
	}
}

// insertBatch inserts one unique job per event of batch, and its malformed messages,
// in one transaction, and returns how many jobs were new. A batch may hold the same
// event twice (a redelivery): River inserts a batch with one INSERT … ON CONFLICT DO
// UPDATE, which PostgreSQL refuses to apply to one row twice, so a batch's
// duplicates are dropped before the insert (riverpgxv5 JobInsertFastMany).
func insertBatch(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], queue string, batch []*stomp.Message) (int, error) {
	params := make([]river.InsertManyParams, 0, len(batch))
	seen := make(map[string]bool, len(batch))
	type rejected struct {
		messageID, reason string
		body              []byte
	}
	var bad []rejected
	unique := &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
	for _, m := range batch {
		ev, err := message.Decode(m.Body, m.Header.Get, message.Options{DefaultEventType: registration.EventType})
		if err != nil {
			var inv *message.Invalid
			if !errors.As(err, &inv) {
				return 0, err
			}
			bad = append(bad, rejected{m.Header.Get("message-id"), string(inv.Reason), m.Body})
			continue
		}
		if seen[ev.ID] {
			continue
		}
		seen[ev.ID] = true
		params = append(params, river.InsertManyParams{
			Args:       eventArgs{ID: ev.ID, Type: ev.EventType, AggregateID: ev.AggregateID, Payload: ev.Payload},
			InsertOpts: unique,
		})
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("beginning a batch of %s: %w", queue, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	inserted := 0
	if len(params) > 0 {
		results, err := client.InsertManyTx(ctx, tx, params)
		if err != nil {
			return 0, fmt.Errorf("inserting %d jobs: %w", len(params), err)
		}
		for _, r := range results {
			if !r.UniqueSkippedAsDuplicate {
				inserted++
			}
		}
	}
	for _, b := range bad {
		if _, err := tx.Exec(ctx, `INSERT INTO river_inbox_rejected (message_id, reason, body) VALUES ($1, $2, $3)`,
			b.messageID, b.reason, b.body); err != nil {
			return 0, fmt.Errorf("recording a malformed message: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("committing a batch of %s: %w", queue, err)
	}
	return inserted, nil
}
