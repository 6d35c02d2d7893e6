package process_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/notifier"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Issue 11: one transaction, each handler in its own savepoint: a failure, a rejection
// and a panic stay with their events, the rest commits.
func TestBatchIsolatesHandlerFailures(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	e, fx, _ := newEngine(t, db, process.Config{MaxAttempts: 3, BaseBackoff: time.Hour, MaxBackoff: time.Hour})
	specs := []pt.Spec{
		{Aggregate: "ok-1"},
		{Aggregate: "fails", Always: true},
		{Aggregate: "ok-2"},
		{Aggregate: "rejected", Reject: true},
		{Aggregate: "panics", Panic: true},
		{Aggregate: "ok-3"},
	}
	var payloads [][]byte
	for _, s := range specs {
		payloads = append(payloads, pt.Payload(s))
	}
	ids := pt.Ingest(t, db.Pool, payloads...)
	outs, heads, err := e.ProcessDue(context.Background(), 0, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(heads) != len(ids) {
		t.Fatalf("one batch claimed %d, want %d", len(heads), len(ids))
	}
	want := []struct {
		out    process.Outcome
		status journal.Status
	}{
		{process.OutcomeProcessed, "PROCESSED"}, {process.OutcomeFailed, "FAILED"}, {process.OutcomeProcessed, "PROCESSED"},
		{process.OutcomeRejected, "REJECTED"}, {process.OutcomeFailed, "FAILED"}, {process.OutcomeProcessed, "PROCESSED"},
	}
	for i, id := range ids {
		status, attempts, lastErr := pt.Status(t, db.Pool, id)
		if outs[id] != want[i].out || status != want[i].status || attempts != 1 {
			t.Errorf("event %d: %s, %s, %d attempts (%q); want %s, %s, 1", i, outs[id], status, attempts, lastErr, want[i].out, want[i].status)
		}
		if fx.Calls(id) != 1 {
			t.Errorf("event %d: handler ran %d times, want 1", i, fx.Calls(id))
		}
	}
	if r := pt.Check(t, db.Pool); r.Effects != 3 {
		t.Errorf("effects = %d, want 3 (failed, rejected and panicked effects rolled back)", r.Effects)
	}
}

// Issue 11: a handler returning SQLSTATE 40001 retries the whole batch: every event's
// handler runs again, no attempt is counted for the conflict, each effect lands once.
func TestBatchConflictRetriesWholeBatch(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	e, fx, m := newEngine(t, db, process.Config{})
	var payloads [][]byte
	for i := 0; i < 4; i++ {
		payloads = append(payloads, pt.Payload(pt.Spec{Aggregate: fmt.Sprintf("a%d", i)}))
	}
	payloads = append(payloads, pt.Payload(pt.Spec{Aggregate: "conflict", Conflicts: 1})) // last in sequence order
	ids := pt.Ingest(t, db.Pool, payloads...)
	outs, _, err := e.ProcessDue(context.Background(), 0, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		status, attempts, _ := pt.Status(t, db.Pool, id)
		if outs[id] != process.OutcomeProcessed || status != "PROCESSED" || attempts != 1 {
			t.Errorf("event %d: %s, %s, %d attempts; want processed, PROCESSED, 1", i, outs[id], status, attempts)
		}
		if fx.Calls(id) != 2 {
			t.Errorf("event %d: handler ran %d times, want 2 (the batch ran twice)", i, fx.Calls(id))
		}
	}
	if r := pt.Check(t, db.Pool); r.Effects != len(ids) {
		t.Errorf("effects = %d, want %d", r.Effects, len(ids))
	}
	if v := counterValue(t, m, "inboxd_process_outcomes_total", "outcome", "conflict"); v != 1 {
		t.Errorf("conflicts counted = %v, want 1", v)
	}
}

// Issue 11: one aggregate's events spread over many batches (and workers) keep their
// order, interleaved with other aggregates.
func TestBatchOrderAcrossBatches(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	e, _, _ := newEngine(t, db, process.Config{Concurrency: 4, MaxAttempts: 5})
	var payloads [][]byte
	for i := 0; i < 400; i++ {
		s := pt.Spec{Aggregate: "hot"}
		if i%2 == 1 {
			s.Aggregate = fmt.Sprintf("cold-%d", i%7)
		}
		if i%37 == 0 {
			s.FailTimes = 1
		}
		payloads = append(payloads, pt.Payload(s))
	}
	ids := pt.Ingest(t, db.Pool, payloads...)
	runSweeper(t, process.NewSweeper(e, process.SweeperConfig{Interval: 5 * time.Millisecond, Grace: 0, BatchSize: 7}))
	testenv.Eventually(t, 60*time.Second, "all processed", func() bool {
		return pt.CountStatus(t, db.Pool, "PROCESSED") == len(ids)
	})
	if r := pt.Check(t, db.Pool); r.Effects != len(ids) {
		t.Errorf("effects = %d, want %d", r.Effects, len(ids))
	}
}

// Issue 11: push. A Kick starts processing at once instead of at the next interval.
func TestKickProcessesAtOnce(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	e, _, _ := newEngine(t, db, process.Config{Concurrency: 2})
	runSweeper(t, process.NewSweeper(e, process.SweeperConfig{Interval: time.Hour, Grace: 0}))
	time.Sleep(100 * time.Millisecond) // let the workers find nothing and start their hour-long wait
	pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{}))
	e.Kick()
	testenv.Eventually(t, 30*time.Second, "processed after a kick", func() bool {
		return pt.CountStatus(t, db.Pool, "PROCESSED") == 1
	})
}

// Issue 11: push between instances on PostgreSQL. Instance B's workers wait an hour
// between polls; A's Notify wakes them through LISTEN/NOTIFY.
func TestPushAcrossInstances(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	fx := pt.NewEffects(t, db.Pool)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var pushes []*process.Push
	for i := 0; i < 2; i++ {
		pool, err := pgxpool.New(ctx, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		reg := process.NewRegistry()
		reg.Register(pt.EffectType, fx)
		e := process.New(pool, reg, process.Config{Concurrency: 2}, metrics.New(), nil)
		if i == 1 {
			runSweeper(t, process.NewSweeper(e, process.SweeperConfig{Interval: time.Hour, Grace: 0}))
		}
		n := notifier.New(pool.Config().ConnConfig, nil) // each instance's one LISTEN connection
		p := process.NewPush(e, pool, n)
		testenv.Start(t, 5*time.Second, n.Run)
		testenv.Start(t, 5*time.Second, p.Run)
		pushes = append(pushes, p)
	}
	testenv.Eventually(t, 30*time.Second, "both instances listening", func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN %`+process.PushChannel+`%'`).Scan(&n)
		return err == nil && n == 2
	})
	for round := 1; round <= 3; round++ {
		pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{}))
		pushes[0].Notify() // A has no workers: only B can process it
		testenv.Eventually(t, 30*time.Second, "processed by the other instance after NOTIFY", func() bool {
			return pt.CountStatus(t, db.Pool, "PROCESSED") == round
		})
	}
}

// Issue 29: the Notifies of a burst of ingest commits share one NOTIFY (each was one
// more transaction per commit), and a Notify after it still gets one of its own.
func TestPushCoalescesNotifies(t *testing.T) {
	db := testenv.NewDB(t)
	const linger = time.Second // long beside a loaded machine's scheduling delays
	e := process.New(db.Pool, process.NewRegistry(), process.Config{KickLinger: linger}, metrics.New(), nil)
	n := notifier.New(db.Pool.Config().ConnConfig, nil)
	var heard atomic.Int64
	listening := make(chan struct{}, 1)
	sub := n.Listen(process.PushChannel, func(nf notifier.Notification) {
		if nf.Resumed {
			select {
			case listening <- struct{}{}:
			default:
			}
			return
		}
		heard.Add(1)
	})
	t.Cleanup(sub.Unlisten)
	testenv.Start(t, 5*time.Second, n.Run)
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		t.Fatal("never listening")
	}
	p := process.NewPush(e, db.Pool, nil)
	testenv.Start(t, 5*time.Second, p.Run)
	// Ingest commits 10 ms apart, all within the linger.
	start := time.Now()
	sent := 0
	for time.Since(start) < linger/4 {
		p.Notify()
		sent++
		time.Sleep(10 * time.Millisecond) // paces the commits; not a wait for an outcome
	}
	testenv.Eventually(t, 30*time.Second, "the burst's NOTIFY", func() bool { return heard.Load() >= 1 })
	time.Sleep(2 * linger) // no second NOTIFY may follow for the same burst (a bounded wait for an absence)
	if got := heard.Load(); got != 1 {
		t.Fatalf("%d Notifies within the linger sent %d NOTIFYs, want 1", sent, got)
	}
	p.Notify()
	testenv.Eventually(t, 30*time.Second, "a later Notify's own NOTIFY", func() bool { return heard.Load() == 2 })
}

// setEffects is a BatchHandler over pt.Effects: it writes every event's effect, then
// fails the call if any event is meant to fail, so that the fallback must roll back.
type setEffects struct {
	*pt.Effects
	batchCalls int
}

func (s *setEffects) HandleBatch(ctx context.Context, tx pgx.Tx, evs []process.Event) ([]error, error) {
	s.batchCalls++
	errs := make([]error, len(evs))
	for i, ev := range evs {
		if _, err := tx.Exec(ctx, `INSERT INTO test_effects (event_id, aggregate_id, sequence_no) VALUES ($1, $2, $3)`,
			ev.ID, ev.AggregateID, ev.SequenceNo); err != nil {
			return nil, err
		}
		var sp pt.Spec
		if err := json.Unmarshal(ev.Payload, &sp); err != nil || sp.Reject || sp.Always || sp.Panic {
			errs[i] = errors.New("not clean")
		}
	}
	return errs, nil
}

// Issue 11: a set-based handler applies a clean batch in one call; one bad event rolls
// the call back and every event goes through Handle alone, so the bad one stays alone.
func TestBatchHandler(t *testing.T) {
	t.Parallel()
	for _, bad := range []bool{false, true} {
		t.Run(fmt.Sprintf("bad=%v", bad), func(t *testing.T) {
			db := testenv.NewDB(t)
			sh := &setEffects{Effects: pt.NewEffects(t, db.Pool)}
			reg := process.NewRegistry()
			reg.Register(pt.EffectType, sh)
			e := process.New(db.Pool, reg, process.Config{MaxAttempts: 3}, metrics.New(), nil)
			var payloads [][]byte
			for i := 0; i < 5; i++ {
				payloads = append(payloads, pt.Payload(pt.Spec{Aggregate: fmt.Sprintf("a%d", i), Reject: bad && i == 2}))
			}
			ids := pt.Ingest(t, db.Pool, payloads...)
			if _, _, err := e.ProcessDue(context.Background(), 0, 100, nil); err != nil {
				t.Fatal(err)
			}
			if sh.batchCalls != 1 {
				t.Errorf("batch calls = %d, want 1", sh.batchCalls)
			}
			wantEffects, wantSingle := 5, 0
			if bad {
				wantEffects, wantSingle = 4, 1
			}
			for i, id := range ids {
				status, _, _ := pt.Status(t, db.Pool, id)
				if want := map[bool]journal.Status{false: "PROCESSED", true: "REJECTED"}[bad && i == 2]; status != want {
					t.Errorf("event %d: %s, want %s", i, status, want)
				}
				if c := sh.Calls(id); c != wantSingle {
					t.Errorf("event %d: Handle ran %d times, want %d", i, c, wantSingle)
				}
			}
			if r := pt.Check(t, db.Pool); r.Effects != wantEffects {
				t.Errorf("effects = %d, want %d", r.Effects, wantEffects)
			}
		})
	}
}
