package journal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
)

func ingestN(t *testing.T, db database.DB, n int, agg string) []string {
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

func TestClaimHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	ids := ingestN(t, db.Pool, 4, "a")
	other := ingestN(t, db.Pool, 2, "bb")
	// a: a due FAILED head; bb: a FAILED head not yet due.
	if _, err := db.Pool.Exec(ctx, `UPDATE journal_state SET status = 'FAILED', next_attempt_at = now() - INTERVAL '1 second' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE journal_state SET status = 'FAILED', next_attempt_at = now() + INTERVAL '1 hour' WHERE id = $1`, other[0]); err != nil {
		t.Fatal(err)
	}
	sync := func() {
		t.Helper()
		if err := journal.SyncHeads(ctx, db.Pool, []string{"a", "bb"}); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	heads := func(grace time.Duration) []string {
		t.Helper()
		got, err := journal.ClaimHeads(ctx, db.Pool, db.Pool, grace, 100, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range got {
			out = append(out, d.ID)
		}
		return out
	}
	// Only heads: the rest of each aggregate waits for its predecessor.
	if got := heads(0); len(got) != 1 || got[0] != ids[0] {
		t.Errorf("heads = %v, want only %s", got, ids[0])
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE journal_state SET status = 'PROCESSED' WHERE id = ANY ($1::UUID[])`, []string{ids[0], other[0]}); err != nil {
		t.Fatal(err)
	}
	sync()
	if got := heads(0); len(got) != 2 || got[0] == got[1] {
		t.Errorf("heads = %v, want the next of each aggregate", got)
	}
	// Inside the grace period RECEIVED rows are left to the feed.
	if got := heads(time.Hour); len(got) != 0 {
		t.Errorf("heads with grace = %v, want none", got)
	}
	// A row another transaction holds is skipped, not waited for: that lock is its claim.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, found, err := journal.LockPending(ctx, tx, ids[1]); err != nil || !found {
		t.Fatalf("lock: %v, %v", found, err)
	}
	if got := heads(0); len(got) != 1 || got[0] != other[1] {
		t.Errorf("heads with %s locked = %v, want only %s", ids[1], got, other[1])
	}
}

func TestLockPendingAndTransitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	ids := ingestN(t, db.Pool, 3, "agg")
	p, found, err := journal.LockPending(ctx, db.Pool, ids[1])
	if err != nil || !found || p.Status != "RECEIVED" || !p.Due || p.AggregateID != "agg" {
		t.Fatalf("LockPending = %+v, %v, %v", p, found, err)
	}
	head := func() []string {
		t.Helper()
		got, err := journal.ClaimHeads(ctx, db.Pool, db.Pool, 0, 10, []string{"agg"})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range got {
			out = append(out, h.ID)
		}
		return out
	}
	if got := head(); len(got) != 1 || got[0] != ids[0] {
		t.Fatalf("head of agg = %v, want %s (its predecessor pending blocks %s)", got, ids[0], ids[1])
	}
	record := func(o journal.Outcome) {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // an error once committed
		if _, err := journal.Settle(ctx, tx, []journal.Outcome{o}, []string{"agg"}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	record(journal.Outcome{ID: ids[0], Status: journal.StatusDead, Error: "x"})
	if err := journal.SyncHeads(ctx, db.Pool, []string{"agg"}); err != nil {
		t.Fatal(err)
	}
	if got := head(); len(got) != 0 {
		t.Errorf("head of agg after its first is DEAD = %v, want none: a DEAD head parks its aggregate", got)
	}
	if _, err := journal.Skip(ctx, db.Pool, ids[0], "tester"); err != nil {
		t.Fatal(err)
	}
	if err := journal.SyncHeads(ctx, db.Pool, []string{"agg"}); err != nil {
		t.Fatal(err)
	}
	if got := head(); len(got) != 1 || got[0] != ids[1] {
		t.Errorf("head of agg after its DEAD first was skipped = %v, want %s", got, ids[1])
	}
	record(journal.Outcome{ID: ids[1], Status: journal.StatusFailed, Error: "boom", Backoff: time.Hour})
	if p, _, _ := journal.LockPending(ctx, db.Pool, ids[1]); p.Status != journal.StatusFailed || p.Due || p.Attempts != 1 {
		t.Errorf("after a FAILED outcome: %+v", p)
	}
	record(journal.Outcome{ID: ids[1], Status: journal.StatusProcessed})
	if _, found, _ := journal.LockPending(ctx, db.Pool, ids[1]); found {
		t.Error("PROCESSED entry is still pending")
	}
}

func TestRowsAsJSON(t *testing.T) {
	t.Parallel()
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
