package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/webhook"
	"github.com/inboxd/inboxd/internal/webhook/sinktest"
)

// slowHandler takes delay per event and counts its runs, by event and in all.
type slowHandler struct {
	delay time.Duration
	total atomic.Int64
	mu    sync.Mutex
	calls map[string]int
}

func newSlowHandler(delay time.Duration) *slowHandler {
	return &slowHandler{delay: delay, calls: map[string]int{}}
}

func (s *slowHandler) Handle(ctx context.Context, tx pgx.Tx, ev process.Event) error {
	s.total.Add(1)
	s.mu.Lock()
	s.calls[ev.ID]++
	s.mu.Unlock()
	t := time.NewTimer(s.delay) // the handler's own work, not a wait for an outcome
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	_, err := tx.Exec(ctx, `INSERT INTO test_effects (event_id, aggregate_id, sequence_no) VALUES ($1, $2, $3)`,
		ev.ID, ev.AggregateID, ev.SequenceNo)
	return err
}

// slowInstance is one inboxd running h on workers workers, without a sweeper. It
// returns the handler, its URL and a client that trusts it.
func slowInstance(t *testing.T, db *testenv.DB, h process.Handler, workers int, cfg webhook.Config) (*webhook.Handler, string, *http.Client, *metrics.Metrics) {
	t.Helper()
	pool := db.OpenPool(t, func(pcfg *pgxpool.Config) {
		pcfg.MaxConns = int32(2*workers + 2)
	})
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, h)
	m := metrics.New()
	engine := process.New(pool, reg, process.Config{Concurrency: workers}, m, nil)
	cfg.AuthHeader = token
	wh := webhook.New(cfg, engine, pool, nil, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := wh.Shutdown(ctx); err != nil {
			t.Errorf("webhook shutdown: %v", err)
		}
	})
	u, client := serve(t, wh)
	return wh, u, client, m
}

// Issue 19, item 1: a batch whose handlers take longer than the sink's client timeout.
// The sink gives up after 3s and posts the same batch again, forever. 40 rows with
// handlers of 300ms on 2 workers need about 6s. Processing under the request's context
// rolled the batch back on every try (measured before the fix: 14 posts in 60s, 0 of 40
// processed, 279 handler calls). It must be processed once, handlers running once per
// event, and answered 2xx. With two instances behind the sink, the retry reaches the
// other one, which waits for the first one's row locks and finds the rows processed.
func TestSlowBatchOutlivesClientTimeout(t *testing.T) {
	t.Parallel()
	const (
		rows          = 40
		workers       = 2
		handlerTime   = 300 * time.Millisecond
		clientTimeout = 3 * time.Second
		budget        = 60 * time.Second
	)
	for _, instances := range []int{1, 2} {
		t.Run(fmt.Sprintf("instances=%d", instances), func(t *testing.T) {
			t.Parallel()
			db := testenv.NewDB(t)
			pt.NewEffects(t, db.Pool)
			slow := newSlowHandler(handlerTime)
			// webhook_client_timeout is the sink's http.Client.Timeout; CockroachDB's default
			// Retry.Backoff is 500ms, doubling, capped here below its 30s so that the test
			// does not wait on the sink's backoff.
			sink := &sinktest.Sink{AuthHeader: token, InFlight: 1, MinBackoff: 500 * time.Millisecond, MaxBackoff: 2 * time.Second}
			var ms []*metrics.Metrics
			for range instances {
				_, u, client, m := slowInstance(t, db, slow, workers, webhook.Config{})
				ms = append(ms, m)
				c := *client
				c.Timeout = clientTimeout
				sink.URLs, sink.Client = append(sink.URLs, u), &c
			}
			var payloads [][]byte
			for i := range rows {
				payloads = append(payloads, pt.Payload(pt.Spec{Aggregate: fmt.Sprintf("agg-%d", i)}))
			}
			pt.Ingest(t, db.Pool, payloads...)
			batch := journalRows(t, db, &sinktest.Clock{})

			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			start := time.Now()
			err := sink.Send(ctx, batch, rows)
			took := time.Since(start)
			st := sink.Stats()
			processed := pt.CountStatus(t, db.Pool, "PROCESSED")
			t.Logf("posts=%d answers=%v processed=%d/%d handler calls=%d in %s", st.Posts, st.ByStatus, processed, rows,
				slow.total.Load(), took.Round(time.Millisecond))
			if err != nil {
				t.Fatalf("the sink did not get a 2xx within %s: %v", budget, err)
			}
			if st.Posts < 2 {
				t.Errorf("posts = %d: the batch was answered before the client timeout; the test shows nothing", st.Posts)
			}
			if processed != rows {
				t.Errorf("processed = %d, want %d", processed, rows)
			}
			if n := slow.total.Load(); !testenv.Serializable() && n != rows {
				t.Errorf("handler calls = %d, want %d (one per event)", n, rows)
			} else if conflicts := conflictsOf(t, ms...); testenv.Serializable() && (n < rows || n > int64(rows*(1+conflicts))) {
				// See checkHandlerRuns: a conflicting batch runs its handlers again.
				t.Errorf("handler calls = %d, want %d plus at most one per event per conflict (%d)", n, rows, conflicts)
			}
			if r := pt.Check(t, db.Pool); r.Effects != rows || r.Distinct != rows {
				t.Errorf("effects = %d (%d distinct), want %d", r.Effects, r.Distinct, rows)
			}
		})
	}
}
