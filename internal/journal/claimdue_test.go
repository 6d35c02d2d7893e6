package journal

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/testenv"
)

// The one-statement claim returns every row it locks, and rechecks a row another
// transaction changed after the claim's snapshot by that row alone: with the due heads
// flattened into the join, such a recheck (READ COMMITTED's EvalPlanQual) ran the head
// scans again and then dropped the row, still locked, so that a batch held settled
// entries it never saw and its claim cost grew with every head another worker settled
// meanwhile. The claim here waits for the other transaction (no SKIP LOCKED), which is
// how a test can order the two; the recheck it then runs is the one the claim runs when
// the other commits between its snapshot and its lock.
func TestClaimDueLocksOnlyWhatItReturns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		other     string // what the other transaction does to the 5 oldest heads' entries
		claimable int    // of the 10 rows the claim returns
	}{
		{name: "settled after the claim's snapshot", claimable: 5,
			other: `UPDATE journal_state SET status = 'PROCESSED', processed_at = now() WHERE id = ANY ($1::UUID[])`},
		{name: "locked, then released unchanged", claimable: 10,
			other: `SELECT id FROM journal_state WHERE id = ANY ($1::UUID[]) FOR UPDATE`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testenv.NewDB(t)
			for _, seed := range []string{`
				INSERT INTO journal (id, payload, event_type, aggregate_id)
				SELECT u, jsonb_build_object('id', u::TEXT), 'a', 'agg-' || g::TEXT
				FROM (SELECT g, gen_random_uuid() AS u FROM generate_series(1, 20) AS g) AS s`, `
				INSERT INTO journal_state (id, aggregate_id, sequence_no, next_attempt_at)
				SELECT j.id, j.aggregate_id, j.sequence_no,
				       now() - INTERVAL '1 minute' + row_number() OVER (ORDER BY j.sequence_no) * INTERVAL '1 millisecond'
				FROM journal AS j`} {
				if _, err := db.Pool.Exec(ctx, seed); err != nil {
					t.Fatal(err)
				}
			}
			if err := RebuildHeads(ctx, db.Pool); err != nil {
				t.Fatal(err)
			}
			var oldest []string
			rows, err := db.Pool.Query(ctx, `SELECT head_id::TEXT FROM aggregate_head ORDER BY due_at LIMIT 5`)
			if err == nil {
				oldest, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				t.Fatal(err)
			}
			rc := pgx.TxOptions{IsoLevel: pgx.ReadCommitted} // the claim's isolation (ClaimDue)
			other, err := db.Pool.BeginTx(ctx, rc)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = other.Rollback(ctx) }()
			if _, err := other.Exec(ctx, tt.other, oldest); err != nil {
				t.Fatal(err)
			}

			claim, err := db.Pool.BeginTx(ctx, rc)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = claim.Rollback(ctx) }()
			var pid int
			if err := claim.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			type result struct {
				claimable []bool // each returned row's last column
				err       error
			}
			done := make(chan result, 1)
			waiting := strings.Replace(claimDueSQL, "SKIP LOCKED", "", 1)
			go func() {
				rows, err := claim.Query(ctx, waiting, int64(0), int64(40), int64(10))
				if err != nil {
					done <- result{err: err}
					return
				}
				got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bool, error) {
					v, err := r.Values()
					if err != nil {
						return false, err
					}
					ok, _ := v[len(v)-1].(bool)
					return ok, nil
				})
				done <- result{claimable: got, err: err}
			}()
			testenv.Eventually(t, 30*time.Second, "the claim waiting for the other transaction's row lock", func() bool {
				var n int
				err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE pid = $1 AND wait_event_type = 'Lock'`, pid).Scan(&n)
				return err == nil && n == 1
			})
			if err := other.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			got := <-done
			if got.err != nil {
				t.Fatal(got.err)
			}
			claimable := 0
			for _, ok := range got.claimable {
				if ok {
					claimable++
				}
			}
			var free int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT id FROM journal_state FOR UPDATE SKIP LOCKED) AS f`).Scan(&free); err != nil {
				t.Fatal(err)
			}
			if locked := 20 - free; len(got.claimable) != 10 || locked != len(got.claimable) || claimable != tt.claimable {
				t.Errorf("claim returned %d rows (%d claimable) and locks %d; want 10 (%d claimable), all it locks",
					len(got.claimable), claimable, locked, tt.claimable)
			}
		})
	}
}
