package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/ingest"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/retention"
)

// errNotAvailable marks a row this build cannot run.
var errNotAvailable = errors.New("row not available in this build")

// available says which rows this build can run.
var available = map[string]bool{rowBroker: true, rowNaive: true, rowIngest: true, rowIngestPrune: true, rowE2ESweeper: true, rowE2EWebhook: true, rowE2EMax: true,
	rowBacklog: true, rowJournalSize: true, rowRiverIngest: true, rowRiver: true, rowShadow: true, rowReplayLive: true}

// newSubscriber builds the real ingest subscriber (internal/ingest) with the row's knobs.
func newSubscriber(a rowArgs, pool *pgxpool.Pool, m *metrics.Metrics, log *slog.Logger, onCommit func(int)) (*ingest.Subscriber, error) {
	tp, _ := a.Knobs.tracerProvider() // the row's process ends with the row: spans in flight are dropped anyway
	sub, err := ingest.New(ingest.Config{
		TracerProvider:   tp,
		Addr:             a.StompAddr,
		Broker:           target.broker,
		Host:             "/", // RabbitMQ's default virtual host; ActiveMQ ignores it
		Login:            target.login,
		Passcode:         target.passcode,
		Destinations:     []string{a.Queue},
		BatchSize:        a.Knobs.BatchSize,
		Linger:           a.Knobs.Linger,
		Prefetch:         a.Knobs.Prefetch,
		CommitsInFlight:  a.Knobs.InFlight,
		AckMode:          ingest.AckMode(a.Knobs.AckMode),
		DefaultEventType: "registration",
		Logger:           log,
		Metrics:          m,
		OnCommit:         onCommit,
	}, pool)
	if err != nil {
		return nil, fmt.Errorf("building the ingest subscriber: %w", err)
	}
	return sub, nil
}

// runIngest is row 3: the real subscriber, until it has acked all a.N messages (its
// inboxd_ingest_acked_total counter, polled every millisecond), then a graceful stop.
func runIngest(ctx context.Context, a rowArgs, log *slog.Logger) (rowResult, error) {
	pool, err := openPool(ctx, a.DBURL, a.Knobs.PoolSize)
	if err != nil {
		return rowResult{}, err
	}
	defer pool.Close()
	m := metrics.New()
	sub, err := newSubscriber(a, pool, m, log, nil)
	if err != nil {
		return rowResult{}, err
	}
	acked := m.Acked.WithLabelValues(a.Queue)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- sub.Run(runCtx) }()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	var res rowResult
	for res.Received < a.N {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case err := <-done:
			return res, fmt.Errorf("ingest stopped after %d of %d acks: %v", res.Received, a.N, err)
		case <-t.C:
			res.Received = int(counterValue(acked))
		}
	}
	res.DrainSeconds = time.Since(start).Seconds()
	stop()
	if err := <-done; err != nil {
		return res, err
	}
	batches, commitSum := histogram(m.CommitSeconds)
	res.Note = fmt.Sprintf("%d batches of %.0f on average, mean commit %.1f ms (%.0f%% of the drain time), committed %.0f, duplicates %.0f",
		batches, float64(a.N)/float64(max(batches, 1)), commitSum/float64(max(batches, 1))*1e3, commitSum/res.DrainSeconds*100,
		counterValue(m.Committed.WithLabelValues(a.Queue)), counterValue(m.Duplicates.WithLabelValues(a.Queue)))
	return res, nil
}

// ingestRunner returns the ingest loop of the end-to-end rows: the real subscriber.
func ingestRunner(ctx context.Context, a rowArgs, pool *pgxpool.Pool, m *metrics.Metrics, log *slog.Logger, onCommit func(int)) (func(context.Context) error, error) {
	sub, err := newSubscriber(a, pool, m, log, onCommit)
	if err != nil {
		return nil, err
	}
	return sub.Run, nil
}

// runIngestPruning is the ingest row while the retention pruner works: before the clock
// starts it seeds a backlog of a.N expired PROCESSED entries, then runs the pruner
// (internal/retention, its default batch and pause) for the whole drain. Once the drain
// is measured it finishes the backlog, so that the check finds exactly the corpus.
func runIngestPruning(ctx context.Context, a rowArgs, log *slog.Logger) (rowResult, error) {
	pool, err := openPool(ctx, a.DBURL, 2)
	if err != nil {
		return rowResult{}, err
	}
	defer pool.Close()
	if err := journal.SeedExpired(ctx, pool, a.N, 30*24*time.Hour); err != nil {
		return rowResult{}, err
	}
	p := retention.New(pool, retention.Config{Journal: 24 * time.Hour, Interval: 100 * time.Millisecond}, log)
	pctx, stopPruning := context.WithCancel(ctx)
	defer stopPruning()
	var pruned atomic.Int64
	pruning := make(chan error, 1)
	go func() {
		for {
			st, err := p.Pass(pctx)
			pruned.Add(st.Journal)
			if err != nil && pctx.Err() == nil {
				pruning <- err
				return
			}
			select {
			case <-pctx.Done():
				pruning <- nil
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	res, err := runIngest(ctx, a, log)
	stopPruning()
	if perr := <-pruning; err == nil && perr != nil {
		err = fmt.Errorf("pruning during ingest: %w", perr)
	}
	if err != nil {
		return res, err
	}
	during := pruned.Load()
	for {
		n, err := journal.PruneJournal(ctx, pool, 24*time.Hour, defaults.RetentionBatch)
		if err != nil {
			return res, err
		}
		if n == 0 {
			break
		}
	}
	res.Note = fmt.Sprintf("pruned %d of %d expired rows during the drain (%.0f rows/s); %s",
		during, a.N, float64(during)/res.DrainSeconds, res.Note)
	return res, nil
}
