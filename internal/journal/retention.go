package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/database"
)

// Retention on PostgreSQL (CockroachDB uses row-level TTL instead, see internal/feed).
// Each statement deletes at most limit rows, oldest first, through a partial index
// (journal_terminal, quarantine_received), so one pass is a short transaction whatever
// the backlog. Only PROCESSED and REJECTED entries expire: RECEIVED and FAILED entries
// still need work, DEAD ones need an operator.

// pruneJournalSQL deletes terminal entries last updated more than $1 ms ago. SKIP LOCKED
// leaves rows an operator or the engine holds; the outer status check is repeated in
// case a row changed status between the two reads.
// The entries' attempt history (journal_attempt) goes with them, in the same statement,
// through its key (journal_id first).
const pruneJournalSQL = `
WITH gone AS (
	DELETE FROM journal
	WHERE id IN (
		SELECT id FROM journal
		WHERE status IN ('PROCESSED', 'REJECTED') AND updated_at < now() - $1::INT8 * INTERVAL '1 millisecond'
		ORDER BY updated_at
		LIMIT $2::INT8
		FOR UPDATE SKIP LOCKED)
	  AND status IN ('PROCESSED', 'REJECTED')
	RETURNING id),
history AS (
	DELETE FROM journal_attempt WHERE journal_id IN (SELECT id FROM gone) RETURNING 1)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM history)`

// pruneQuarantineSQL deletes quarantine rows received more than $1 ms ago.
const pruneQuarantineSQL = `
DELETE FROM quarantine
WHERE id IN (
	SELECT id FROM quarantine
	WHERE received_at < now() - $1::INT8 * INTERVAL '1 millisecond'
	ORDER BY received_at
	LIMIT $2::INT8
	FOR UPDATE SKIP LOCKED)`

// PruneJournal deletes up to limit PROCESSED or REJECTED entries older than retention
// and returns how many it deleted.
func PruneJournal(ctx context.Context, db database.DB, retention time.Duration, limit int) (int64, error) {
	var n, attempts int64
	if err := db.QueryRow(ctx, pruneJournalSQL, retention.Milliseconds(), limit).Scan(&n, &attempts); err != nil {
		return 0, fmt.Errorf("deleting journal entries older than %s: %w", retention, err)
	}
	return n, nil
}

// PruneQuarantine deletes up to limit quarantine rows older than retention.
func PruneQuarantine(ctx context.Context, db database.DB, retention time.Duration, limit int) (int64, error) {
	tag, err := db.Exec(ctx, pruneQuarantineSQL, retention.Milliseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("deleting quarantine rows older than %s: %w", retention, err)
	}
	return tag.RowsAffected(), nil
}
