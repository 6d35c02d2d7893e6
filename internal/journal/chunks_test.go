package journal_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/txstats"
)

// A claim whose picked heads other workers hold nearly all of sends a bounded number of
// lock statements, then runs with what it locked: asking for the few heads still
// missing, a chunk at a time, took up to 55 round trips in one e2e-max transaction,
// each with the batch's locks held.
func TestClaimStopsAfterAFewChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	const limit = 10
	var b journal.Batch
	for i := range 4 * limit {
		b.Entries = append(b.Entries, goodEntry(t, i+1))
	}
	if _, err := journal.Ingest(ctx, db.Pool, b); err != nil {
		t.Fatal(err)
	}
	picked, err := journal.PickHeads(ctx, db.Pool, 0, limit, nil)
	if err != nil || len(picked) != 4*limit {
		t.Fatalf("picked %d heads, want %d: %v", len(picked), 4*limit, err)
	}
	other, err := db.Pool.Begin(ctx) // another worker: holds all but the first
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	if _, err := other.Exec(ctx, `SELECT 1 FROM journal_state WHERE id = ANY ($1::UUID[]) FOR UPDATE`, picked[1:]); err != nil {
		t.Fatal(err)
	}
	tracer := &txstats.Tracer{}
	pool := db.OpenPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer })
	tctx := txstats.Start(ctx)
	tx, err := pool.Begin(tctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	got, err := journal.LockPicked(tctx, tx, picked, 0, limit, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != picked[0] {
		t.Fatalf("locked %v, want only the first picked head", got)
	}
	if err := tx.Commit(tctx); err != nil {
		t.Fatal(err)
	}
	if c := tracer.Counts(); c.Transactions != 1 || c.RoundTrips > 4 {
		t.Errorf("the claim sent %d lock statements in %d transactions, want at most 4 in 1", c.RoundTrips, c.Transactions)
	}
}
