package webhook_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/webhook"
	"github.com/inboxd/inboxd/internal/webhook/sinktest"
)

// Issue 19, item 8(c): the processing path with the changefeed as the only push, as on
// CockroachDB. No LISTEN/NOTIFY (no process.Push); the sweeper runs with CockroachDB's
// grace (30s, defaults.SweepGraceCockroachDB), so it retries due FAILED entries and moves aggregates on,
// but never takes a RECEIVED entry within the test: every one reaches PROCESSED through
// the feed. The feed is sinktest.Feed, which watches the journal and posts through the
// webhook sink's semantics, with injected duplicates and replays, and a client timeout
// shorter than a batch takes (40 events of 20ms on 2 workers: over 400ms; the sink waits
// 250ms). Events are journaled in waves while the feed runs.
func TestChangefeedOnlyPush(t *testing.T) {
	t.Parallel()
	const (
		handlerTime   = 20 * time.Millisecond
		clientTimeout = 250 * time.Millisecond
		flushMessages = 40
		workers       = 2
	)
	ctx := context.Background()
	db := testenv.NewDB(t)
	if err := registration.Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	fx := pt.NewEffects(t, db.Pool)

	pool := db.OpenPool(t, func(pcfg *pgxpool.Config) {
		pcfg.MaxConns = 8
	})
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
		t := time.NewTimer(handlerTime) // the handler's own work
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		return fx.Handle(ctx, tx, ev)
	}))
	reg.Register(registration.EventType, registration.Handler)
	m := metrics.New()
	log := testenv.Logger(t) // printed if the test fails
	engine := process.New(pool, reg, process.Config{Concurrency: workers, MaxAttempts: maxAttempts,
		BaseBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		ImmediateRetries: -1}, m, log) // the checks count one handler run per attempt
	h := webhook.New(webhook.Config{AuthHeader: token, Sink: "journal"}, engine, pool, m, log)
	u, client := serve(t, h)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Shutdown(sctx); err != nil {
			t.Errorf("webhook shutdown: %v", err)
		}
	})
	testenv.Start(t, 30*time.Second, func(ctx context.Context) error {
		return process.NewSweeper(engine, process.SweeperConfig{Interval: 20 * time.Millisecond, Grace: 30 * time.Second}).Run(ctx)
	})

	c := *client
	c.Timeout = clientTimeout
	feed := &sinktest.Feed{DB: db.Pool, Sink: &sinktest.Sink{URLs: []string{u}, Client: &c, AuthHeader: token},
		FlushMessages: flushMessages, FlushFrequency: 50 * time.Millisecond,
		Backoff: 50 * time.Millisecond, MaxBackoff: 400 * time.Millisecond, Workers: 4,
		Resolved: 300 * time.Millisecond, Duplicates: 0.2, Replays: 0.2, Seed: 19}
	testenv.Start(t, 30*time.Second, feed.Run)

	sc := buildScenario(200, 30, 40)
	start := time.Now()
	for lo := 0; lo < len(sc.payloads); lo += 60 {
		pt.Ingest(t, db.Pool, sc.payloads[lo:min(lo+60, len(sc.payloads))]...)
		testenv.Eventually(t, 30*time.Second, "the feed to see the wave", func() bool {
			return feed.Stats().Changes >= min(lo+60, len(sc.payloads))
		})
	}
	r := sc.verify(t, db)
	took := time.Since(start)
	// A resolved message once everything is done: the watermark the feed stored.
	done := time.Now()
	testenv.Eventually(t, 30*time.Second, "a resolved timestamp after the last outcome", func() bool {
		w, found, err := webhook.ReadWatermark(ctx, db.Pool, "journal")
		return err == nil && found && w.Resolved.Time().After(done)
	})
	checkHandlerRuns(t, sinkCallsOver(fx, db, t), m)
	fs, ss := feed.Stats(), feed.Sink.Stats()
	t.Logf("events=%d statuses=%v effects=%d in %s; feed: changes=%d emitted=%d duplicates=%d replayed=%d batches=%d (largest %d) resolved=%d; "+
		"posts=%d retries=%d answers=%v; webhook rows joined=%v noop=%v",
		r.Events, r.ByStatus, r.Effects, took.Round(time.Millisecond), fs.Changes, fs.Emitted, fs.Duplicates, fs.Replayed, fs.Batches,
		fs.MaxBatch, fs.Resolved, ss.Posts, ss.Retries, ss.ByStatus,
		gaugeLabel(t, m, "inboxd_webhook_rows_total", "disposition", "joined"), gaugeLabel(t, m, "inboxd_webhook_rows_total", "disposition", "noop"))
	// One journal row version per event: processing writes journal_state, never the
	// journal row, so the changefeed emits each event once, as it is journaled.
	if fs.Changes != r.Events {
		t.Errorf("the feed saw %d journal row versions, want %d (one per event)", fs.Changes, r.Events)
	}
	if ss.ByStatus[0] == 0 {
		t.Error("no post outlasted the client timeout: the test shows nothing about it")
	}
	if fs.Duplicates == 0 || fs.Replayed == 0 {
		t.Errorf("duplicates %d, replayed %d: want both", fs.Duplicates, fs.Replayed)
	}
	if fs.MaxBatch > flushMessages {
		t.Errorf("largest batch %d, over %d", fs.MaxBatch, flushMessages)
	}
}
