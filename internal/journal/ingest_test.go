package journal_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

func entry(t testing.TB, body string) journal.Entry {
	t.Helper()
	ev, err := message.Decode([]byte(body), func(string) string { return "" }, message.Options{DefaultEventType: "registration"})
	if err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	return journal.Entry{Event: ev, Destination: "/queue/test"}
}

func count(t *testing.T, db database.DB, sql string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestIngest(t *testing.T) {
	t.Parallel()
	const idA = "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"
	const idB = "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a02"
	a := fmt.Sprintf(`{"id":%q,"name":"a"}`, idA)
	aSpaced := fmt.Sprintf(`{ "name": "a", "id": %q }`, idA)
	aOther := fmt.Sprintf(`{"id":%q,"name":"other"}`, idA)
	b := fmt.Sprintf(`{"id":%q,"name":"b"}`, idB)

	tests := []struct {
		name          string
		batches       [][]string
		want          journal.Result // of the last batch
		journal, quar int
	}{
		{"new rows", [][]string{{a, b}}, journal.Result{Inserted: 2}, 2, 0},
		{"duplicate in batch", [][]string{{a, a, aSpaced}}, journal.Result{Inserted: 1, Duplicates: 2}, 1, 0},
		{"redelivered batch", [][]string{{a, b}, {a, b}}, journal.Result{Duplicates: 2}, 2, 0},
		{"conflict across batches", [][]string{{a}, {aOther}}, journal.Result{Conflicts: 1, Quarantined: 1}, 1, 1},
		{"conflict redelivered is recorded once", [][]string{{a}, {aOther}, {aOther}}, journal.Result{Conflicts: 1}, 1, 1},
		{"conflict in batch", [][]string{{a, aOther}}, journal.Result{Inserted: 1, Conflicts: 1, Quarantined: 1}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := testenv.NewDB(t)
			var got journal.Result
			for _, batch := range tt.batches {
				var bt journal.Batch
				for _, body := range batch {
					bt.Entries = append(bt.Entries, entry(t, body))
				}
				var err error
				got, err = journal.Ingest(context.Background(), db.Pool, bt)
				if err != nil {
					t.Fatalf("ingest: %v", err)
				}
			}
			if got != tt.want {
				t.Errorf("result = %+v, want %+v", got, tt.want)
			}
			if n := count(t, db.Pool, "SELECT count(*) FROM journal"); n != tt.journal {
				t.Errorf("journal rows = %d, want %d", n, tt.journal)
			}
			// Every journal row has its state row, written with it, as ingested.
			if n := count(t, db.Pool, `SELECT count(*) FROM journal AS j JOIN journal_state AS s ON s.id = j.id
				WHERE s.aggregate_id = j.aggregate_id AND s.sequence_no = j.sequence_no AND s.status = 'RECEIVED'
				  AND s.attempts = 0 AND s.last_error IS NULL AND s.processed_at IS NULL AND s.skipped_at IS NULL
				  AND s.next_attempt_at = j.received_at AND s.updated_at = j.received_at`); n != tt.journal {
				t.Errorf("journal rows with their state as ingested = %d, want %d", n, tt.journal)
			}
			if n := count(t, db.Pool, "SELECT count(*) FROM journal_state"); n != tt.journal {
				t.Errorf("state rows = %d, want %d (one per journal row)", n, tt.journal)
			}
			if n := count(t, db.Pool, "SELECT count(*) FROM quarantine"); n != tt.quar {
				t.Errorf("quarantine rows = %d, want %d", n, tt.quar)
			}
		})
	}
}

func TestIngestQuarantinesBadMessagesOnce(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	bad := journal.Bad{Reason: message.ReasonNotJSON, Detail: "x", Destination: "/queue/q", MessageID: "m1",
		Headers: map[string]string{"k": "v"}, Body: []byte{0xff, 0x00, 'x'}}
	for i := 0; i < 2; i++ {
		if _, err := journal.Ingest(context.Background(), db.Pool, journal.Batch{Bad: []journal.Bad{bad}}); err != nil {
			t.Fatal(err)
		}
	}
	var body []byte
	if err := db.Pool.QueryRow(context.Background(), "SELECT body FROM quarantine").Scan(&body); err != nil {
		t.Fatal(err)
	}
	if string(body) != string(bad.Body) {
		t.Errorf("body = %q, want raw bytes %q", body, bad.Body)
	}
}

func TestIngestIsolatesPayloadTheDatabaseRefuses(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	good := entry(t, `{"id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a03"}`)
	// Go's JSON decoder accepts a lone surrogate escape; PostgreSQL's jsonb does not.
	poison := entry(t, `{"id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a04","s":"\ud800"}`)
	res, err := journal.Ingest(context.Background(), db.Pool, journal.Batch{Entries: []journal.Entry{good, poison}})
	if err != nil {
		t.Fatalf("ingest: %v", err)
	}
	if res.Inserted != 1 || res.Quarantined != 1 || res.Refused != 1 {
		t.Errorf("result = %+v, want 1 inserted and 1 quarantined", res)
	}
}

// Rows are inserted in id order (against deadlocks), but sequence numbers must follow
// arrival order: that is the order of an aggregate's events.
func TestIngestSequenceFollowsArrivalOrder(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	var bt journal.Batch
	var want []string
	for i := 9; i >= 1; i-- { // ids arrive in descending order
		id := fmt.Sprintf("6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a0%d", i)
		bt.Entries = append(bt.Entries, entry(t, fmt.Sprintf(`{"id":%q,"aggregateId":"a"}`, id)))
		want = append(want, id)
	}
	if _, err := journal.Ingest(context.Background(), db.Pool, bt); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Pool.Query(context.Background(), `SELECT id::TEXT FROM journal ORDER BY sequence_no`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("sequence order %v, want arrival order %v", got, want)
	}
}

// Two batches sharing ids in opposite orders, written at once, must not deadlock.
func TestIngestConcurrentBatchesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	var fwd, rev journal.Batch
	for i := 0; i < 300; i++ {
		body := fmt.Sprintf(`{"id":"6f1c1f0e-1c3a-4c55-9a65-%012d"}`, i)
		fwd.Entries = append(fwd.Entries, entry(t, body))
		rev.Entries = append([]journal.Entry{entry(t, body)}, rev.Entries...)
	}
	for round := 0; round < 5; round++ {
		if _, err := db.Pool.Exec(context.Background(), `DELETE FROM journal`); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		for _, b := range []journal.Batch{fwd, rev} {
			go func() {
				_, err := journal.Ingest(context.Background(), db.Pool, b)
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if n := count(t, db.Pool, `SELECT count(*) FROM journal`); n != 300 {
			t.Fatalf("round %d: %d rows, want 300", round, n)
		}
	}
}

// The same id with different payloads, written at once by two transactions (two
// destinations or instances): one payload is journaled, the other is recorded as a
// conflict, however the two interleave.
func TestIngestConcurrentConflictIsRecorded(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	for round := 0; round < 10; round++ {
		id := fmt.Sprintf("6f1c1f0e-1c3a-4c55-9a65-%012d", round)
		var batches [2]journal.Batch
		for i := range batches {
			// Padding rows make the statements long enough to overlap.
			for j := 0; j < 200; j++ {
				batches[i].Entries = append(batches[i].Entries, entry(t, fmt.Sprintf(`{"id":"7f1c1f0e-1c3a-4c55-9a65-%06d%06d","p":%d}`, round, i*1000+j, i)))
			}
			batches[i].Entries = append(batches[i].Entries, entry(t, fmt.Sprintf(`{"id":%q,"writer":%d}`, id, i)))
		}
		results := make(chan journal.Result, 2)
		for _, b := range batches {
			go func() {
				res, err := journal.Ingest(context.Background(), db.Pool, b)
				if err != nil {
					t.Error(err)
				}
				results <- res
			}()
		}
		conflicts := 0
		for range 2 {
			conflicts += (<-results).Conflicts
		}
		if conflicts != 1 {
			t.Errorf("round %d: %d conflicts reported, want 1", round, conflicts)
		}
		var n int
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM quarantine WHERE event_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("round %d: %d conflict rows in quarantine, want 1", round, n)
		}
	}
}

// A bad message whose headers the database could not store as they are is still
// quarantined, with its body intact.
func TestIngestQuarantinesUnstorableHeaders(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	bad := journal.Bad{Reason: message.ReasonInvalidHeader, Detail: "bad \x00 detail", Destination: "/queue/q",
		MessageID: "id-\xff", Headers: map[string]string{"event-type": "a\x00b", "k\x00": "\xfe"}, Body: []byte("raw\x00body")}
	res, err := journal.Ingest(context.Background(), db.Pool, journal.Batch{Bad: []journal.Bad{bad}})
	if err != nil {
		t.Fatalf("ingest: %v", err)
	}
	if res.Quarantined != 1 {
		t.Fatalf("quarantined %d, want 1", res.Quarantined)
	}
	var body []byte
	if err := db.Pool.QueryRow(context.Background(), `SELECT body FROM quarantine`).Scan(&body); err != nil {
		t.Fatal(err)
	}
	if string(body) != string(bad.Body) {
		t.Errorf("body %q, want the raw bytes %q", body, bad.Body)
	}
}

// A re-injected message that is still bad is quarantined again, visibly: its row loses
// reinjected_at, so the operator does not see "re-injected" for a message that failed.
func TestIngestRequarantinesReinjectedMessage(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	bad := journal.Bad{Reason: message.ReasonNotJSON, Detail: "x", Destination: "/queue/q", Body: []byte("nope")}
	batch := journal.Batch{Bad: []journal.Bad{bad, bad}} // twice in one batch, too
	if _, err := journal.Ingest(context.Background(), db.Pool, batch); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(context.Background(), `UPDATE quarantine SET reinjected_at = now()`); err != nil {
		t.Fatal(err)
	}
	res, err := journal.Ingest(context.Background(), db.Pool, batch)
	if err != nil {
		t.Fatal(err)
	}
	if res.Quarantined != 1 {
		t.Errorf("quarantined %d, want 1 (the re-injected message, again)", res.Quarantined)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM quarantine WHERE reinjected_at IS NULL`); n != 1 {
		t.Errorf("%d rows without reinjected_at, want 1", n)
	}
	// Redelivered again before any re-injection: nothing changes.
	if res, err := journal.Ingest(context.Background(), db.Pool, batch); err != nil || res.Quarantined != 0 {
		t.Errorf("redelivery: %+v, %v; want nothing new", res, err)
	}
}

// An id conflict is quarantined once per redelivery of the same message, and again,
// visibly, when the operator re-injects it and it still conflicts.
func TestIngestRequarantinesReinjectedConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	const id = "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0c01"
	if _, err := journal.Ingest(ctx, db.Pool, journal.Batch{Entries: []journal.Entry{entry(t, `{"id":"`+id+`","v":1}`)}}); err != nil {
		t.Fatal(err)
	}
	conflicting := journal.Batch{Entries: []journal.Entry{entry(t, `{"id":"`+id+`","v":2}`), entry(t, `{"id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0c02"}`)}}
	for _, step := range []struct {
		name                   string
		reinject               bool
		conflicts, quarantined int
	}{
		{"first delivery", false, 1, 1},
		{"redelivery", false, 1, 0},
		{"re-injected", true, 1, 1},
	} {
		if step.reinject {
			if _, err := db.Pool.Exec(ctx, `UPDATE quarantine SET reinjected_at = now()`); err != nil {
				t.Fatal(err)
			}
		}
		res, err := journal.Ingest(ctx, db.Pool, conflicting)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if res.Conflicts != step.conflicts || res.Quarantined != step.quarantined {
			t.Errorf("%s: %+v, want %d conflicts and %d quarantined", step.name, res, step.conflicts, step.quarantined)
		}
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM quarantine WHERE reason = 'id_conflict' AND event_id = '`+id+`' AND reinjected_at IS NULL`); n != 1 {
		t.Errorf("%d visible id_conflict rows, want 1", n)
	}
}
