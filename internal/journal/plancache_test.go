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

// Ingest's statement runs from its generic plan, prepared once per connection, and is
// never planned per batch: at 1,000 msg/s, a batch of a few messages spent 44% of the
// statement's time planning it. Inside a transaction, plan_cache_mode and
// enable_seqscan are the session's again after it. The control statement shows that
// the check sees what pgx prepares. TestIngestPlanReadsTheJournalByKey shows that the
// plan cannot go stale as the journal grows.
func TestIngestRunsFromItsGenericPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := singleSession(t)
	const runs = 7
	for i := range runs {
		b := journal.Batch{Entries: []journal.Entry{entry(t, fmt.Sprintf(`{"id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0b%02d"}`, i))}}
		if _, err := journal.Ingest(ctx, pool, b); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM journal WHERE sequence_no > $1`, int64(i)).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	b := journal.Batch{Entries: []journal.Entry{entry(t, `{"id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0bff"}`)}}
	if _, err := journal.Ingest(ctx, tx, b); err != nil {
		t.Fatal(err)
	}
	var mode, seqscan string
	if err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan')`).Scan(&mode, &seqscan); err != nil {
		t.Fatal(err)
	}
	if mode != "auto" || seqscan != "on" {
		t.Errorf("after Ingest in a transaction plan_cache_mode = %q and enable_seqscan = %q, want auto and on again", mode, seqscan)
	}
	plans := func(like string) (n int, generic, custom int64) {
		if err := tx.QueryRow(ctx, `SELECT count(*), coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)
			FROM pg_prepared_statements WHERE statement LIKE $1`, like).Scan(&n, &generic, &custom); err != nil {
			t.Fatal(err)
		}
		return n, generic, custom
	}
	if n, _, _ := plans("%FROM journal WHERE sequence_no > $1%"); n != 1 {
		t.Fatalf("the control statement is prepared %d times, want 1: the check cannot see prepared statements", n)
	}
	if n, generic, custom := plans("%WITH input AS%INSERT INTO journal%"); n != 1 || generic != runs+1 || custom != 0 {
		t.Errorf("ingest's statement: prepared %d times, %d generic and %d custom plans in %d runs, want once, only generic ones",
			n, generic, custom, runs+1)
	}
}

// The settle statement (Settle) is never run from a generic plan, however many batches
// a connection settles: it is sent unnamed, planned for the journal as it is each
// time, with no SET LOCAL plan_cache_mode around it, and it leaves plan_cache_mode as
// the session has it. A generic plan made while the journal was small scanned it whole
// in every batch once it had grown.
func TestSettleIsPlannedForTheJournalAsItIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := singleSession(t)
	const runs = 8 // PostgreSQL may go generic from the sixth execution
	for i := range runs {
		id := fmt.Sprintf("6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0d%02d", i)
		if _, err := journal.Ingest(ctx, pool, journal.Batch{Entries: []journal.Entry{entry(t, fmt.Sprintf(`{"id":%q}`, id))}}); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var agg string
		if err := tx.QueryRow(ctx, `SELECT aggregate_id FROM journal WHERE id = $1`, id).Scan(&agg); err != nil {
			t.Fatal(err)
		}
		if _, err := journal.Settle(ctx, tx, []journal.Outcome{{ID: id, Status: journal.StatusFailed, Error: "down"}}, []string{agg}); err != nil {
			t.Fatal(err)
		}
		var mode string
		if err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if mode != "auto" {
			t.Fatalf("plan_cache_mode after settling = %q, want the session's", mode)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%UPDATE journal_state ' || 'AS s%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the settle statement is prepared %d times, want never (a prepared statement goes generic)", n)
	}
	if got := count(t, pool, `SELECT count(*) FROM journal_state WHERE status = 'FAILED' AND attempts = 1`); got != runs {
		t.Errorf("%d entries settled FAILED, want %d", got, runs)
	}
	if got := count(t, pool, `SELECT count(*) FROM journal_attempt`); got != runs {
		t.Errorf("%d attempts in the history, want %d", got, runs)
	}
	if got := count(t, pool, `SELECT count(*) FROM aggregate_head WHERE NOT received AND NOT parked`); got != runs {
		t.Errorf("%d FAILED heads, want %d", got, runs)
	}
}
