package bench

import (
	"context"
	"fmt"
	"strings"
)

// PostgreSQL time by whose statements it was, from pg_stat_statements, when the
// cluster behind -admin-url loads it (shared_preload_libraries): a private cluster, as
// make chaos starts one. The row's database is fresh, so what the view holds for it is
// the row's alone. Statements are told apart by their text: the demo handler's are its
// customers insert and its outbox writes (registration.Handler, outbox.EmitBatch);
// ingest's are its journal insert and what it sends with it; BEGIN, COMMIT and ROLLBACK
// are both's; the bench's own reads and the schema's migration are left out; the rest
// is processing's own.
// https://www.postgresql.org/docs/15/pgstatstatements.html

// statementTimes is PostgreSQL's execution time, in ms, by whose statements they were.
type statementTimes struct {
	processing, handler, ingest, txControl float64
	// top are the costliest statements, for the log: whose, ms, calls, and the text's start.
	top []string
}

// enableStatementStats creates the pg_stat_statements view in the row's database; false
// when the cluster does not load the module (the row then reports no split).
func enableStatementStats(ctx context.Context, url string) bool {
	pool, err := openPool(ctx, url, 1)
	if err != nil {
		return false
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return false
	}
	var n int64
	return pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_statements`).Scan(&n) == nil
}

// readStatementTimes sums the row database's pg_stat_statements by whose they are.
func readStatementTimes(ctx context.Context, url string) (statementTimes, error) {
	var t statementTimes
	pool, err := openPool(ctx, url, 1)
	if err != nil {
		return t, err
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT s.query, s.total_exec_time + s.total_plan_time, s.calls FROM pg_stat_statements AS s
		WHERE s.dbid = (SELECT d.oid FROM pg_database AS d WHERE d.datname = current_database())
		ORDER BY 2 DESC`)
	if err != nil {
		return t, fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			q     string
			ms    float64
			calls int64
		)
		if err := rows.Scan(&q, &ms, &calls); err != nil {
			return t, fmt.Errorf("reading pg_stat_statements: %w", err)
		}
		if len(t.top) < 12 {
			t.top = append(t.top, fmt.Sprintf("%s %.0f ms %d calls: %.90s", whose(q), ms, calls, strings.Join(strings.Fields(q), " ")))
		}
		switch whose(q) {
		case "handler":
			t.handler += ms
		case "ingest":
			t.ingest += ms
		case "tx":
			t.txControl += ms
		case "processing":
			t.processing += ms
		}
	}
	return t, rows.Err()
}

// whose tells whose statement q (as pg_stat_statements shows it) is.
func whose(q string) string {
	s := strings.ToUpper(strings.Join(strings.Fields(q), " "))
	switch {
	case strings.Contains(s, "INSERT INTO CUSTOMERS"), strings.Contains(s, "INSERT INTO OUTBOX"):
		return "handler"
	case strings.Contains(s, "WITH INPUT AS"), strings.Contains(s, "WITH RACED AS"),
		strings.Contains(s, "FORCE_GENERIC_PLAN"), strings.Contains(s, "ENABLE_SEQSCAN"):
		return "ingest"
	case s == "BEGIN", s == "COMMIT", s == "ROLLBACK":
		return "tx"
	case strings.HasPrefix(s, "CREATE "), strings.HasPrefix(s, "ALTER "), strings.HasPrefix(s, "DROP "),
		strings.HasPrefix(s, "COMMENT "), strings.HasPrefix(s, "GRANT "), strings.HasPrefix(s, "DO "):
		return "bench" // the schema's migration, before the row starts
	case strings.Contains(s, "PG_STAT"), strings.Contains(s, "PG_CATALOG"), strings.Contains(s, "PG_DATABASE"),
		strings.Contains(s, "CREATE EXTENSION"), strings.Contains(s, "SELECT COUNT(*) FROM JOURNAL"),
		strings.HasPrefix(s, "SELECT VERSION()"), strings.HasPrefix(s, "SHOW "):
		return "bench"
	}
	return "processing"
}

// note is the row's note of t over n events, in µs per event.
func (t statementTimes) note(n int) string {
	per := func(ms float64) float64 { return ms * 1e3 / float64(max(n, 1)) }
	ratio := 0.0
	if t.handler > 0 {
		ratio = t.processing / t.handler
	}
	return fmt.Sprintf("PostgreSQL µs per event: processing (inboxd) %.0f, handler %.0f (inboxd %.1f× the handler's), ingest %.0f, BEGIN/COMMIT %.0f; ",
		per(t.processing), per(t.handler), ratio, per(t.ingest), per(t.txControl))
}
