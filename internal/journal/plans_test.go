package journal

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/testenv"
)

// plannedJournal is a journal shaped like a production one: many settled entries, few
// pending or needing attention, analyzed, so the planner chooses as it would there.
func plannedJournal(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	db := testenv.NewDB(t)
	if _, err := db.Pool.Exec(ctx, seedSQL([]string{"received_at"}, []string{"status", "updated_at", "processed_at"}, `
		SELECT u AS id, jsonb_build_object('id', u::TEXT) AS payload, (ARRAY['a', 'b', 'c'])[1 + g % 3] AS event_type,
		       'agg-' || (g % 1000)::TEXT AS aggregate_id, 'PROCESSED' AS status, now() - INTERVAL '1 day' AS received_at,
		       now() - INTERVAL '1 day' AS updated_at, now() - INTERVAL '1 day' AS processed_at
		FROM (SELECT g, gen_random_uuid() AS u FROM generate_series(1, 30000) AS g) AS s`)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, seedSQL(nil, []string{"status"}, `
		SELECT u AS id, jsonb_build_object('id', u::TEXT) AS payload, 'a' AS event_type, 'agg-' || g::TEXT AS aggregate_id,
		       (ARRAY['RECEIVED', 'FAILED', 'DEAD', 'REJECTED', 'PROCESSED'])[1 + g % 5] AS status
		FROM (SELECT g, gen_random_uuid() AS u FROM generate_series(1, 50) AS g) AS s`)); err != nil {
		t.Fatal(err)
	}
	if err := RebuildHeads(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE journal, journal_state, aggregate_head`); err != nil {
		t.Fatal(err)
	}
	return db.Pool
}

var usesIndex = regexp.MustCompile(`(?:using|on) ((?:journal|aggregate_head)_\w+)`)

// explain returns the plan of sql with args, as PostgreSQL would run it from pgx's
// statement cache: once custom (the arguments known) and once generic (after five
// executions PostgreSQL may plan without them).
func explain(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) (custom, generic string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	read := func(q string, args ...any) string {
		// The simple protocol writes the arguments into the text, as EXPLAIN EXECUTE needs.
		rows, err := conn.Query(ctx, q, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		var b strings.Builder
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			b.WriteString(line + "\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	custom = read("EXPLAIN "+sql, args...)
	if _, err := conn.Exec(ctx, "PREPARE planned AS "+sql); err != nil {
		t.Fatalf("preparing %s: %v", sql, err)
	}
	defer func() { _, _ = conn.Exec(ctx, "DEALLOCATE planned") }()
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, "RESET plan_cache_mode") }()
	params := make([]string, len(args))
	for i := range args {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	exec := "EXPLAIN EXECUTE planned"
	if len(args) > 0 {
		exec += "(" + strings.Join(params, ", ") + ")"
	}
	generic = read(exec, args...)
	return custom, generic
}

type planCase struct {
	name string
	sql  string
	args []any
	want []string // indexes the plan must use ("a|b": either); no plan may scan the journal
	// bounded: a sequential scan under a LIMIT is allowed, as it reads at most that many rows.
	bounded bool
	// stateOnly: the plan must not read the journal table, only journal_state (and others).
	stateOnly bool
}

// TestPlansUseIndexes pins every statement that the console, the stats endpoint,
// readiness and bulk requeues run routinely to the indexes that keep its cost
// independent of the journal's size: a change that makes one read the journal fails
// here rather than in production.
func TestPlansUseIndexes(t *testing.T) {
	t.Parallel()
	pool := plannedJournal(t)
	at := time.Now().Add(-10 * time.Minute)
	tests := []planCase{
		{name: "stats: pending by type", sql: countPendingSQL, want: []string{"journal_state_pending", "journal_pkey"}},
		{name: "stats: attention by type", sql: countAttentionSQL, want: []string{"journal_state_attention", "journal_pkey"}},
		{name: "stats: oldest pending", sql: pendingAgeSQL, want: []string{"journal_state_pending", "journal_pkey"}},
		{name: "stats: event types", sql: eventTypesSQL, args: []any{MaxEventTypes}, want: []string{"journal_type_seq"}},
		{name: "stats: small journal counted exactly", sql: countCappedSQL, args: []any{ExactCountLimit + 1}, bounded: true},
		{name: "rates", sql: ratesSQL, args: []any{at, 10.0}, want: []string{"journal_state_pending", "journal_state_attention", "journal_state_terminal", "journal_pkey"}},
		{name: "requeue: next event type", sql: nextTypeSQL, args: []any{"a"}, want: []string{"journal_type_seq"}},
	}
	scoped := []struct {
		name string
		f    Filter
		m    RequeueMode
		sc   requeueScope
		want string
	}{
		{"retry, no filter", Filter{Statuses: RetryableStatuses}, Retry, requeueScope{status: StatusDead}, "journal_state_attention"},
		{"retry, since", Filter{Statuses: RetryableStatuses, Since: at}, Retry, requeueScope{status: StatusFailed}, "journal_state_attention|journal_state_pending"},
		{"replay, since", Filter{Since: at}, Replay, requeueScope{eventType: "a"}, "journal_type_seq"},
		{"replay, until", Filter{Until: at}, Replay, requeueScope{eventType: "b"}, "journal_type_seq"},
		{"replay, no filter", Filter{}, Replay, requeueScope{eventType: "c"}, "journal_type_seq"},
		{"replay, processed", Filter{Statuses: []Status{StatusProcessed}}, Replay, requeueScope{eventType: "a"}, "journal_type_seq"},
	}
	for _, s := range scoped {
		sql, args := requeueSQL(s.f, s.m, s.sc, 0, 1<<40)
		// The batch reads journal_state by key for a type's entries, the journal by key
		// for a status's, and updates journal_state by key.
		tests = append(tests, planCase{name: "requeue batch: " + s.name, sql: sql, args: args, want: []string{s.want, "journal_state_pkey"}})
		sql, args = countMatchingSQL(s.f, s.sc)
		if s.sc.status != "" { // a replay's dry run counts what it would replay: every matching entry of the type
			tests = append(tests, planCase{name: "requeue count: " + s.name, sql: sql, args: args, want: []string{s.want}})
		}
		sql, args = s.sc.upperSQL()
		tests = append(tests, planCase{name: "requeue upper bound: " + s.name, sql: sql, args: args, want: []string{s.want}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			custom, generic := explain(t, pool, tt.sql, tt.args...)
			for kind, plan := range map[string]string{"custom": custom, "generic": generic} {
				if err := checkPlan(plan, tt.want, tt.bounded); err != nil {
					t.Errorf("%s plan: %v\n%s", kind, err, plan)
				}
			}
		})
	}
}

// checkPlan reports a plan that reads the whole journal, or misses an index it must use.
func checkPlan(plan string, want []string, bounded bool) error {
	if strings.Contains(plan, "Seq Scan on journal") && !(bounded && strings.Contains(plan, "Limit")) {
		return fmt.Errorf("reads the whole journal")
	}
	used := map[string]bool{}
	for _, m := range usesIndex.FindAllStringSubmatch(plan, -1) {
		used[m[1]] = true
	}
	for _, w := range want {
		found := false
		for _, alt := range strings.Split(w, "|") {
			found = found || used[alt]
		}
		if !found {
			return fmt.Errorf("does not use %s", w)
		}
	}
	return nil
}

// TestPlanCheckCatchesScans proves checkPlan on the statements this package used to send:
// the full GROUP BY of /journal/stats, the rates over received_at and processed_at, and
// a bulk replay batch sorting the whole journal.
func TestPlanCheckCatchesScans(t *testing.T) {
	t.Parallel()
	pool := plannedJournal(t)
	at := time.Now().Add(-10 * time.Minute)
	old := []struct {
		name string
		sql  string
		args []any
	}{
		{"stats", `SELECT j.event_type, s.status, count(*) FROM journal_state AS s JOIN journal AS j ON j.id = s.id
			GROUP BY j.event_type, s.status`, nil},
		{"rates", `SELECT count(*) FROM journal_state AS s JOIN journal AS j ON j.id = s.id
			WHERE j.received_at >= $1 OR s.processed_at >= $1`, []any{at}},
		{"replay", `SELECT id, sequence_no FROM journal WHERE received_at >= $1::TIMESTAMPTZ AND sequence_no > $2::INT8
			ORDER BY sequence_no LIMIT 500`, []any{at, int64(0)}},
		{"max", `SELECT coalesce(max(sequence_no), 0) FROM journal`, nil},
	}
	for _, tt := range old {
		custom, _ := explain(t, pool, tt.sql, tt.args...)
		if err := checkPlan(custom, nil, false); err == nil {
			t.Errorf("%s: the check passed a plan that reads the journal:\n%s", tt.name, custom)
		}
	}
}

// TestReadStatsLargeJournal: above ExactCountLimit the counts the partial indexes hold
// stay exact, the total is the database's estimate, labelled as one. The exact count
// stops at a small bound (issue 27: counting up to 100,001 entries took 208 ms), so that
// 30,050 entries, well inside what was counted exactly before, are estimated.
func TestReadStatsLargeJournal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	small := testenv.NewDB(t).Pool
	if _, err := small.Exec(ctx, seedSQL(nil, []string{"status"}, `
		SELECT u AS id, jsonb_build_object('id', u::TEXT) AS payload, (ARRAY['a', 'b'])[1 + g % 2] AS event_type, 'agg' AS aggregate_id,
		       (ARRAY['RECEIVED', 'PROCESSED'])[1 + g % 2] AS status
		FROM (SELECT g, gen_random_uuid() AS u FROM generate_series(1, $1::INT8) AS g) AS s`), ExactCountLimit); err != nil {
		t.Fatal(err)
	}
	s, err := ReadStats(ctx, small)
	if err != nil {
		t.Fatal(err)
	}
	if s.Estimated || s.Total != ExactCountLimit || s.ByType["b"][StatusProcessed] != ExactCountLimit/2 {
		t.Fatalf("small journal: estimated %v total %d by type %v", s.Estimated, s.Total, s.ByType)
	}
	pool := plannedJournal(t) // 30,050 entries
	s, err = ReadStats(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	const total = 30050
	if !s.Estimated || s.Total < total*9/10 || s.Total > total*11/10 {
		t.Errorf("estimated %v total %d, want an estimate near %d", s.Estimated, s.Total, total)
	}
	want := map[Status]int64{StatusReceived: 10, StatusFailed: 10, StatusDead: 10, StatusRejected: 10}
	for st, n := range want {
		if s.ByStatus[st] != n || s.ByType["a"][st] != n {
			t.Errorf("%s: %d (type a: %d), want exactly %d", st, s.ByStatus[st], s.ByType["a"][st], n)
		}
	}
	if got := s.ByStatus[StatusProcessed]; got != s.Total-40 {
		t.Errorf("PROCESSED %d, want the total less the counted %d", got, s.Total-40)
	}
	for _, typ := range []string{"a", "b", "c"} {
		if m, ok := s.ByType[typ]; !ok || m[StatusProcessed] != 0 {
			t.Errorf("type %s: %v, want listed without a PROCESSED count", typ, m)
		}
	}
}

// buffersTouched runs sql under EXPLAIN (ANALYZE, BUFFERS) and returns the shared
// buffers its execution touched (hit or read), its children included.
func buffersTouched(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var out []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	var raw []byte
	if err := pool.QueryRow(context.Background(), "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		t.Fatalf("reading the plan: %v: %s", err, raw)
	}
	return out[0].Plan.Hit + out[0].Plan.Read
}

// TestReadinessIgnoresBacklog: readiness asks every second how long the oldest waiting
// event has waited. With 20,000 events blocked behind 5,000 FAILED heads due in an hour,
// it must still read a handful of pages through aggregate_head_due; the statement it
// replaced read every blocked event.
func TestReadinessIgnoresBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	if err := SeedBlocked(ctx, db.Pool, 5000, 20000); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE aggregate_head`); err != nil {
		t.Fatal(err)
	}
	custom, generic := explain(t, db.Pool, oldestWaitingSQL, int64(5000))
	for kind, plan := range map[string]string{"custom": custom, "generic": generic} {
		if err := checkPlan(plan, []string{"aggregate_head_due"}, false); err != nil {
			t.Errorf("%s plan: %v\n%s", kind, err, plan)
		}
	}
	now, before := buffersTouched(t, db.Pool, oldestWaitingSQL, int64(5000)), buffersTouched(t, db.Pool, oldOldestWaitingSQL, int64(5000))
	t.Logf("buffers touched: %d, the previous statement %d", now, before)
	if now > 20 {
		t.Errorf("oldest waiting touched %d buffers with 20,000 blocked events, want a handful", now)
	}
	if before < 200 {
		t.Errorf("the previous statement touched only %d buffers: the backlog is not what it should be", before)
	}
	d, err := OldestWaiting(ctx, db.Pool, 0)
	if err != nil || d != 0 {
		t.Errorf("blocked events only: %s, %v; want 0", d, err)
	}
}

// oldOldestWaitingSQL is the statement OldestWaiting sent before aggregate_head: an
// anti-join over every pending entry.
const oldOldestWaitingSQL = `
	WITH unblocked AS (
		SELECT s.status, j.received_at, s.next_attempt_at FROM journal_state AS s JOIN journal AS j ON j.id = s.id
		WHERE s.status IN ('RECEIVED', 'FAILED')
		  AND NOT EXISTS (
			SELECT 1 FROM journal_state AS p
			WHERE p.aggregate_id = s.aggregate_id AND p.sequence_no < s.sequence_no
			  AND p.status = 'FAILED' AND p.next_attempt_at > now())
	)
	SELECT COALESCE(EXTRACT(EPOCH FROM now() - least(
		(SELECT least(next_attempt_at, received_at) FROM unblocked
		 WHERE next_attempt_at <= now() - ($1::BIGINT * INTERVAL '1 millisecond')
		 ORDER BY next_attempt_at LIMIT 1),
		(SELECT received_at FROM unblocked
		 WHERE status = 'RECEIVED' AND next_attempt_at > now()
		   AND received_at <= now() - ($1::BIGINT * INTERVAL '1 millisecond')
		 ORDER BY received_at LIMIT 1))), 0)::FLOAT8`
