package journal_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/schema"
)

// Findings 3 and 4 of issue 9: a batch draws one sequence value and numbers its rows by
// arrival order, whatever the planner does and whatever the id order.
func TestIngestDrawsOneSequenceValuePerBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	rng := rand.New(rand.NewSource(1))
	var firsts []int64
	for batch := 0; batch < 3; batch++ {
		var bt journal.Batch
		var want []string
		for i := 0; i < 300; i++ {
			id := fmt.Sprintf("%08x-1c3a-4c55-9a65-%012d", rng.Uint32(), batch*1000+i) // random id order
			bt.Entries = append(bt.Entries, entry(t, fmt.Sprintf(`{"id":%q,"aggregateId":"agg"}`, id)))
			want = append(want, id)
		}
		if _, err := journal.Ingest(ctx, db.Pool, bt); err != nil {
			t.Fatal(err)
		}
		rows, err := db.Pool.Query(ctx, `SELECT id::TEXT, sequence_no FROM journal WHERE id = ANY ($1::UUID[]) ORDER BY sequence_no`, want)
		if err != nil {
			t.Fatal(err)
		}
		type row struct {
			ID  string
			Seq int64
		}
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range got {
			if r.ID != want[i] {
				t.Fatalf("batch %d: row %d by sequence_no is %s, want %s (arrival order)", batch, i, r.ID, want[i])
			}
			if r.Seq != got[0].Seq+int64(i) {
				t.Fatalf("batch %d: sequence numbers not first+ord-1: row %d has %d, first %d", batch, i, r.Seq, got[0].Seq)
			}
		}
		firsts = append(firsts, got[0].Seq)
	}
	for i := 1; i < len(firsts); i++ {
		if d := firsts[i] - firsts[i-1]; d != journal.SequenceBlock {
			t.Errorf("batch %d starts %d after the previous one, want one sequence block (%d): more than one nextval per batch", i, d, journal.SequenceBlock)
		}
	}
}

func TestIngestRefusesBatchLargerThanBlock(t *testing.T) {
	t.Parallel()
	bt := journal.Batch{Entries: make([]journal.Entry, journal.SequenceBlock+1)}
	if _, err := journal.Ingest(context.Background(), nil, bt); err == nil || !strings.Contains(err.Error(), "sequence block") {
		t.Fatalf("Ingest of %d entries = %v, want ErrBatchTooLarge", len(bt.Entries), err)
	}
}

// Retention deletes old PROCESSED and REJECTED entries only, in bounded batches, and old
// quarantine rows.
func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	ids := ingestN(t, db.Pool, 12, "agg")
	statuses := []journal.Status{journal.StatusReceived, journal.StatusProcessed, journal.StatusFailed, journal.StatusDead, journal.StatusRejected, journal.StatusProcessed}
	// ids[0:6] are old, ids[6:12] recent; one of each status in both halves.
	for i, id := range ids {
		age := time.Hour
		if i >= 6 {
			age = time.Second
		}
		if _, err := db.Pool.Exec(ctx, `UPDATE journal_state SET status = $2, updated_at = now() - $3::INT8 * INTERVAL '1 millisecond' WHERE id = $1::UUID`,
			id, statuses[i%6], age.Milliseconds()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO quarantine (id, reason, destination, body, received_at) VALUES
		('00000000-0000-4000-8000-000000000001', 'not_json', '/q', 'x', now() - INTERVAL '2 hours'),
		('00000000-0000-4000-8000-000000000002', 'not_json', '/q', 'y', now())`); err != nil {
		t.Fatal(err)
	}
	// Batches of 2: the three old terminal entries take two statements.
	n, err := journal.PruneJournal(ctx, db.Pool, time.Minute, 2)
	if err != nil || n != 2 {
		t.Fatalf("first PruneJournal = %d, %v; want 2 (the batch bound)", n, err)
	}
	if n, err = journal.PruneJournal(ctx, db.Pool, time.Minute, 2); err != nil || n != 1 {
		t.Fatalf("second PruneJournal = %d, %v; want 1", n, err)
	}
	if n, err = journal.PruneJournal(ctx, db.Pool, time.Minute, 2); err != nil || n != 0 {
		t.Fatalf("third PruneJournal = %d, %v; want 0", n, err)
	}
	for i, id := range ids {
		// An entry is its journal row and its state row: both stay or both go.
		var entries, states int
		err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM journal WHERE id = $1::UUID),
			(SELECT count(*) FROM journal_state WHERE id = $1::UUID)`, id).Scan(&entries, &states)
		if err != nil {
			t.Fatal(err)
		}
		if entries != states {
			t.Errorf("entry %d: %d journal rows, %d state rows", i, entries, states)
		}
		gone := entries == 0
		wantGone := i < 6 && (statuses[i%6] == journal.StatusProcessed || statuses[i%6] == journal.StatusRejected)
		if gone != wantGone {
			t.Errorf("entry %d (%s, old=%v): deleted=%v, want %v", i, statuses[i%6], i < 6, gone, wantGone)
		}
	}
	if n, err := journal.PruneQuarantine(ctx, db.Pool, time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("PruneQuarantine = %d, %v; want 1", n, err)
	}
	if got := count(t, db.Pool, `SELECT count(*) FROM quarantine`); got != 1 {
		t.Errorf("quarantine holds %d rows, want the recent one", got)
	}
}

// The pruner's statement must use the partial index, not scan the journal.
func TestPruneUsesIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	ingestN(t, db.Pool, 50, "agg")
	if _, err := db.Pool.Exec(ctx, `ANALYZE journal_state`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN SELECT id FROM journal_state WHERE status IN ('PROCESSED', 'REJECTED')
		AND updated_at < now() - 1000 * INTERVAL '1 millisecond' ORDER BY updated_at LIMIT 1000`)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(plan, "\n"), "journal_state_terminal") {
		t.Errorf("plan does not use journal_state_terminal:\n%s", strings.Join(plan, "\n"))
	}
}

// The migration's increment and SequenceBlock must agree, or batches would overlap.
func TestSequenceBlockMatchesMigration(t *testing.T) {
	t.Parallel()
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("ALTER SEQUENCE journal_sequence_no INCREMENT BY %d;", journal.SequenceBlock)
	for _, m := range migs {
		if strings.Contains(m.SQL, want) {
			return
		}
	}
	t.Errorf("no migration says %q", want)
}

// Issue 18, item 7: the attempt history is covered by retention: pruning an entry
// deletes its attempts, and only its.
func TestPruneJournalDeletesAttemptHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	old := "6f1c1f0e-1c3a-4c55-9a65-000000000001"
	kept := "6f1c1f0e-1c3a-4c55-9a65-000000000002"
	var b journal.Batch
	for _, id := range []string{old, kept} {
		b.Entries = append(b.Entries, entry(t, fmt.Sprintf(`{"id":%q}`, id)))
	}
	if _, err := journal.Ingest(ctx, db.Pool, b); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := journal.Settle(ctx, tx, []journal.Outcome{
		{ID: old, Status: journal.StatusProcessed, StartedAt: time.Now(), Took: time.Millisecond, Runs: 1},
		{ID: kept, Status: journal.StatusFailed, Error: "down", Backoff: time.Hour},
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{old, kept} {
		if a, err := journal.Attempts(ctx, db.Pool, id); err != nil || len(a) != 1 || a[0].Attempt != 1 {
			t.Fatalf("attempts of %s before pruning: %+v, %v", id, a, err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE journal_state SET updated_at = now() - INTERVAL '2 hours' WHERE id = $1`, old); err != nil {
		t.Fatal(err)
	}
	n, err := journal.PruneJournal(ctx, db.Pool, time.Hour, 100)
	if err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want 1", n, err)
	}
	if a, _ := journal.Attempts(ctx, db.Pool, old); len(a) != 0 {
		t.Errorf("the pruned entry's %d attempts are left", len(a))
	}
	if a, _ := journal.Attempts(ctx, db.Pool, kept); len(a) != 1 || a[0].Outcome != "FAILED" || a[0].Error == nil || *a[0].Error != "down" {
		t.Errorf("the kept entry's attempts: %+v", a)
	}
}
