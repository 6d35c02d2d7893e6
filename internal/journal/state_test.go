package journal_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
)

// noDrift fails t unless journal_state mirrors the journal's state (journal.MirrorDrift).
func noDrift(t *testing.T, db database.DB) {
	t.Helper()
	n, err := journal.MirrorDrift(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("journal_state drifts from the journal in %d rows", n)
	}
}

// mirrorRaw copies the state of the given journal rows into journal_state: a test's
// own UPDATE of the journal stands for a write of the engine's, which mirrors it.
func mirrorRaw(t *testing.T, db database.DB, ids ...string) {
	t.Helper()
	if _, err := journal.MirrorState(context.Background(), db, ids); err != nil {
		t.Fatal(err)
	}
}

// settle records outcomes of aggregate agg in one transaction, as the engine does.
func settle(t *testing.T, db database.DB, agg string, outcomes ...journal.Outcome) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // an error once committed
	if _, err := journal.Settle(ctx, tx, outcomes, []string{agg}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// Every write of a journal entry's state is mirrored into journal_state in the same
// statement (the state move's expand step), and MirrorDrift sees a write that is not.
func TestMirrorDrift(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dead := func(id string) journal.Outcome {
		return journal.Outcome{ID: id, Status: journal.StatusDead, Error: "bad", Took: time.Millisecond}
	}
	tests := []struct {
		name string
		run  func(t *testing.T, db database.DB, ids []string)
		want int64
	}{
		{"ingest only", func(*testing.T, database.DB, []string) {}, 0},
		{"settle every outcome", func(t *testing.T, db database.DB, ids []string) {
			settle(t, db, "agg",
				journal.Outcome{ID: ids[0], Status: journal.StatusProcessed, Took: time.Millisecond},
				journal.Outcome{ID: ids[1], Status: journal.StatusRejected, Error: "no", Runs: 2},
				journal.Outcome{ID: ids[2], Status: journal.StatusFailed, Error: "later", Backoff: time.Hour},
				journal.Outcome{ID: ids[3], Status: journal.StatusDead, Error: "bad", SkipDead: true})
			settle(t, db, "agg", dead(ids[4]))
		}, 0},
		{"skip", func(t *testing.T, db database.DB, ids []string) {
			settle(t, db, "agg", dead(ids[0]))
			if _, err := journal.Skip(ctx, db, ids[0], "tester"); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"retry one", func(t *testing.T, db database.DB, ids []string) {
			settle(t, db, "agg", dead(ids[0]))
			if _, err := journal.RetryOne(ctx, db, ids[0]); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"requeue", func(t *testing.T, db database.DB, ids []string) {
			settle(t, db, "agg", dead(ids[0]), journal.Outcome{ID: ids[1], Status: journal.StatusProcessed})
			if _, err := journal.Requeue(ctx, db, journal.Filter{}, journal.Retry); err != nil {
				t.Fatal(err)
			}
			if _, err := journal.Requeue(ctx, db, journal.Filter{}, journal.Replay); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"edit and retry", func(t *testing.T, db database.DB, ids []string) {
			settle(t, db, "agg", dead(ids[0]))
			if _, _, err := journal.EditAndRetry(ctx, db, ids[0], journal.EditRequest{
				Payload: []byte(`{"id":"` + ids[0] + `","aggregateId":"agg","fixed":true}`), By: "tester", MaxBytes: 1024}); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"wake no handler", func(t *testing.T, db database.DB, ids []string) {
			settle(t, db, "agg", journal.Outcome{ID: ids[0], Status: journal.StatusFailed, Error: journal.NoHandlerError + " x", Backoff: time.Hour})
			if n, err := journal.WakeNoHandler(ctx, db, []string{"registration"}); err != nil || n != 1 {
				t.Fatalf("WakeNoHandler = %d, %v; want 1", n, err)
			}
		}, 0},
		{"prune", func(t *testing.T, db database.DB, ids []string) {
			settle(t, db, "agg", journal.Outcome{ID: ids[0], Status: journal.StatusProcessed}, journal.Outcome{ID: ids[1], Status: journal.StatusProcessed})
			if _, err := db.Exec(ctx, `UPDATE journal SET updated_at = now() - INTERVAL '1 hour' WHERE id = ANY ($1::UUID[])`, ids[:2]); err != nil {
				t.Fatal(err)
			}
			mirrorRaw(t, db, ids[:2]...)
			if n, err := journal.PruneJournal(ctx, db, time.Minute, 10); err != nil || n != 2 {
				t.Fatalf("PruneJournal = %d, %v; want 2", n, err)
			}
		}, 0},
		{"bench seeds", func(t *testing.T, db database.DB, _ []string) {
			if _, err := db.Exec(ctx, `TRUNCATE journal, aggregate_head`); err != nil {
				t.Fatal(err)
			}
			if err := journal.SeedBlocked(ctx, db, 2, 5); err != nil {
				t.Fatal(err)
			}
			if err := journal.SeedSettled(ctx, db, 5); err != nil {
				t.Fatal(err)
			}
			if err := journal.SeedExpired(ctx, db, 5, time.Hour); err != nil {
				t.Fatal(err)
			}
		}, 0},
		// The check itself: a write that is not mirrored, and a state row of no entry.
		{"an unmirrored write is drift", func(t *testing.T, db database.DB, ids []string) {
			settle(t, db, "agg", journal.Outcome{ID: ids[0], Status: journal.StatusProcessed})
			if _, err := db.Exec(ctx, `UPDATE journal SET attempts = 7 WHERE id = ANY ($1::UUID[])`, ids[:2]); err != nil {
				t.Fatal(err)
			}
		}, 2},
		{"a state row of no entry is drift", func(t *testing.T, db database.DB, _ []string) {
			if _, err := db.Exec(ctx, `INSERT INTO journal_state (id, aggregate_id, sequence_no) VALUES (gen_random_uuid(), 'x', 1)`); err != nil {
				t.Fatal(err)
			}
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := testenv.NewDB(t)
			ids := ingestN(t, db.Pool, 5, "agg")
			tt.run(t, db.Pool, ids)
			got, err := journal.MirrorDrift(ctx, db.Pool)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("MirrorDrift = %d, want %d", got, tt.want)
			}
		})
	}
}

// Retention deletes an entry's journal_state row with the entry.
func TestPruneDeletesState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	ids := ingestN(t, db.Pool, 3, "agg")
	settle(t, db.Pool, "agg", journal.Outcome{ID: ids[0], Status: journal.StatusProcessed}, journal.Outcome{ID: ids[1], Status: journal.StatusRejected, Error: "no"})
	if _, err := db.Pool.Exec(ctx, `UPDATE journal SET updated_at = now() - INTERVAL '1 hour' WHERE id = ANY ($1::UUID[])`, ids[:2]); err != nil {
		t.Fatal(err)
	}
	mirrorRaw(t, db.Pool, ids[:2]...)
	if n, err := journal.PruneJournal(ctx, db.Pool, time.Minute, 1); err != nil || n != 1 {
		t.Fatalf("PruneJournal = %d, %v; want 1 (the batch bound)", n, err)
	}
	if n, err := journal.PruneJournal(ctx, db.Pool, time.Minute, 1); err != nil || n != 1 {
		t.Fatalf("PruneJournal = %d, %v; want 1", n, err)
	}
	for _, id := range ids[:2] {
		var one int
		if err := db.Pool.QueryRow(ctx, `SELECT 1 FROM journal_state WHERE id = $1::UUID`, id).Scan(&one); err != pgx.ErrNoRows {
			t.Errorf("journal_state row of pruned entry %s: %v, want none", id, err)
		}
	}
	noDrift(t, db.Pool)
}
