package journal_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
)

// singleSession is a pool of one connection: pg_prepared_statements is per session.
func singleSession(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return testenv.NewDB(t).OpenPool(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
}

// Ingest's statement is planned for the journal as it is at each batch: never prepared
// under a name, so PostgreSQL cannot settle on a generic plan made while the journal was
// small and keep it while the journal grows (until the next ANALYZE). That plan
// hash-joined a scan of the whole journal in every batch: in a fresh database at 3,000
// msg/s, ingest's statement read 1,100–2,200 blocks per batch instead of about 800.
// The control statement shows that the check sees what pgx prepares by default.
func TestIngestIsNotPreparedGenerically(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := singleSession(t)
	for i := range 7 { // PostgreSQL may go generic from the sixth execution
		b := journal.Batch{Entries: []journal.Entry{entry(t, fmt.Sprintf(`{"id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0b%02d"}`, i))}}
		if _, err := journal.Ingest(ctx, pool, b); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM journal WHERE sequence_no > $1`, int64(i)).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	prepared := func(like string) int { // the pattern as a parameter: not in the check's own text
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE $1`, like).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := prepared("%FROM journal WHERE sequence_no > $1%"); n != 1 {
		t.Fatalf("the control statement is prepared %d times, want 1: the check cannot see prepared statements", n)
	}
	if n := prepared("%WITH input AS%INSERT INTO journal%"); n != 0 {
		t.Errorf("ingest's statement is prepared (%d): PostgreSQL may plan it generically and keep that plan", n)
	}
}

// The outcome UPDATE and the attempt INSERT of every batch get a custom plan, made for
// the journal as it is, however many times the connection ran them; the statements
// after them in the transaction (a handler's, the heads') are back to the session's
// plan_cache_mode. A generic plan made while the journal was small scanned it whole in
// every batch once it had grown (see customPlansSQL).
func TestOutcomesArePlannedForTheJournalAsItIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := singleSession(t)
	const runs = 8 // PostgreSQL may go generic from the sixth execution
	for i := range runs {
		id := fmt.Sprintf("6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0c%02d", i)
		if _, err := journal.Ingest(ctx, pool, journal.Batch{Entries: []journal.Entry{entry(t, fmt.Sprintf(`{"id":%q}`, id))}}); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// FAILED: a first-run PROCESSED attempt writes no history row (journal.historyOf).
		if err := journal.RecordOutcomesGuarded(ctx, tx, []journal.Outcome{{ID: id, Status: journal.StatusFailed, Error: "down"}}); err != nil {
			t.Fatal(err)
		}
		var mode string
		if err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if mode != "auto" {
			t.Fatalf("plan_cache_mode after the outcomes = %q, want auto again", mode)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, like := range []string{"%UPDATE journal AS j%SET status%", "%INSERT INTO journal_attempt%"} {
		var generic, custom int64
		if err := pool.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE $1`, like).
			Scan(&generic, &custom); err != nil {
			t.Fatalf("%s: %v", like, err)
		}
		if generic != 0 || custom != runs {
			t.Errorf("%s: %d generic and %d custom plans in %d runs, want only custom ones", like, generic, custom, runs)
		}
	}
}
