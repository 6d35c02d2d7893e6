package journal_test

import (
	"context"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
)

func TestOldestWaiting(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	exec := func(sql string) { // behind inboxd's back, so the heads are rebuilt after
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if err := journal.RebuildHeads(ctx, db.Pool); err != nil {
			t.Fatal(err)
		}
	}
	wait := func() time.Duration {
		t.Helper()
		d, err := journal.OldestWaiting(ctx, db.Pool, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := wait(); d != 0 {
		t.Fatalf("empty journal: %s, want 0", d)
	}
	if _, err := journal.Ingest(ctx, db.Pool, journal.Batch{Entries: []journal.Entry{goodEntry(t, 1), goodEntry(t, 2)}}); err != nil {
		t.Fatal(err)
	}
	if d := wait(); d != 0 {
		t.Fatalf("fresh events: %s, want 0 (younger than minAge)", d)
	}
	exec(`UPDATE journal SET received_at = now() - INTERVAL '1 minute'`)
	exec(`UPDATE journal_state SET next_attempt_at = now() - INTERVAL '1 minute'`)
	if d := wait(); d < 59*time.Second || d > 2*time.Minute {
		t.Fatalf("events a minute old: %s, want about 1m", d)
	}
	// A FAILED event due a minute ago has waited since then.
	exec(`UPDATE journal SET received_at = now() - INTERVAL '1 hour'`)
	exec(`UPDATE journal_state SET status = 'FAILED', next_attempt_at = now() - INTERVAL '30 seconds'`)
	if d := wait(); d < 29*time.Second || d > time.Minute {
		t.Fatalf("FAILED events due 30 s ago: %s, want about 30s", d)
	}
	exec(`UPDATE journal SET received_at = now() - INTERVAL '1 minute'`)
	exec(`UPDATE journal_state SET status = 'RECEIVED', next_attempt_at = now() - INTERVAL '1 minute'`)
	// A FAILED event retried later holds its aggregate's successors: waiting by design.
	exec(`UPDATE journal SET aggregate_id = 'a'`)
	exec(`UPDATE journal_state SET aggregate_id = 'a'`)
	exec(`UPDATE journal_state SET status = 'FAILED', next_attempt_at = now() + INTERVAL '1 hour' WHERE sequence_no = (SELECT min(sequence_no) FROM journal_state)`)
	if d := wait(); d != 0 {
		t.Fatalf("successor of a FAILED event due later: %s, want 0", d)
	}
	// A DEAD head parks its aggregate: its successors wait for an operator, by design.
	exec(`UPDATE journal_state SET status = 'DEAD' WHERE sequence_no = (SELECT min(sequence_no) FROM journal_state)`)
	if d := wait(); d != 0 {
		t.Fatalf("successor of a DEAD event: %s, want 0", d)
	}
	exec(`UPDATE journal_state SET status = 'PROCESSED'`)
	if d := wait(); d != 0 {
		t.Fatalf("all processed: %s, want 0", d)
	}
}
