package journal

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

// backlogJournal is plannedJournal, analyzed while almost nothing was pending, and then
// a backlog the statistics do not know of: 2,000 aggregates whose FAILED head is due in
// an hour, each with 4 RECEIVED events behind it, and 500 aggregates with a due
// RECEIVED head. That is a production journal between two autovacuum analyses: a plan
// that trusts the statistics about the partial indexes reads the whole backlog. Only
// aggregate_head is analyzed again (it is small and its statistics follow it).
func backlogJournal(t *testing.T) (pool *pgxpool.Pool, heads, aggregates []string) {
	t.Helper()
	ctx := context.Background()
	pool = plannedJournal(t)
	for _, sql := range []string{
		seedSQL(nil, []string{"status", "attempts", "next_attempt_at"}, `
		SELECT u AS id, jsonb_build_object('id', u::TEXT) AS payload, 'a' AS event_type, 'blk-' || (g % 2000)::TEXT AS aggregate_id,
		       CASE WHEN g < 2000 THEN 'FAILED' ELSE 'RECEIVED' END AS status, CASE WHEN g < 2000 THEN 1 ELSE 0 END AS attempts,
		       CASE WHEN g < 2000 THEN now() + INTERVAL '1 hour' ELSE now() END AS next_attempt_at
		FROM (SELECT g, gen_random_uuid() AS u FROM generate_series(0, 9999) AS g) AS s
		ORDER BY g`),
		seedSQL(nil, []string{"next_attempt_at"}, `
		SELECT u AS id, jsonb_build_object('id', u::TEXT) AS payload, 'a' AS event_type, 'due-' || g::TEXT AS aggregate_id,
		       now() - INTERVAL '1 minute' AS next_attempt_at
		FROM (SELECT g, gen_random_uuid() AS u FROM generate_series(1, 500) AS g) AS s`),
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := RebuildHeads(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE aggregate_head`); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT head_id::TEXT, aggregate_id FROM aggregate_head
		WHERE aggregate_id LIKE 'due-%' ORDER BY aggregate_id LIMIT 100`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, agg string
		if err := rows.Scan(&id, &agg); err != nil {
			t.Fatal(err)
		}
		heads, aggregates = append(heads, id), append(aggregates, agg)
	}
	if rows.Err() != nil || len(heads) != 100 {
		t.Fatalf("%d due heads: %v", len(heads), rows.Err())
	}
	return pool, heads, aggregates
}

// TestHotPlansUseKeys pins every statement a processing batch sends, claim to settle,
// to lookups by key (journal_state_pkey and journal_pkey, the aggregate's partial
// indexes of journal_state; settling reads no journal row at all), in custom and
// generic plans (pgx prepares statements; PostgreSQL may plan generically after five
// runs), on a journal whose statistics say almost nothing is pending while 10,500
// entries are. None may read journal_pending or journal_attention whole: with the
// status and due checks in their WHERE clauses, the claim's lock and LockBatch scanned
// journal_pending and filtered it by id, and deleting idle heads hash-joined every
// pending and every DEAD entry (issue 20: e2e-max 14× slower at 2 M settled entries).
func TestHotPlansUseKeys(t *testing.T) {
	t.Parallel()
	pool, heads, aggs := backlogJournal(t)
	statuses := make([]string, len(heads))
	errs := make([]*string, len(heads))
	backoffs := make([]int64, len(heads))
	started := make([]time.Time, len(heads))
	took := make([]int64, len(heads))
	runs := make([]int64, len(heads))
	skip := make([]bool, len(heads))
	for i := range statuses {
		statuses[i] = string(StatusProcessed)
		runs[i] = 1
	}
	byAggregate := []string{"journal_state_pending", "journal_state_parked"}
	tests := []planCase{
		{name: "claim: pick due", sql: pickDueSQL, args: []any{int64(0), int64(100)}, want: []string{"aggregate_head_due"}},
		{name: "claim: lock, skip locked", sql: lockHeadsSQL(true), args: []any{heads, int64(0)},
			want: append([]string{"journal_state_pkey", "journal_pkey"}, byAggregate...)},
		{name: "claim: lock, wait", sql: lockHeadsSQL(false), args: []any{heads, int64(0)},
			want: append([]string{"journal_state_pkey", "journal_pkey"}, byAggregate...)},
		{name: "claim: pick and lock (PostgreSQL)", sql: claimDueSQL, args: []any{int64(0), int64(400), int64(100)},
			want: append([]string{"aggregate_head_due", "journal_state_pkey", "journal_pkey"}, byAggregate...)},
		{name: "webhook: lock batch", sql: lockBatchSQL, args: []any{heads},
			want: append([]string{"journal_state_pkey", "journal_pkey"}, byAggregate...)},
		{name: "engine: lock one", sql: lockPendingSQL, args: []any{heads[0]}, want: []string{"journal_state_pkey", "journal_pkey"}},
		{name: "settle: one statement (PostgreSQL)", sql: settlePGSQL,
			args: []any{heads, statuses, errs, backoffs, started, took, runs, skip, RunOnSkipper, aggs},
			want: append([]string{"journal_state_pkey"}, byAggregate...), stateOnly: true},
		{name: "settle: one statement (CockroachDB's, on PostgreSQL)", sql: settleCRDBSQL,
			args: []any{heads, statuses, errs, backoffs, started, took, runs, skip, RunOnSkipper, aggs},
			want: append([]string{"journal_state_pkey"}, byAggregate...), stateOnly: true},
		{name: "settle: aggregates of", sql: aggregatesOfSQL, args: []any{heads}, want: []string{"journal_state_pkey"}, stateOnly: true},
		{name: "settle: upsert heads", sql: upsertHeadsSQL, args: []any{aggs}, want: byAggregate, stateOnly: true},
		{name: "sweeper: stale heads", sql: staleHeadsSQL, args: []any{int64(2000)}, want: []string{"journal_state_pkey"}, stateOnly: true},
		{name: "settle: delete idle heads", sql: deleteIdleHeadsSQL, args: []any{aggs}, want: byAggregate, stateOnly: true},
		{name: "sweeper: parked gauges", sql: parkedSQL, want: []string{"aggregate_head_parked", "journal_state_pending"}, stateOnly: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			custom, generic := explain(t, pool, tt.sql, tt.args...)
			for kind, plan := range map[string]string{"custom": custom, "generic": generic} {
				err := checkPlan(plan, tt.want, tt.bounded)
				for _, whole := range []string{"journal_state_attention"} {
					if err == nil && strings.Contains(plan, whole) {
						err = fmt.Errorf("reads %s, which holds every pending entry", whole)
					}
				}
				// Settling touches the state rows only: the journal row of an entry is
				// written once, by ingest.
				if err == nil && tt.stateOnly && regexp.MustCompile(`on journal\b[^_]`).MatchString(plan) {
					err = fmt.Errorf("reads the journal")
				}
				if err != nil {
					t.Errorf("%s plan: %v\n%s", kind, err, plan)
				}
			}
		})
	}
}

// TestIngestPlanReadsTheJournalByKey pins ingest's statement, which runs from its
// generic plan (sendIngest, genericPlanSQL), to primary-key lookups of the journal,
// whether that plan was made while the journal was empty or once it holds 30,000
// entries: a generic plan made on a small journal that joined it by a scan was kept as
// the journal grew, and read it whole in every batch. Without noSeqScanSQL's ban on
// sequential scans, the plan made on the empty journal scans it once per entry.
func TestIngestPlanReadsTheJournalByKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ids := []string{"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01", "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a02"}
	texts := func(v ...string) []string { return v }
	args := []any{
		texts(`{"id":"`+ids[0]+`"}`, `{"id":"`+ids[1]+`"}`), texts("a", "a"), texts("agg-1", "agg-2"), texts("/queue/q", "/queue/q"),
		[]string{}, []string{}, []string{}, []string{}, []string{}, []string{}, [][]byte{}, []string{},
		ids, texts("", ""),
	}
	empty := testenv.NewDB(t).Pool
	if _, err := empty.Exec(ctx, `ANALYZE journal`); err != nil {
		t.Fatal(err)
	}
	for name, pool := range map[string]*pgxpool.Pool{"empty journal": empty, "30,000 entries": plannedJournal(t)} {
		t.Run(name, func(t *testing.T) {
			plan := strings.Join(explainIngest(t, pool, "", args), "\n")
			err := checkPlan(plan, []string{"journal_pkey"}, false)
			if err == nil && !strings.Contains(plan, "Index Cond: (id = s.id)") {
				err = fmt.Errorf("does not look each entry up by key") // a whole index read would not either
			}
			if err != nil {
				t.Errorf("generic plan: %v\n%s", err, plan)
			}
		})
	}
}

// Ingest reads the journal only for the entries its insert skipped (issue 29): a batch
// of new events costs no lookup, and each duplicate one, by key. Before, every entry was
// looked up, new or not.
func TestIngestLooksUpOnlyTheEntriesItSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.NewDB(t).Pool
	entry := func(i int) Entry {
		body := fmt.Sprintf(`{"id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f%04d"}`, i)
		ev, err := message.Decode([]byte(body), func(string) string { return "" }, message.Options{DefaultEventType: "a"})
		if err != nil {
			t.Fatalf("decoding %s: %v", body, err)
		}
		return Entry{Event: ev, Destination: "/queue/q"}
	}
	first := Batch{}
	for i := range 3 {
		first.Entries = append(first.Entries, entry(i))
	}
	if _, err := Ingest(ctx, pool, first); err != nil {
		t.Fatal(err)
	}
	ids, payloads, empty := []string{}, []string{}, []string{}
	for i := range 10 { // 0–2 journaled already, 3–9 new
		e := entry(i)
		ids, payloads, empty = append(ids, e.Event.ID), append(payloads, string(e.Event.Payload)), append(empty, "")
	}
	texts := func(s string) []string {
		out := make([]string, len(ids))
		for i := range out {
			out[i] = s
		}
		return out
	}
	args := []any{payloads, texts("a"), texts("agg"), texts("/queue/q"),
		[]string{}, []string{}, []string{}, []string{}, []string{}, []string{}, [][]byte{}, []string{}, ids, empty}
	lines := explainIngest(t, pool, "(ANALYZE, TIMING OFF, COSTS OFF)", args)
	plan := strings.Join(lines, "\n")
	lookups := 0
	for _, l := range lines {
		if strings.Contains(l, "using journal_pkey on journal j") {
			if _, err := fmt.Sscanf(l[strings.LastIndex(l, "loops=")+len("loops="):], "%d", &lookups); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
		}
	}
	if lookups != 3 {
		t.Errorf("the journal was looked up %d times, want 3 (the duplicates only)\n%s", lookups, plan)
	}
}

// explainIngest EXPLAINs ingestSQL with args and options ("" or "(ANALYZE, …)") as
// sendIngest runs it, from a generic plan with sequential scans off, in a transaction
// rolled back afterwards, and returns the plan's lines.
func explainIngest(t *testing.T, pool *pgxpool.Pool, options string, args []any) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, set := range []string{genericPlanSQL, noSeqScanSQL} {
		if _, err := tx.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, "PREPARE ingest_explained AS "+ingestSQL); err != nil {
		t.Fatal(err)
	}
	params := make([]string, len(args))
	for i := range args {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	// The simple protocol writes the arguments into the text, as EXPLAIN EXECUTE needs.
	rows, err := tx.Query(ctx, "EXPLAIN "+options+" EXECUTE ingest_explained("+strings.Join(params, ", ")+")",
		append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// The one-statement claim converts a payload to text, and runs the head checks'
// subplans, only for the rows it returns: above its row locks, not below them, where
// they ran for every head another worker held and was skipped.
func TestClaimDueComputesAboveItsLocks(t *testing.T) {
	t.Parallel()
	pool, _, _ := backlogJournal(t)
	rows, err := pool.Query(context.Background(), "EXPLAIN (VERBOSE) "+claimDueSQL, int64(0), int64(400), int64(100))
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ->")) }
	lock := -1 // the LockRows node's indentation; the lines under it are its subtree
	found := false
	for _, l := range lines {
		switch {
		case strings.Contains(l, "LockRows"):
			lock, found = indent(l), true
			continue
		case lock >= 0 && indent(l) <= lock:
			lock = -1 // past the subtree (the SubPlans are listed under the top node)
		}
		if lock >= 0 && (strings.Contains(l, "payload)::text") || strings.Contains(l, "SubPlan")) {
			t.Errorf("computed below the row locks: %s\n%s", strings.TrimSpace(l), strings.Join(lines, "\n"))
		}
	}
	if !found {
		t.Fatalf("no LockRows in the plan:\n%s", strings.Join(lines, "\n"))
	}
}
