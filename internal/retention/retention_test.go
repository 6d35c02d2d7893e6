package retention

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

func batch(t *testing.T, from, n int) journal.Batch {
	t.Helper()
	var b journal.Batch
	for i := from; i < from+n; i++ {
		body := fmt.Sprintf(`{"id":"6f1c1f0e-1c3a-4c55-9a65-%012d","aggregateId":"a%d"}`, i, i%7)
		ev, err := message.Decode([]byte(body), func(string) string { return "" }, message.Options{DefaultEventType: "t"})
		if err != nil {
			t.Fatal(err)
		}
		b.Entries = append(b.Entries, journal.Entry{Event: ev, Destination: "/queue/retention"})
	}
	return b
}

func counts(t *testing.T, db database.DB) journal.Counts {
	t.Helper()
	c, err := journal.CountRows(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// With a short retention, the running pruner deletes expired PROCESSED and REJECTED
// entries and old quarantine rows, never RECEIVED, FAILED or DEAD ones, while ingest
// goes on writing: every ingested entry is there afterwards.
func TestPrunerKeepsWhatItMust(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := testenv.NewDB(t)

	if _, err := journal.Ingest(ctx, db.Pool, batch(t, 0, 500)); err != nil {
		t.Fatal(err)
	}
	// 100 of each status, all last updated an hour ago.
	if _, err := db.Pool.Exec(ctx, `
		UPDATE journal_state SET updated_at = now() - INTERVAL '1 hour',
		       status = (ARRAY['RECEIVED', 'PROCESSED', 'FAILED', 'DEAD', 'REJECTED'])[1 + sequence_no % 5]`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO quarantine (id, reason, destination, body, received_at)
		SELECT gen_random_uuid(), 'not_json', '/q', 'x', now() - INTERVAL '2 hours' FROM generate_series(1, 30)`); err != nil {
		t.Fatal(err)
	}
	before := counts(t, db.Pool)

	passes := make(chan Stats, 100)
	p := New(db.Pool, Config{Journal: time.Minute, Quarantine: time.Hour, Interval: 20 * time.Millisecond, Batch: 25, Pause: time.Millisecond}, nil)
	p.passDone = func(s Stats) {
		select {
		case passes <- s:
		default:
		}
	}
	var wg, ingesting sync.WaitGroup
	wg.Add(1)
	ingesting.Add(1)
	go func() { defer wg.Done(); _ = p.Run(ctx) }()
	// Ingest goes on while the pruner runs: new rows are RECEIVED and recent.
	ingested := 0
	go func() {
		defer ingesting.Done()
		for i := 1; i <= 10; i++ {
			if _, err := journal.Ingest(context.Background(), db.Pool, batch(t, 1000*i, 100)); err != nil {
				t.Error(err)
				return
			}
			ingested += 100
		}
	}()
	deadline := time.After(30 * time.Second)
	var deleted Stats
	for deleted.Journal < int64(before.ByStatus[journal.StatusProcessed]+before.ByStatus[journal.StatusRejected]) || deleted.Quarantine < 30 {
		select {
		case s := <-passes:
			deleted.Journal += s.Journal
			deleted.Quarantine += s.Quarantine
		case <-deadline:
			t.Fatalf("pruner deleted %+v within 30s", deleted)
		}
	}
	ingesting.Wait()
	cancel()
	wg.Wait()

	after := counts(t, db.Pool)
	for _, s := range []journal.Status{journal.StatusFailed, journal.StatusDead} {
		if after.ByStatus[s] != before.ByStatus[s] {
			t.Errorf("%s: %d before, %d after; retention must never delete them", s, before.ByStatus[s], after.ByStatus[s])
		}
	}
	if want := before.ByStatus[journal.StatusReceived] + ingested; after.ByStatus[journal.StatusReceived] != want {
		t.Errorf("RECEIVED: %d, want %d (old ones kept, every new one ingested)", after.ByStatus[journal.StatusReceived], want)
	}
	if after.ByStatus[journal.StatusProcessed]+after.ByStatus[journal.StatusRejected] != 0 || after.Quarantine != 0 {
		t.Errorf("after pruning: %v, want no PROCESSED, REJECTED or quarantine rows", after)
	}
	if ingested != 1000 {
		t.Errorf("ingested %d entries while pruning, want 1000", ingested)
	}
	// An entry and its state go together: no state is left without its entry, no entry
	// without its state.
	var orphans int
	if err := db.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM journal_state AS s WHERE NOT EXISTS (SELECT 1 FROM journal AS j WHERE j.id = s.id)) +
		(SELECT count(*) FROM journal AS j WHERE NOT EXISTS (SELECT 1 FROM journal_state AS s WHERE s.id = j.id))`).Scan(&orphans); err != nil || orphans != 0 {
		t.Errorf("%d journal or journal_state rows without the other (%v)", orphans, err)
	}
}

func TestPrunerDisabled(t *testing.T) {
	if New(nil, Config{}, nil).Enabled() {
		t.Fatal("a pruner with no retention is enabled")
	}
	if err := New(nil, Config{}, nil).Run(context.Background()); err != nil {
		t.Fatalf("Run of a disabled pruner = %v, want nil at once", err)
	}
}

// replayRun stores a run of n items over aggregates agg-0…agg-2 and puts it in state,
// finished (when not nil) at finished. The items' states follow the run's: all done
// for a done run, pending otherwise.
func replayRun(t *testing.T, db database.DB, state string, n int, finished *time.Time) string {
	t.Helper()
	ctx := context.Background()
	run := journal.ReplayRun{ID: message.NewID(), Selection: []byte(`{}`), Tail: true, Events: int64(n), Selected: int64(n),
		Aggregates: 3, Types: map[string]int64{"t": int64(n)}}
	items := make([]journal.PlanItem, n)
	for i := range items {
		items[i] = journal.PlanItem{ID: message.NewID(), EventType: "t", AggregateID: fmt.Sprintf("agg-%d", i%3), Selected: true}
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := journal.InsertReplayRun(ctx, tx, run, items); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE replay_run SET state = $2, created_at = now() - INTERVAL '3 hours',
		started_at = CASE WHEN $2 = 'planned' THEN NULL ELSE now() - INTERVAL '3 hours' END, finished_at = $3
		WHERE id = $1::UUID`, run.ID, state, finished); err != nil {
		t.Fatal(err)
	}
	if state == journal.RunDone {
		if _, err := tx.Exec(ctx, `UPDATE replay_item SET state = 'done', attempts = 1, at = now() WHERE run_id = $1::UUID`, run.ID); err != nil {
			t.Fatal(err)
		}
	}
	// A running or paused run holds its aggregates; a finished one should not, but a
	// hold left behind must go with its run.
	if state != journal.RunPlanned {
		if _, err := tx.Exec(ctx, `INSERT INTO replay_hold (aggregate_id, run_id)
			SELECT DISTINCT aggregate_id, run_id FROM replay_item WHERE run_id = $1::UUID`, run.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return run.ID
}

// A pass deletes the replay runs that finished (done or cancelled) before the journal's
// retention horizon, with their items and any hold they left, in bounded batches; it
// keeps every run that is planned, running or paused, however old, and finished ones
// within the horizon. The attempt history that names a deleted run stays valid: it
// holds the run's id, with no foreign key.
func TestPassDeletesOldFinishedReplayRuns(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	old, recent := time.Now().Add(-2*time.Hour), time.Now().Add(-time.Minute)
	type want struct {
		id   string
		what string
		gone bool
	}
	var runs []want
	for _, tc := range []struct {
		what     string
		state    string
		items    int
		finished *time.Time
		gone     bool
	}{
		{"old done run", journal.RunDone, 7, &old, true},
		{"old cancelled run", journal.RunCancelled, 5, &old, true},
		{"old done run without items", journal.RunDone, 0, &old, true},
		{"recent done run", journal.RunDone, 4, &recent, false},
		{"recent cancelled run", journal.RunCancelled, 4, &recent, false},
		{"old running run", journal.RunRunning, 6, nil, false},
		{"old paused run", journal.RunPaused, 3, nil, false},
		{"old planned run", journal.RunPlanned, 3, nil, false},
	} {
		runs = append(runs, want{replayRun(t, db.Pool, tc.state, tc.items, tc.finished), tc.what, tc.gone})
	}
	// A replayed attempt names its run (journal_attempt.replay_run, no foreign key).
	if _, err := db.Pool.Exec(ctx, `INSERT INTO journal_attempt (journal_id, attempt, started_at, duration_ms, runs, outcome, replay_run)
		VALUES (gen_random_uuid(), 1, now(), 1, 1, 'PROCESSED', $1::UUID)`, runs[0].id); err != nil {
		t.Fatal(err)
	}
	itemsOf := func(id string) int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM replay_item WHERE run_id = $1::UUID`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := map[string]int{}
	for _, r := range runs {
		before[r.id] = itemsOf(r.id)
	}

	// Batches of 2 rows: each statement deletes at most 2.
	p := New(db.Pool, Config{Replay: time.Hour, Batch: 2, Pause: time.Millisecond}, nil)
	st, err := p.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Replay != 7+5+3 { // items and runs
		t.Errorf("pass deleted %d replay rows, want 15 (12 items, 3 runs)", st.Replay)
	}
	for _, r := range runs {
		var runs, holds int
		if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM replay_run WHERE id = $1::UUID),
			(SELECT count(*) FROM replay_hold WHERE run_id = $1::UUID)`, r.id).Scan(&runs, &holds); err != nil {
			t.Fatal(err)
		}
		items := itemsOf(r.id)
		switch {
		case r.gone && (runs != 0 || items != 0 || holds != 0):
			t.Errorf("%s: %d run rows, %d items and %d holds left, want none", r.what, runs, items, holds)
		case !r.gone && (runs != 1 || items != before[r.id]):
			t.Errorf("%s: %d run rows and %d of %d items left, want it kept whole", r.what, runs, items, before[r.id])
		}
	}
	var holdsKept int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM replay_hold WHERE run_id = ANY ($1::UUID[])`,
		[]string{runs[5].id, runs[6].id}).Scan(&holdsKept); err != nil {
		t.Fatal(err)
	}
	if holdsKept != 6 {
		t.Errorf("the running and paused runs hold %d aggregates after the pass, want 6", holdsKept)
	}
	// A second pass has nothing left to do.
	if st, err := p.Pass(ctx); err != nil || st.Replay != 0 {
		t.Errorf("second pass: %+v, %v; want nothing deleted", st, err)
	}
}
