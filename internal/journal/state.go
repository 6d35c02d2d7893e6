package journal

import (
	"context"
	"fmt"

	"github.com/inboxd/inboxd/internal/database"
)

// The state move, expand step (migration 0026): journal_state holds a copy of every
// journal row's mutable state that differs from "as ingested". The journal's columns
// stay authoritative in this release; every statement that writes them mirrors what it
// wrote into journal_state, in the same statement: the journal's UPDATE (or INSERT) is
// a CTE named u that returns mirrorReturning, and mirrorStateSQL, the CTE after it,
// upserts those rows. No extra statement, so no extra round trip on the hot path.
//
// Each table is modified once per statement, as CockroachDB requires
// (https://github.com/cockroachdb/cockroach/issues/70731); journal and journal_state are
// two tables. The mirror CTE is not referenced by the statement's final SELECT: a
// data-modifying CTE runs once, referenced or not, on PostgreSQL
// (https://www.postgresql.org/docs/15/queries-with.html#QUERIES-WITH-MODIFYING) and on
// CockroachDB since v19.2 (cockroach PR 38670, which fixed issue 24307 "common table
// expression with side effects was not used in query";
// https://www.cockroachlabs.com/docs/stable/common-table-expressions#data-modifying-statements).

// stateColumns are the journal's mutable state columns, which journal_state mirrors.
const stateColumns = `status, attempts, last_error, next_attempt_at, updated_at, processed_at, skipped_by, skipped_at, last_started_at, last_duration_ms`

// mirrorReturning is what the journal write feeding mirrorStateSQL returns (unqualified;
// a statement whose FROM clause makes the names ambiguous qualifies them itself).
const mirrorReturning = `id, aggregate_id, sequence_no, ` + stateColumns

// mirrorReturningJ is mirrorReturning qualified by the alias j, for an UPDATE journal AS
// j … FROM whose FROM clause has columns of the same names.
const mirrorReturningJ = `j.id, j.aggregate_id, j.sequence_no, j.status, j.attempts, j.last_error, j.next_attempt_at,
	j.updated_at, j.processed_at, j.skipped_by, j.skipped_at, j.last_started_at, j.last_duration_ms`

// mirrorStateSQL is the CTE (", jstate AS (…)") that upserts the state of the journal
// rows CTE u returned into journal_state.
const mirrorStateSQL = `,
jstate AS (
	INSERT INTO journal_state (id, aggregate_id, sequence_no, ` + stateColumns + `)
	SELECT u.id, u.aggregate_id, u.sequence_no, u.status, u.attempts, u.last_error, u.next_attempt_at, u.updated_at,
	       u.processed_at, u.skipped_by, u.skipped_at, u.last_started_at, u.last_duration_ms
	FROM u
	ON CONFLICT (id) DO UPDATE SET status = excluded.status, attempts = excluded.attempts,
		last_error = excluded.last_error, next_attempt_at = excluded.next_attempt_at,
		updated_at = excluded.updated_at, processed_at = excluded.processed_at,
		skipped_by = excluded.skipped_by, skipped_at = excluded.skipped_at,
		last_started_at = excluded.last_started_at, last_duration_ms = excluded.last_duration_ms
)`

// mirrorDriftSQL counts the journal rows whose state journal_state does not mirror (its
// row, or "as ingested" when it has none), and the journal_state rows of no journal row.
const mirrorDriftSQL = `
SELECT (SELECT count(*) FROM journal AS j LEFT JOIN journal_state AS s ON s.id = j.id
        WHERE CASE WHEN s.id IS NULL THEN
                j.status <> 'RECEIVED' OR j.attempts <> 0 OR j.last_error IS NOT NULL
                OR j.next_attempt_at <> j.received_at OR j.updated_at <> j.received_at
                OR j.processed_at IS NOT NULL OR j.skipped_by IS NOT NULL OR j.skipped_at IS NOT NULL
                OR j.last_started_at IS NOT NULL OR j.last_duration_ms IS NOT NULL
              ELSE
                s.aggregate_id <> j.aggregate_id OR s.sequence_no <> j.sequence_no
                OR s.status <> j.status OR s.attempts <> j.attempts
                OR s.last_error IS DISTINCT FROM j.last_error OR s.next_attempt_at <> j.next_attempt_at
                OR s.updated_at <> j.updated_at OR s.processed_at IS DISTINCT FROM j.processed_at
                OR s.skipped_by IS DISTINCT FROM j.skipped_by OR s.skipped_at IS DISTINCT FROM j.skipped_at
                OR s.last_started_at IS DISTINCT FROM j.last_started_at
                OR s.last_duration_ms IS DISTINCT FROM j.last_duration_ms
              END)
     + (SELECT count(*) FROM journal_state AS s WHERE NOT EXISTS (SELECT 1 FROM journal AS j WHERE j.id = s.id))`

// MirrorDrift counts the journal rows whose state journal_state does not mirror (their
// journal_state row, or "as ingested" when they have none, differs from the journal's
// state columns) and the journal_state rows without a journal row: 0 while every write
// of the journal's state mirrors it. For tests; it reads both tables whole.
func MirrorDrift(ctx context.Context, db database.DB) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, mirrorDriftSQL).Scan(&n); err != nil {
		return 0, fmt.Errorf("comparing journal_state with the journal: %w", err)
	}
	return n, nil
}

// mirrorStateOfSQL copies the journal's state of the entries $1 into journal_state,
// through the same upsert as every state write.
const mirrorStateOfSQL = `WITH u AS (
	SELECT ` + mirrorReturning + ` FROM journal WHERE id = ANY ($1::UUID[])
)` + mirrorStateSQL + `
SELECT count(*) FROM u`

// MirrorState copies the journal's state of the entries ids into journal_state and
// returns how many it copied: for a write of the journal's state columns made outside
// inboxd's statements (a test's own UPDATE standing for an engine's write).
func MirrorState(ctx context.Context, db database.DB, ids []string) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, mirrorStateOfSQL, ids).Scan(&n); err != nil {
		return 0, fmt.Errorf("mirroring the state of %d journal entries: %w", len(ids), err)
	}
	return n, nil
}
