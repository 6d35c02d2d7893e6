package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
)

// Retention of the journal, on PostgreSQL and, from v0.3.0, on CockroachDB too: a
// row-level TTL expression reads its own row only, and the journal's status is on
// journal_state's. (The quarantine and the attempt history expire by row-level TTL on
// CockroachDB, see internal/feed.) Each statement deletes at most limit rows, oldest
// first, through a partial index (journal_state_terminal, quarantine_received), so one pass is a short transaction whatever
// the backlog. Only PROCESSED and REJECTED entries expire: RECEIVED and FAILED entries
// still need work, DEAD ones need an operator.

// pruneJournalSQL deletes terminal entries last updated more than $1 ms ago. SKIP LOCKED
// leaves rows an operator or the engine holds; the outer status check is repeated in
// case a row changed status between the two reads.
// The expired entries are found through their state rows (journal_state_terminal), and
// each entry's two rows, journal and journal_state, are deleted together, with its
// attempt history (journal_attempt), in the same statement, each by its key.
const pruneJournalSQL = `
WITH gone AS (
	DELETE FROM journal_state
	WHERE id IN (
		SELECT id FROM journal_state
		WHERE status IN ('PROCESSED', 'REJECTED') AND updated_at < now() - $1::INT8 * INTERVAL '1 millisecond'
		ORDER BY updated_at
		LIMIT $2::INT8
		FOR UPDATE SKIP LOCKED)
	  AND status IN ('PROCESSED', 'REJECTED')
	RETURNING id),
entries AS (
	DELETE FROM journal WHERE id IN (SELECT id FROM gone) RETURNING 1),
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

// Replay runs that ended (done or cancelled) before the horizon are deleted with their
// items, and with any hold they left, a bounded batch per statement; a run that is
// planned, running or paused is kept however old. journal_attempt.replay_run names a
// run with no foreign key, so the attempt history stays as it is.

// sqlDueReplayRun is the oldest run that ended before the horizon, through
// replay_run_finished.
const sqlDueReplayRun = `SELECT id::TEXT FROM replay_run
	WHERE state IN ('done', 'cancelled') AND finished_at < now() - $1::INT8 * INTERVAL '1 millisecond'
	ORDER BY finished_at
	LIMIT 1`

// sqlPruneReplayItems deletes up to $2 items of run $1 by its key (run_id, position),
// and the run's holds of their aggregates by theirs (aggregate_id, run_id).
const sqlPruneReplayItems = `
WITH items AS (
	DELETE FROM replay_item
	WHERE run_id = $1::UUID AND position IN (
		SELECT position FROM replay_item WHERE run_id = $1::UUID ORDER BY position LIMIT $2::INT8)
	RETURNING aggregate_id),
holds AS (
	DELETE FROM replay_hold WHERE run_id = $1::UUID AND aggregate_id IN (SELECT aggregate_id FROM items)
	RETURNING 1)
SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM holds)`

// sqlPruneReplayRun deletes an ended run once its items are gone. The state check is
// repeated: only ended runs are ever deleted.
const sqlPruneReplayRun = `DELETE FROM replay_run
	WHERE id = $1::UUID AND state IN ('done', 'cancelled')
	  AND NOT EXISTS (SELECT 1 FROM replay_item WHERE run_id = $1::UUID)`

// PruneReplayRuns deletes up to limit rows (items and runs) of the replay runs that
// ended more than retention ago, oldest run first, and returns how many it deleted:
// fewer than limit when nothing more is due.
func PruneReplayRuns(ctx context.Context, db database.DB, retention time.Duration, limit int) (int64, error) {
	var deleted int64
	for deleted < int64(limit) {
		var run string
		err := db.QueryRow(ctx, sqlDueReplayRun, retention.Milliseconds()).Scan(&run)
		if errors.Is(err, pgx.ErrNoRows) {
			return deleted, nil
		}
		if err != nil {
			return deleted, fmt.Errorf("finding replay runs that ended more than %s ago: %w", retention, err)
		}
		want := int64(limit) - deleted
		var items, holds int64
		if err := db.QueryRow(ctx, sqlPruneReplayItems, run, want).Scan(&items, &holds); err != nil {
			return deleted, fmt.Errorf("deleting replay run %s's items: %w", run, err)
		}
		deleted += items
		if items == want {
			return deleted, nil // the batch is full; the run's next items go in the next one
		}
		tag, err := db.Exec(ctx, sqlPruneReplayRun, run)
		if err != nil {
			return deleted, fmt.Errorf("deleting replay run %s: %w", run, err)
		}
		if tag.RowsAffected() == 0 {
			// Not deleted (items inserted meanwhile cannot happen to an ended run, so
			// this is a concurrent pruner): stop here rather than pick it again.
			return deleted, nil
		}
		deleted += tag.RowsAffected()
	}
	return deleted, nil
}
