package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/txstats"
	"github.com/inboxd/inboxd/internal/webhook"
	"github.com/inboxd/inboxd/internal/webhook/sinktest"
)

// runE2E is row 4: ingest plus processing, until stop closes. On the sweeper path the
// sweeper's workers (grace 0), kicked by every ingest commit, drive processing, as on
// PostgreSQL in production. On the webhook
// path a stand-in for the CockroachDB changefeed tails the journal's RECEIVED rows and
// posts them through sinktest (the sink's wrapped batches, 4 in flight) to the real
// webhook handler over HTTPS; a sweeper with a 5 s grace stays as the safety net, and
// the note says how many events it had to take.
func runE2E(ctx context.Context, a rowArgs, log *slog.Logger, ready func(), stop <-chan struct{}) (rowResult, error) {
	pool, m, eng, err := newEngine(ctx, a, log)
	if err != nil {
		return rowResult{}, err
	}
	defer pool.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	run := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				errMu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("%s: %w", name, err)
				}
				errMu.Unlock()
				cancel()
			}
		}()
	}
	var onCommit func(int)
	if a.Row == rowE2ESweeper || a.Row == rowReplayLive {
		onCommit = func(int) { eng.Kick() } // the push of PostgreSQL, in process
	}
	ingest, err := ingestRunner(ctx, a, pool, m, log, onCommit)
	if err != nil {
		return rowResult{}, err
	}
	run("ingest", ingest)
	var feed *feedStandIn
	switch a.Row {
	case rowE2ESweeper:
		run("sweeper", process.NewSweeper(eng, process.SweeperConfig{Interval: a.Knobs.SweepInterval, Grace: 0}).Run)
	case rowReplayLive:
		run("sweeper", process.NewSweeper(eng, process.SweeperConfig{Interval: a.Knobs.SweepInterval, Grace: 0}).Run)
		// The replay part of a running inboxd: it runs the run the parent starts.
		run("replay", func(ctx context.Context) error { return runReplays(ctx, pool, a, m, log) })
	case rowE2EWebhook:
		url, client, shutdown, err := serveWebhook(eng, pool, m, log)
		if err != nil {
			return rowResult{}, err
		}
		defer shutdown()
		feed = &feedStandIn{db: pool, sink: &sinktest.Sink{URLs: []string{url}, Client: client, InFlight: 4},
			poll: 20 * time.Millisecond, flush: a.Knobs.FeedFlush, batch: 100, log: log}
		run("feed", feed.run)
		run("sweeper", process.NewSweeper(eng, process.SweeperConfig{Interval: time.Second, Grace: 5 * time.Second}).Run)
	}
	ready()
	select {
	case <-stop:
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	if firstErr != nil {
		return rowResult{}, firstErr
	}
	note := fmt.Sprintf("sweeper took %.0f stranded events", counterValue(m.SweeperPicked.WithLabelValues("stranded")))
	if a.Row == rowReplayLive {
		note += fmt.Sprintf("; replay attempts processed %.0f, rejected %.0f, failed %.0f",
			counterValue(m.ReplayItems.WithLabelValues("processed")), counterValue(m.ReplayItems.WithLabelValues("rejected")),
			counterValue(m.ReplayItems.WithLabelValues("failed")))
	}
	if feed != nil {
		st := feed.sink.Stats()
		note += fmt.Sprintf("; webhook: %d posts, %d retries, %d rows, processed %.0f",
			st.Posts, st.Retries, st.Rows, counterValue(m.WebhookRows.WithLabelValues("processed")))
	}
	return rowResult{Note: note}, nil
}

func counterValue(c prometheus.Counter) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil || d.Counter == nil {
		return 0
	}
	return d.Counter.GetValue()
}

// serveWebhook serves the real webhook handler over HTTPS on a loopback port, with a
// certificate generated for the occasion, and returns its URL and a client that
// trusts it.
func serveWebhook(eng *process.Engine, pool *pgxpool.Pool, m *metrics.Metrics, log *slog.Logger) (string, *http.Client, func(), error) {
	dir, err := os.MkdirTemp("", "inboxd-bench-certs-")
	if err != nil {
		return "", nil, nil, err
	}
	bundle, err := certs.Load(certs.Config{Dir: dir, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, nil, fmt.Errorf("making webhook certificates: %w", err)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	webhook.New(webhook.Config{}, eng, pool, m, log).Register(e, "/changefeed")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, nil, err
	}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(tls.NewListener(ln, bundle.TLSConfig)) }()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(bundle.CAPEM)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 8}}
	shutdown := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		os.RemoveAll(dir)
	}
	return "https://" + ln.Addr().String() + "/changefeed", client, shutdown, nil
}

// feedStandIn plays the CockroachDB changefeed that PostgreSQL lacks: it polls the
// journal's RECEIVED rows in sequence order (a rangefeed's committed writes), takes
// each one it has not emitted yet (journal.Received: a cursor would miss a batch that
// commits after a later one) and flushes them like webhook_sink_config
// {"Flush":{"Messages":batch,"Frequency":flush}}, with the sink's InFlight POSTs running
// in parallel to the polling, as the sink's I/O workers do. Its poll interval and flush
// frequency are part of the measured latency.
type feedStandIn struct {
	db          database.DB
	sink        *sinktest.Sink
	clock       sinktest.Clock
	poll, flush time.Duration
	batch       int
	log         *slog.Logger
}

func (f *feedStandIn) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan []json.RawMessage, 64)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for range max(f.sink.InFlight, 1) {
		wg.Go(func() {
			for b := range work {
				if err := f.sink.PostBatch(ctx, b); err != nil && ctx.Err() == nil {
					select {
					case errc <- err:
					default:
					}
					cancel()
				}
			}
		})
	}
	err := f.poll1(ctx, work)
	close(work)
	wg.Wait()
	select {
	case err = <-errc:
	default:
	}
	return err
}

func (f *feedStandIn) poll1(ctx context.Context, work chan<- []json.RawMessage) error {
	var (
		emitted []string // ids emitted and RECEIVED at the last poll
		pending []json.RawMessage
		oldest  time.Time
	)
	t := time.NewTicker(f.poll)
	defer t.Stop()
	for {
		ids, rows, err := journal.Received(ctx, f.db, emitted, 5000)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			f.log.Warn("changefeed stand-in: polling the journal", "error", err)
		} else {
			emitted = ids // every row returned is emitted now, or was before
		}
		for i, r := range rows {
			if r == nil {
				continue
			}
			if len(pending) == 0 {
				oldest = time.Now()
			}
			pending = append(pending, sinktest.Wrapped(r, ids[i], "journal", f.clock.Now()))
		}
		for len(pending) >= f.batch || (len(pending) > 0 && time.Since(oldest) >= f.flush) {
			n := min(len(pending), f.batch)
			select {
			case work <- pending[:n:n]:
			case <-ctx.Done():
				return nil
			}
			pending = append([]json.RawMessage(nil), pending[n:]...)
			oldest = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// histogram returns a histogram's sample count and sum.
func histogram(h prometheus.Histogram) (uint64, float64) {
	var d dto.Metric
	if err := h.Write(&d); err != nil || d.Histogram == nil {
		return 0, 0
	}
	return d.Histogram.GetSampleCount(), d.Histogram.GetSampleSum()
}

// newEngine is the processing side of the end-to-end rows: a pool with the engine's
// connections on top of ingest's, the demo's registration handler, and metrics.
func newEngine(ctx context.Context, a rowArgs, log *slog.Logger) (*pgxpool.Pool, *metrics.Metrics, *process.Engine, error) {
	pool, _, m, eng, err := newTracedEngine(ctx, a, log)
	return pool, m, eng, err
}

// newTracedEngine is newEngine with a txstats.Tracer on its pool, which counts the
// statements of processing transactions.
func newTracedEngine(ctx context.Context, a rowArgs, log *slog.Logger) (*pgxpool.Pool, *txstats.Tracer, *metrics.Metrics, *process.Engine, error) {
	tracer := &txstats.Tracer{}
	pool, err := openTracedPool(ctx, a.DBURL, a.Knobs.PoolSize+a.Knobs.Concurrency, tracer)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	reg := process.NewRegistry()
	reg.Register(registration.EventType, registration.Handler)
	m := metrics.New()
	tp, _ := a.Knobs.tracerProvider()
	return pool, tracer, m, process.New(pool, reg, process.Config{Concurrency: a.Knobs.Concurrency, KickLinger: a.Knobs.KickLinger, TracerProvider: tp}, m, log), nil
}

// statementsNote describes the processing transactions c counted: inboxd's own
// statements and round trips per transaction, and the handler's.
func statementsNote(c txstats.Counts) string {
	stmts, rts, hStmts, hRTs := c.PerTransaction()
	return fmt.Sprintf("per processing transaction (%d): inboxd %.1f statements in %.1f round trips (at most %d in %d), handler %.1f in %.1f",
		c.Transactions, stmts, rts, c.MaxStatements, c.MaxRoundTrips, hStmts, hRTs)
}

// runE2EMax is the e2e-max row: the corpus is on the queue before it starts; ingest and
// processing (workers kicked by each ingest commit, as on PostgreSQL in production)
// run together, and the clock stops when every message is acked and no journal entry
// is pending any more: the end-to-end ceiling, to compare with the ingest row. The
// backlog row runs it too, and stops once its N fresh events are processed, the
// blocked backlog staying pending.
func runE2EMax(ctx context.Context, a rowArgs, log *slog.Logger) (rowResult, error) {
	pool, tracer, m, eng, err := newTracedEngine(ctx, a, log)
	if err != nil {
		return rowResult{}, err
	}
	defer pool.Close()
	sub, err := newSubscriber(a, pool, m, log, func(int) { eng.Kick() })
	if err != nil {
		return rowResult{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	done := make(chan error, 2)
	go func() { done <- sub.Run(runCtx) }()
	go func() {
		done <- process.NewSweeper(eng, process.SweeperConfig{Interval: a.Knobs.SweepInterval, Grace: 0}).Run(runCtx)
	}()
	acked := m.Acked.WithLabelValues(a.Queue)
	processed := m.Processed.WithLabelValues(registration.EventType, "processed")
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var res rowResult
	for {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case err := <-done:
			return res, fmt.Errorf("stopped after %d of %d acks: %v", res.Received, a.N, err)
		case <-t.C:
		}
		if res.Received = int(counterValue(acked)); res.Received < a.N {
			continue
		}
		if a.Row == rowBacklog { // the backlog stays pending: done when every fresh event is
			if counterValue(processed) >= float64(a.N) {
				break
			}
			continue
		}
		pending, err := journal.CountPending(ctx, pool)
		if err != nil {
			return res, err
		}
		if pending == 0 {
			break
		}
	}
	res.DrainSeconds = time.Since(start).Seconds()
	stop()
	for range 2 {
		if err := <-done; err != nil {
			return res, err
		}
	}
	batches, sum := histogram(m.ProcessSeconds.WithLabelValues(registration.EventType).(prometheus.Histogram))
	res.Note = fmt.Sprintf("processed %.0f; batch transaction %.1f ms on average per event; %s", counterValue(processed),
		sum/float64(max(batches, 1))*1e3, statementsNote(tracer.Counts()))
	return res, nil
}
