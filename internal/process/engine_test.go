package process_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

func newEngine(t *testing.T, db *testenv.DB, cfg process.Config) (*process.Engine, *pt.Effects, *metrics.Metrics) {
	t.Helper()
	fx := pt.NewEffects(t, db.Pool)
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, fx)
	m := metrics.New()
	if cfg.BaseBackoff == 0 {
		cfg.BaseBackoff = time.Millisecond
		cfg.MaxBackoff = 5 * time.Millisecond
	}
	if cfg.ImmediateRetries == 0 {
		cfg.ImmediateRetries = -1 // these tests count attempts one handler run each
	}
	return process.New(db.Pool, reg, cfg, m, nil), fx, m
}

func TestProcessOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		spec         pt.Spec
		runs         int // Process calls, each after the previous backoff elapsed
		want         process.Outcome
		status       journal.Status
		attempts     int
		errContains  string
		effects      int
		handlerCalls int
	}{
		{name: "success", spec: pt.Spec{}, runs: 1, want: process.OutcomeProcessed, status: "PROCESSED", attempts: 1, effects: 1, handlerCalls: 1},
		{name: "replay is a no-op", spec: pt.Spec{}, runs: 3, want: process.OutcomeNoop, status: "PROCESSED", attempts: 1, effects: 1, handlerCalls: 1},
		{name: "rejection is terminal", spec: pt.Spec{Reject: true}, runs: 2, want: process.OutcomeNoop, status: "REJECTED", attempts: 1, errContains: "simulated rejection", handlerCalls: 1},
		{name: "failure records backoff", spec: pt.Spec{Always: true}, runs: 1, want: process.OutcomeFailed, status: "FAILED", attempts: 1, errContains: "permanent failure", handlerCalls: 1},
		{name: "fails twice then succeeds", spec: pt.Spec{FailTimes: 2}, runs: 3, want: process.OutcomeProcessed, status: "PROCESSED", attempts: 3, effects: 1, handlerCalls: 3},
		{name: "dead after max attempts", spec: pt.Spec{Always: true}, runs: 3, want: process.OutcomeDead, status: "DEAD", attempts: 3, errContains: "attempt 3", handlerCalls: 3},
		{name: "unknown type", spec: pt.Spec{Type: "nobody-handles-this"}, runs: 1, want: process.OutcomeFailed, status: "FAILED", attempts: 1, errContains: `no handler registered for event type "nobody-handles-this"`},
		{name: "40001 retries the transaction, not an attempt", spec: pt.Spec{Conflicts: 2}, runs: 1, want: process.OutcomeProcessed, status: "PROCESSED", attempts: 1, effects: 1, handlerCalls: 3},
		{name: "panic is a failure", spec: pt.Spec{Panic: true}, runs: 1, want: process.OutcomeFailed, status: "FAILED", attempts: 1, errContains: "panicked", handlerCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := testenv.NewDB(t)
			e, fx, m := newEngine(t, db, process.Config{MaxAttempts: 3})
			id := pt.Ingest(t, db.Pool, pt.Payload(tt.spec))[0]
			var got process.Outcome
			for i := 0; i < tt.runs; i++ {
				if i > 0 {
					waitDue(t, db, id)
				}
				var err error
				if got, err = e.Process(context.Background(), id); err != nil {
					t.Fatalf("run %d: %v", i+1, err)
				}
			}
			if got != tt.want {
				t.Errorf("outcome = %q, want %q", got, tt.want)
			}
			status, attempts, lastErr := pt.Status(t, db.Pool, id)
			if status != tt.status || attempts != tt.attempts {
				t.Errorf("status, attempts = %s, %d; want %s, %d (last_error %q)", status, attempts, tt.status, tt.attempts, lastErr)
			}
			if !strings.Contains(lastErr, tt.errContains) {
				t.Errorf("last_error = %q, want it to contain %q", lastErr, tt.errContains)
			}
			r := pt.Check(t, db.Pool)
			if r.Effects != tt.effects {
				t.Errorf("effects = %d, want %d (failed attempts must leave none)", r.Effects, tt.effects)
			}
			if c := fx.Calls(id); c != tt.handlerCalls {
				t.Errorf("handler calls = %d, want %d", c, tt.handlerCalls)
			}
			if tt.spec.Type == "" {
				if v := counterValue(t, m, "inboxd_process_outcomes_total", "outcome", string(tt.want)); v < 1 {
					t.Errorf("outcome %s not counted", tt.want)
				}
			}
		})
	}
}

// waitDue waits until a FAILED entry's next attempt is due (backoff is milliseconds here).
func waitDue(t *testing.T, db *testenv.DB, id string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "next attempt due", func() bool {
		var due bool
		if err := db.Pool.QueryRow(context.Background(), `SELECT next_attempt_at <= now() FROM journal_state WHERE id = $1`, id).Scan(&due); err != nil {
			t.Fatal(err)
		}
		return due
	})
}

func TestNotDueFailedIsLeftAlone(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	e, fx, _ := newEngine(t, db, process.Config{BaseBackoff: time.Hour, MaxBackoff: time.Hour})
	id := pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{FailTimes: 1}))[0]
	for _, want := range []process.Outcome{process.OutcomeFailed, process.OutcomeNotDue} {
		got, err := e.Process(context.Background(), id)
		if err != nil || got != want {
			t.Fatalf("outcome = %q, %v; want %q", got, err, want)
		}
	}
	if fx.Calls(id) != 1 {
		t.Errorf("handler ran %d times, want 1 (the retry is not due)", fx.Calls(id))
	}
}

func TestHandlerMustNotEndTheTransaction(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
		return tx.Commit(ctx)
	}))
	e := process.New(db.Pool, reg, process.Config{}, nil, nil)
	id := pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{}))[0]
	if got, err := e.Process(context.Background(), id); err != nil || got != process.OutcomeFailed {
		t.Fatalf("outcome = %q, %v; want failed", got, err)
	}
}

func TestHandlerSwallowingDatabaseError(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
		_, _ = tx.Exec(ctx, `SELECT 1/0`) // aborts the transaction; the handler ignores it
		return nil
	}))
	e := process.New(db.Pool, reg, process.Config{}, nil, nil)
	id := pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{}))[0]
	got, err := e.Process(context.Background(), id)
	if err != nil || got != process.OutcomeFailed {
		t.Fatalf("outcome = %q, %v; want failed", got, err)
	}
	if _, _, le := pt.Status(t, db.Pool, id); !strings.Contains(le, "unusable") {
		t.Errorf("last_error = %q", le)
	}
}

func TestOrdering(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	e, fx, _ := newEngine(t, db, process.Config{MaxAttempts: 2, BaseBackoff: time.Hour, MaxBackoff: time.Hour})
	ids := pt.Ingest(t, db.Pool,
		pt.Payload(pt.Spec{Aggregate: "a", FailTimes: 1}), // 0: fails once, retry in an hour
		pt.Payload(pt.Spec{Aggregate: "a"}),               // 1
		pt.Payload(pt.Spec{Aggregate: "a"}),               // 2
		pt.Payload(pt.Spec{Aggregate: "b"}),               // 3: other aggregate, independent
	)
	// Later events are deferred while the first is pending.
	for _, i := range []int{2, 1} {
		if got, err := e.Process(ctx, ids[i]); err != nil || got != process.OutcomeDeferred {
			t.Fatalf("event %d: %q, %v; want deferred", i, got, err)
		}
	}
	if got, _ := e.Process(ctx, ids[3]); got != process.OutcomeProcessed {
		t.Fatalf("other aggregate: %q, want processed", got)
	}
	// The first fails: still pending, still blocking.
	if got, _ := e.Process(ctx, ids[0]); got != process.OutcomeFailed {
		t.Fatalf("first: %q, want failed", got)
	}
	if got, _ := e.Process(ctx, ids[1]); got != process.OutcomeDeferred {
		t.Fatalf("second behind FAILED first: %q, want deferred", got)
	}
	// Make the retry due; processing the first now chains to 1 and 2.
	if _, err := db.Pool.Exec(ctx, `UPDATE journal_state SET next_attempt_at = now() WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.Process(ctx, ids[0]); got != process.OutcomeProcessed {
		t.Fatalf("first retried: %q, want processed", got)
	}
	for _, id := range ids {
		if s, _, _ := pt.Status(t, db.Pool, id); s != journal.StatusProcessed {
			t.Errorf("%s: %s, want PROCESSED (chained)", id, s)
		}
	}
	pt.Check(t, db.Pool)
	if fx.Calls(ids[1]) != 1 || fx.Calls(ids[2]) != 1 {
		t.Errorf("deferred events ran their handler before their turn")
	}
}

// A DEAD event parks its aggregate: its successors wait until an operator retries or
// skips it (issue 18, item 2). An event type may opt out (Registry.RunOnDead), and a
// REJECTED event never blocks.
func TestDeadParksAggregate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		runOn  bool
		first  pt.Spec
		act    func(t *testing.T, db *testenv.DB, e *process.Engine, fx *pt.Effects, first string)
		want   []journal.Status
		byWant string // skipped_by of the first event
	}{
		{name: "parked until skipped", first: pt.Spec{Aggregate: "a", Always: true},
			act: func(t *testing.T, db *testenv.DB, _ *process.Engine, _ *pt.Effects, first string) {
				r, err := journal.Skip(context.Background(), db.Pool, first, "ops@example.com")
				if err != nil || r.SkippedBy == nil || *r.SkippedBy != "ops@example.com" || r.SkippedAt == nil {
					t.Fatalf("Skip = %+v, %v", r, err)
				}
				if _, err := journal.Skip(context.Background(), db.Pool, first, "again"); !errors.Is(err, journal.ErrNotSkippable) {
					t.Errorf("second Skip: %v, want ErrNotSkippable", err)
				}
			},
			want: []journal.Status{"DEAD", "REJECTED", "PROCESSED"}, byWant: "ops@example.com"},
		{name: "parked until retried", first: pt.Spec{Aggregate: "a", Always: true},
			act: func(t *testing.T, db *testenv.DB, e *process.Engine, fx *pt.Effects, first string) {
				// The dependency is back: the same handler, no longer failing.
				e.Registry().Replace(pt.EffectType, process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
					var m map[string]any
					if err := json.Unmarshal(ev.Payload, &m); err != nil {
						return err
					}
					delete(m, "alwaysFail")
					ev.Payload, _ = json.Marshal(m)
					return fx.Handle(ctx, tx, ev)
				}))
				if _, err := journal.RetryOne(context.Background(), db.Pool, first); err != nil {
					t.Fatal(err)
				}
			},
			want: []journal.Status{"PROCESSED", "REJECTED", "PROCESSED"}},
		{name: "type runs on past DEAD", runOn: true, first: pt.Spec{Aggregate: "a", Always: true},
			want: []journal.Status{"DEAD", "REJECTED", "PROCESSED"}, byWant: journal.RunOnSkipper},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			db := testenv.NewDB(t)
			e, fx, _ := newEngine(t, db, process.Config{MaxAttempts: 1})
			if tt.runOn {
				e.Registry().RunOnDead(pt.EffectType)
			}
			ids := pt.Ingest(t, db.Pool,
				pt.Payload(tt.first),
				pt.Payload(pt.Spec{Aggregate: "a", Reject: true}),
				pt.Payload(pt.Spec{Aggregate: "a"}),
				pt.Payload(pt.Spec{Aggregate: "b"}),
			)
			if got, _ := e.Process(ctx, ids[0]); got != process.OutcomeDead {
				t.Fatalf("first: %q, want dead", got)
			}
			if !tt.runOn {
				// Parked: the successors wait, delivered or swept, and other aggregates go on.
				if got, _ := e.Process(ctx, ids[1]); got != process.OutcomeDeferred {
					t.Errorf("successor delivered behind a DEAD head: %q, want deferred", got)
				}
				if _, _, err := e.ProcessDue(ctx, 0, 100, nil); err != nil {
					t.Fatal(err)
				}
				for i, want := range []journal.Status{"DEAD", "RECEIVED", "RECEIVED", "PROCESSED"} {
					if s, _, _ := pt.Status(t, db.Pool, ids[i]); s != want {
						t.Errorf("parked, event %d: %s, want %s", i, s, want)
					}
				}
				tt.act(t, db, e, fx, ids[0])
			}
			for range 3 {
				if _, _, err := e.ProcessDue(ctx, 0, 100, nil); err != nil {
					t.Fatal(err)
				}
			}
			for i, want := range tt.want {
				if s, _, _ := pt.Status(t, db.Pool, ids[i]); s != want {
					t.Errorf("event %d: %s, want %s", i, s, want)
				}
			}
			r, err := journal.Get(ctx, db.Pool, ids[0])
			if err != nil {
				t.Fatal(err)
			}
			if got := ptr(r.SkippedBy); got != tt.byWant {
				t.Errorf("skipped_by = %q, want %q", got, tt.byWant)
			}
			if fx.Calls(ids[2]) != 1 {
				t.Errorf("successor ran %d times, want once", fx.Calls(ids[2]))
			}
			// In order: every effect of the aggregate was written in sequence order.
			var outOfOrder bool
			if err := db.Pool.QueryRow(ctx, `SELECT coalesce(bool_or(x.seq < x.prev), false) FROM (
				SELECT sequence_no AS seq, lag(sequence_no) OVER (ORDER BY n) AS prev
				FROM test_effects WHERE aggregate_id = 'a') AS x`).Scan(&outOfOrder); err != nil || outOfOrder {
				t.Errorf("effects of aggregate a out of sequence order: %v, %v", outOfOrder, err)
			}
			var n int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM aggregate_head`).Scan(&n); err != nil || n != 0 {
				t.Errorf("aggregate_head rows left = %d, %v; want none", n, err)
			}
		})
	}
}

func ptr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func TestProcessBatchOrdersWithinBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	e, _, _ := newEngine(t, db, process.Config{Concurrency: 4})
	var payloads [][]byte
	for i := 0; i < 60; i++ {
		payloads = append(payloads, pt.Payload(pt.Spec{Aggregate: []string{"a", "b", "c"}[i%3]}))
	}
	ids := pt.Ingest(t, db.Pool, payloads...)
	rows, err := journal.RowsAsJSON(ctx, db.Pool, nil)
	if err != nil || len(rows) != len(ids) {
		t.Fatalf("rows: %d, %v", len(rows), err)
	}
	// Reverse order and no sequence numbers known: the database check still orders.
	items := make([]process.Item, len(ids))
	for i, id := range ids {
		items[len(ids)-1-i] = process.Item{ID: id}
	}
	if _, err := e.ProcessBatch(ctx, items); err != nil {
		t.Fatal(err)
	}
	if n := pt.CountStatus(t, db.Pool, "PROCESSED"); n != len(ids) {
		t.Errorf("processed = %d, want %d", n, len(ids))
	}
	pt.Check(t, db.Pool)
}

func TestReject(t *testing.T) {
	t.Parallel()
	base := errors.New("bad input")
	err := process.Reject(base)
	if !errors.Is(err, process.ErrRejected) || !errors.Is(err, base) || err.Error() != "bad input" {
		t.Errorf("Reject(base) = %v", err)
	}
	if process.Reject(nil) != nil {
		t.Error("Reject(nil) != nil")
	}
	if errors.Is(base, process.ErrRejected) {
		t.Error("plain error is a rejection")
	}
}

func counterValue(t *testing.T, m *metrics.Metrics, name, label, value string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					if mt.Counter != nil {
						sum += mt.Counter.GetValue()
					}
					if mt.Gauge != nil {
						sum += mt.Gauge.GetValue()
					}
				}
			}
		}
	}
	return sum
}
