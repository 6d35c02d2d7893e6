package journal_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
)

// seedBlocked writes, with generate_series, blocked aggregates (a FAILED head due in an
// hour and behind events RECEIVED behind it) and due aggregates (one RECEIVED event a
// minute old each), then builds their heads.
func seedBlocked(t *testing.T, db *testenv.DB, blocked, behind, due int) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{journal.SeedSQL([]string{"sequence_no"}, []string{"status", "attempts", "next_attempt_at"}, `
		  SELECT u AS id, jsonb_build_object('id', u::TEXT) AS payload, 'seed' AS event_type, 'blk-' || g AS aggregate_id,
		         g AS sequence_no, 'FAILED' AS status, 1 AS attempts, now() + INTERVAL '1 hour' AS next_attempt_at
		  FROM (SELECT g, gen_random_uuid() AS u FROM generate_series(1, $1::INT8) AS g) AS s`), []any{blocked}},
		// Waiting since before the outage: older than anything due, so an index on
		// next_attempt_at meets them first.
		{journal.SeedSQL([]string{"sequence_no", "received_at"}, []string{"next_attempt_at"}, `
		  SELECT u AS id, jsonb_build_object('id', u::TEXT) AS payload, 'seed' AS event_type,
		         'blk-' || (g % $2::INT8 + 1) AS aggregate_id, $2::INT8 + g AS sequence_no,
		         now() - INTERVAL '1 hour' AS next_attempt_at, now() - INTERVAL '1 hour' AS received_at
		  FROM (SELECT g, gen_random_uuid() AS u FROM generate_series(1, $1::INT8) AS g) AS s`), []any{behind, blocked}},
		{journal.SeedSQL([]string{"sequence_no"}, []string{"next_attempt_at"}, `
		  SELECT u AS id, jsonb_build_object('id', u::TEXT) AS payload, 'seed' AS event_type, 'due-' || g AS aggregate_id,
		         10000000 + g AS sequence_no, now() - INTERVAL '1 second' AS next_attempt_at
		  FROM (SELECT g, gen_random_uuid() AS u FROM generate_series(1, $1::INT8) AS g) AS s`), []any{due}},
	} {
		if _, err := db.Pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := journal.RebuildHeads(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE journal, journal_state, aggregate_head`); err != nil {
		t.Fatal(err)
	}
}

// planNode is the part of EXPLAIN (FORMAT JSON) the tests read.
type planNode struct {
	NodeType   string     `json:"Node Type"`
	Relation   string     `json:"Relation Name"`
	Index      string     `json:"Index Name"`
	ActualRows float64    `json:"Actual Rows"`
	Loops      float64    `json:"Actual Loops"`
	Plans      []planNode `json:"Plans"`
}

func explain(t *testing.T, db *testenv.DB, analyze bool, sql string, args ...any) planNode {
	t.Helper()
	opts := "FORMAT JSON"
	if analyze {
		opts = "ANALYZE, BUFFERS, FORMAT JSON"
	}
	var out []byte
	if err := db.Pool.QueryRow(context.Background(), "EXPLAIN ("+opts+") "+sql, args...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var p []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(out, &p); err != nil || len(p) != 1 {
		t.Fatalf("parsing EXPLAIN: %v (%s)", err, out)
	}
	return p[0].Plan
}

// scans lists every node that reads a table: "relation/index rows".
func scans(n planNode, out map[string]float64) {
	if n.Relation != "" {
		out[n.Relation+"/"+n.Index] += n.ActualRows * max(n.Loops, 1)
	}
	for _, c := range n.Plans {
		scans(c, out)
	}
}

// The claim finds due heads through aggregate_head_due and locks them by primary key:
// it never reads the journal_pending index (gone since 0016), so events waiting behind heads that are not
// due cost it nothing (issue 20, item 1). Before aggregate_head, the claim scanned
// journal_pending over every waiting event.
func TestClaimPlanUsesHeadIndex(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	seedBlocked(t, db, 1000, 50000, 10)
	ctx := context.Background()

	logPlan(t, db, journal.PickDueSQL, int64(0), int64(400))
	pick := explain(t, db, true, journal.PickDueSQL, int64(0), int64(100))
	read := map[string]float64{}
	scans(pick, read)
	for k, rows := range read {
		// replay_hold: the aggregates under replay (none here), which the pick skips.
		if !strings.HasPrefix(k, "aggregate_head/aggregate_head_due") && !strings.HasPrefix(k, "replay_hold/") {
			t.Errorf("pick reads %s (%v rows); want aggregate_head_due only (and replay_hold)", k, rows)
		}
		if rows > 10 {
			t.Errorf("pick reads %v rows of %s; want only the 10 due heads", rows, k)
		}
	}
	if len(read) == 0 {
		t.Errorf("pick plan reads no table: %+v", pick)
	}

	heads, err := journal.ClaimHeads(ctx, db.Pool, db.Pool, 0, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(heads) != 10 {
		t.Fatalf("claimed %d heads, want the 10 due", len(heads))
	}
	ids := make([]string, len(heads))
	for i, h := range heads {
		ids[i] = h.ID
		if !strings.HasPrefix(h.AggregateID, "due-") {
			t.Errorf("claimed %s of %s, which is blocked", h.ID, h.AggregateID)
		}
	}
	logPlan(t, db, journal.LockHeadsSQL(true), ids, int64(0))
	for _, skip := range []bool{true, false} {
		lock := explain(t, db, true, journal.LockHeadsSQL(skip), ids, int64(0))
		read := map[string]float64{}
		scans(lock, read)
		for k, rows := range read {
			if strings.Contains(k, "/journal_pending") || rows > 10 {
				t.Errorf("lock (skip %v) reads %v rows of %s; want the 10 picked by key", skip, rows, k)
			}
		}
	}
}

// Claim latency with a blocked backlog, for the report, not asserted: go test -run
// TestClaimLatencyReport -v ./internal/journal/ with INBOXD_CLAIM_REPORT=1.
func TestClaimLatencyReport(t *testing.T) {
	if os.Getenv("INBOXD_CLAIM_REPORT") == "" {
		t.Skip("set INBOXD_CLAIM_REPORT=1 to measure")
	}
	for _, behind := range []int{0, 100000, 1000000} {
		db := testenv.NewDB(t)
		seedBlocked(t, db, 1000, behind, 100)
		ctx := context.Background()
		measure := func(claim func(tx pgx.Tx) error) time.Duration {
			const n = 30
			start := time.Now()
			for range n {
				tx, err := db.Pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := claim(tx); err != nil {
					t.Fatal(err)
				}
				_ = tx.Rollback(ctx)
			}
			return time.Since(start) / n
		}
		after := measure(func(tx pgx.Tx) error { _, err := journal.ClaimHeads(ctx, db.Pool, tx, 0, 100, nil); return err })
		before := measure(func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, claimBeforeHeadsSQL, int64(0), int64(100))
			if err != nil {
				return err
			}
			rows.Close()
			return rows.Err()
		})
		t.Logf("1000 blocked heads, %d events behind them, 100 due: claim of 100 before %v, after %v", behind, before, after)
		db.Pool.Close()
	}
}

// claimBeforeHeadsSQL is the claim before aggregate_head (commit acd0c20), for the report.
// journal_state stands in for the journal's state columns.
const claimBeforeHeadsSQL = `
		SELECT j.id::TEXT FROM journal_state AS j
		WHERE j.status IN ('RECEIVED', 'FAILED') AND j.next_attempt_at <= now()
		  AND (j.status = 'FAILED' OR j.next_attempt_at <= now() - $1::INT8 * INTERVAL '1 millisecond')
		  AND NOT EXISTS (
			SELECT 1 FROM journal_state AS p
			WHERE p.aggregate_id = j.aggregate_id AND p.sequence_no < j.sequence_no
			  AND p.status IN ('RECEIVED', 'FAILED'))
		ORDER BY j.next_attempt_at LIMIT $2::INT8 FOR UPDATE SKIP LOCKED`

// The claim's shape on CockroachDB (issue 19, item 3): the pick locks nothing, and the
// statement that locks has no LIMIT, so it never locks a row it does not return
// (cockroach#121917: no LIMIT pushed below a locking index join under SKIP LOCKED).
func TestClaimShapeLocksOnlyWhatItReturns(t *testing.T) {
	t.Parallel()
	if strings.Contains(journal.PickDueSQL, "FOR UPDATE") || strings.Contains(journal.PickAggregatesSQL, "FOR UPDATE") {
		t.Error("the pick locks rows")
	}
	for _, skip := range []bool{true, false} {
		sql := journal.LockHeadsSQL(skip)
		if strings.Contains(sql, "LIMIT") || !strings.Contains(sql, "s.id = ANY ($1::UUID[])") || !strings.Contains(sql, "FOR UPDATE") {
			t.Errorf("lock statement (skip %v) is not a lock by key without LIMIT:\n%s", skip, sql)
		}
	}
}

// logPlan logs the statement's EXPLAIN (ANALYZE, BUFFERS) text, for go test -v.
func logPlan(t *testing.T, db *testenv.DB, sql string, args ...any) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) "+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan:\n%s", strings.Join(lines, "\n"))
}

// A head row left behind by a journal written behind inboxd's back would be picked first
// forever; RepairStaleHeads recomputes it (the sweeper runs it now and then).
func TestRepairStaleHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	ids := ingestN(t, db.Pool, 2, "stale")
	if _, err := db.Pool.Exec(ctx, `UPDATE journal_state SET status = 'PROCESSED' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if got, err := journal.ClaimHeads(ctx, db.Pool, db.Pool, 0, 10, nil); err != nil || len(got) != 0 {
		t.Fatalf("claim behind a stale head = %v, %v; want nothing (the head row still names %s)", got, err, ids[0])
	}
	n, err := journal.RepairStaleHeads(ctx, db.Pool, 100)
	if err != nil || n != 1 {
		t.Fatalf("RepairStaleHeads = %d, %v; want 1", n, err)
	}
	got, err := journal.ClaimHeads(ctx, db.Pool, db.Pool, 0, 10, nil)
	if err != nil || len(got) != 1 || got[0].ID != ids[1] {
		t.Errorf("claim after the repair = %v, %v; want %s", got, err, ids[1])
	}
	if n, err := journal.RepairStaleHeads(ctx, db.Pool, 100); err != nil || n != 0 {
		t.Errorf("second repair = %d, %v; want 0", n, err)
	}
}
