package journal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
)

func ingestN(t *testing.T, db journal.DB, n int, agg string) []string {
	t.Helper()
	var b journal.Batch
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("6f1c1f0e-1c3a-4c55-9a65-%012d", len(agg)*1000+i)
		b.Entries = append(b.Entries, entry(t, fmt.Sprintf(`{"id":%q,"aggregateId":%q}`, id, agg)))
		ids = append(ids, id)
	}
	if _, err := journal.Ingest(context.Background(), db, b); err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestClaimDue(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	ids := ingestN(t, db.Pool, 10, "a")
	// Two FAILED rows, one due and one not.
	if _, err := db.Pool.Exec(ctx, `UPDATE journal SET status = 'FAILED', next_attempt_at = now() - INTERVAL '1 second' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE journal SET status = 'FAILED', next_attempt_at = now() + INTERVAL '1 hour' WHERE id = $1`, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE journal SET status = 'PROCESSED' WHERE id = $1`, ids[2]); err != nil {
		t.Fatal(err)
	}

	// Inside the grace period only the due retry is claimed.
	got, err := journal.ClaimDue(ctx, db.Pool, time.Hour, time.Minute, 100)
	if err != nil || len(got) != 1 || got[0].ID != ids[0] || got[0].Status != "FAILED" || got[0].AggregateID != "a" {
		t.Fatalf("claim with grace = %+v, %v; want only %s", got, err, ids[0])
	}
	// Claimed rows are leased: a second claim (another instance) skips them.
	got, err = journal.ClaimDue(ctx, db.Pool, 0, time.Minute, 4)
	if err != nil || len(got) != 4 {
		t.Fatalf("claim = %d, %v; want 4", len(got), err)
	}
	seen := map[string]bool{ids[0]: true}
	for _, c := range got {
		if seen[c.ID] || c.Status != "RECEIVED" {
			t.Errorf("claimed %+v twice or wrong status", c)
		}
		seen[c.ID] = true
	}
	// A row locked by an in-flight transaction is skipped, not waited for.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var locked string
	if err := tx.QueryRow(ctx, `SELECT id::TEXT FROM journal WHERE status = 'RECEIVED' AND next_attempt_at <= now() ORDER BY sequence_no LIMIT 1 FOR UPDATE`).Scan(&locked); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err = journal.ClaimDue(cctx, db.Pool, 0, time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 { // 10 - processed - not-due - 5 leased - 1 locked
		t.Errorf("claimed %d, want 2", len(got))
	}
	for _, c := range got {
		if c.ID == locked || seen[c.ID] {
			t.Errorf("claimed %s again", c.ID)
		}
	}
}

func TestLockPendingAndTransitions(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	ids := ingestN(t, db.Pool, 3, "agg")
	p, found, err := journal.LockPending(ctx, db.Pool, ids[1])
	if err != nil || !found || p.Status != "RECEIVED" || !p.Due || p.AggregateID != "agg" {
		t.Fatalf("LockPending = %+v, %v, %v", p, found, err)
	}
	blocked, err := journal.HasPendingPredecessor(ctx, db.Pool, "agg", p.SequenceNo)
	if err != nil || !blocked {
		t.Fatalf("predecessor pending = %v, %v; want true", blocked, err)
	}
	if err := journal.MarkDead(ctx, db.Pool, ids[0], "x"); err != nil {
		t.Fatal(err)
	}
	if blocked, _ := journal.HasPendingPredecessor(ctx, db.Pool, "agg", p.SequenceNo); blocked {
		t.Error("a DEAD predecessor blocks")
	}
	next, ok, err := journal.NextPendingInAggregate(ctx, db.Pool, "agg")
	if err != nil || !ok || next != ids[1] {
		t.Errorf("next pending = %s, %v, %v; want %s", next, ok, err, ids[1])
	}
	if err := journal.MarkFailed(ctx, db.Pool, ids[1], "boom", time.Hour); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := journal.LockPending(ctx, db.Pool, ids[1]); p.Status != "FAILED" || p.Due || p.Attempts != 1 {
		t.Errorf("after MarkFailed: %+v", p)
	}
	if err := journal.MarkProcessed(ctx, db.Pool, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := journal.LockPending(ctx, db.Pool, ids[1]); found {
		t.Error("PROCESSED entry is still pending")
	}
	if err := journal.MarkRejected(ctx, db.Pool, "6f1c1f0e-1c3a-4c55-9a65-999999999999", "x"); err == nil {
		t.Error("transition of a missing entry succeeded")
	}
}

func TestRowsAsJSON(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	ids := ingestN(t, db.Pool, 3, "a")
	rows, err := journal.RowsAsJSON(ctx, db.Pool, ids[1:2])
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows = %d, %v", len(rows), err)
	}
	var r map[string]any
	if err := json.Unmarshal(rows[0], &r); err != nil {
		t.Fatal(err)
	}
	if r["id"] != ids[1] || r["status"] != "RECEIVED" || r["aggregate_id"] != "a" {
		t.Errorf("row = %v", r)
	}
	if _, ok := r["payload"].(map[string]any); !ok {
		t.Errorf("payload is %T, want a nested object", r["payload"])
	}
	all, err := journal.RowsAsJSON(ctx, db.Pool, nil)
	if err != nil || len(all) != 3 {
		t.Errorf("all rows = %d, %v", len(all), err)
	}
}
