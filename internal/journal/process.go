package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/message"
)

// Head is a pending journal entry locked for processing: by a batch's claim
// (ClaimHeads, LockBatch), or alone by LockPending.
type Head struct {
	ID          string
	EventType   string
	AggregateID string
	SequenceNo  int64
	Tag         string
	Payload     []byte
	Status      Status
	Attempts    int
	// Due reports next_attempt_at <= now(), by the database's clock.
	Due bool
	// TraceContext is the stored W3C trace context of the message ("" for none).
	TraceContext string
	// Blocked, set by a batch's claim, reports an earlier entry of its aggregate still
	// RECEIVED or FAILED outside the batch, or an earlier DEAD entry, not skipped, that
	// parks the aggregate. LockPending does not look (false).
	Blocked bool
}

// lockPendingSQL locks the entry's state row (journal_state), the one processing
// changes, alone in its sub-select, as every claim does (see lockHeadsSQL).
const lockPendingSQL = `
		SELECT j.id::TEXT, j.event_type, j.aggregate_id, j.sequence_no, j.tag, j.payload::TEXT, s.status, s.attempts,
		       s.next_attempt_at <= now()
		FROM (
			SELECT s.id, s.status, s.attempts, s.next_attempt_at FROM journal_state AS s
			WHERE s.id = $1 AND s.status IN ('RECEIVED', 'FAILED')
			FOR UPDATE) AS s
		JOIN journal AS j ON j.id = s.id`

// LockPending locks the entry for the rest of tx if it still waits for processing
// (RECEIVED or FAILED) and returns it. found is false when the entry does not exist or
// is already terminal: a duplicate delivery, a no-op. On PostgreSQL a row locked by
// another transaction is waited for and re-read, so the status seen here is the one
// the other transaction committed.
func LockPending(ctx context.Context, tx database.DB, id string) (p Head, found bool, err error) {
	err = tx.QueryRow(ctx, lockPendingSQL, id).Scan(&p.ID, &p.EventType, &p.AggregateID, &p.SequenceNo, &p.Tag, &p.Payload,
		&p.Status, &p.Attempts, &p.Due)
	if errors.Is(err, pgx.ErrNoRows) {
		return Head{}, false, nil
	}
	if err != nil {
		return Head{}, false, fmt.Errorf("locking journal entry %s: %w", id, err)
	}
	return p, true, nil
}

// maxErrorText bounds last_error: a handler may return a huge error string.
const maxErrorText = 4000

// errorText makes text from a handler (an error, a panic value) storable in a TEXT
// column of PostgreSQL and CockroachDB alike: valid UTF-8 (invalid bytes become U+FFFD),
// no NUL (which neither accepts in text), cut on a rune boundary to maxErrorText bytes.
// Anything else would fail the statement with SQLSTATE 22021 and, with it, the batch.
func errorText(s string) string { return storable(s, maxErrorText) }

// storable returns s as text PostgreSQL and CockroachDB accept, at most n bytes (and
// the ellipsis message.Truncate adds).
func storable(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	return message.Truncate(s, n)
}

// CountByStatus returns the number of entries in one status.
func CountByStatus(ctx context.Context, db database.DB, status Status) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM journal_state WHERE status = $1`, string(status)).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting %s journal entries: %w", status, err)
	}
	return n, nil
}

// RowsAsJSON returns journal entries as JSON objects, one key per column, the way a
// changefeed renders a row in "after" (ids and timestamps as strings, payload as a
// nested object): the journal's columns and its state's (stateColumnsJSON), as one row
// held them all before v0.3.0. It serves tools and tests that replay rows to the
// webhook. ids nil means every entry, in sequence_no order.
func RowsAsJSON(ctx context.Context, db database.DB, ids []string) ([]json.RawMessage, error) {
	rows, err := db.Query(ctx, `
		SELECT row_to_json(r)::TEXT FROM (
			SELECT j.*, `+stateColumnsJSON+`
			FROM journal AS j JOIN journal_state AS s ON s.id = j.id
			WHERE $1::UUID[] IS NULL OR j.id = ANY ($1::UUID[])) AS r
		ORDER BY r.sequence_no`, ids)
	if err != nil {
		return nil, fmt.Errorf("reading journal rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (json.RawMessage, error) {
		var s string
		err := r.Scan(&s)
		return json.RawMessage(s), err
	})
	if err != nil {
		return nil, fmt.Errorf("reading journal rows: %w", err)
	}
	return out, nil
}

// stateColumnsJSON are the state columns of s (journal_state) that a journal row held
// before v0.3.0, under the same names: what RowsAsJSON and Received add to j.*.
const stateColumnsJSON = `s.status, s.attempts, s.last_error, s.next_attempt_at, s.updated_at, s.processed_at,
       s.skipped_by, s.skipped_at, s.last_started_at, s.last_duration_ms`

// headColumns are a locked entry's columns: its state from s (journal_state), the rest
// from j (journal).
const headColumns = `j.id::TEXT, j.event_type, j.aggregate_id, j.sequence_no, j.tag, j.payload::TEXT, s.status,
       s.attempts, s.next_attempt_at <= now(), COALESCE(j.trace_context::TEXT, '')`

// scanHeads reads rows of headColumns, Blocked and a last column telling whether the
// row is claimed; the rows that are not are left out.
func scanHeads(rows pgx.Rows, what string) ([]Head, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Head, error) {
		var h Head
		var claimed bool
		err := r.Scan(&h.ID, &h.EventType, &h.AggregateID, &h.SequenceNo, &h.Tag, &h.Payload, &h.Status,
			&h.Attempts, &h.Due, &h.TraceContext, &h.Blocked, &claimed)
		if !claimed {
			h.ID = ""
		}
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return slices.DeleteFunc(out, func(h Head) bool { return h.ID == "" }), nil
}

// lockBatchSQL locks the state rows of entries $1 by primary key (alone in a sub-select,
// see lockHeadsSQL), in sequence order, and tells which are
// still pending (its last column). As in lockHeadsSQL, the WHERE clause is the key
// alone and the checks are in the select list, so that the plan is a primary-key
// lookup whatever the statistics say: with the status check in the WHERE clause, an
// analyzed journal of settled entries made PostgreSQL scan journal_pending and filter
// it by id. Each EXISTS stays a subplan that probes journal_state_pending or
// journal_state_parked for the locked row's aggregate. An aggregate under replay
// (replay_hold, see notHeld) blocks the entry too: it waits for the replay.
const lockBatchSQL = `
		SELECT ` + headColumns + `,
		       EXISTS (
			SELECT 1 FROM journal_state AS p
			WHERE p.aggregate_id = s.aggregate_id AND p.sequence_no < s.sequence_no
			  AND p.status IN ('RECEIVED', 'FAILED') AND p.id <> ALL ($1::UUID[]))
		       OR EXISTS (
			SELECT 1 FROM journal_state AS p
			WHERE p.aggregate_id = s.aggregate_id AND p.sequence_no < s.sequence_no
			  AND p.status = 'DEAD' AND p.skipped_at IS NULL)
		       OR EXISTS (SELECT 1 FROM replay_hold AS r WHERE r.aggregate_id = s.aggregate_id),
		       s.status IN ('RECEIVED', 'FAILED')
		FROM (
			SELECT s.id, s.aggregate_id, s.sequence_no, s.status, s.attempts, s.next_attempt_at
			FROM journal_state AS s
			WHERE s.id = ANY ($1::UUID[])
			ORDER BY s.sequence_no
			FOR UPDATE) AS s
		JOIN journal AS j ON j.id = s.id
		ORDER BY s.sequence_no`

// LockBatch locks, for the rest of tx, those of ids that are still pending, in
// sequence order (so that two batches sharing entries lock them in the same order and
// cannot deadlock), and returns them. A row another transaction holds is waited for
// and re-read. An entry already settled is locked too, but left out.
func LockBatch(ctx context.Context, tx database.DB, ids []string) ([]Head, error) {
	return LockBatchOpening(ctx, tx, ids, "")
}

// LockBatchOpening is LockBatch, then opens the savepoint named savepoint ("": none) in
// the same round trip (see lockOpening).
func LockBatchOpening(ctx context.Context, tx database.DB, ids []string, savepoint string) ([]Head, error) {
	return lockOpening(ctx, tx, "locking journal entries", savepoint, lockBatchSQL, ids)
}

// lockOpening runs a locking statement (lockBatchSQL, lockHeadsSQL) and returns the
// heads it claimed; then, when savepoint is not "", it opens that savepoint, in the
// same round trip: the savepoint the caller runs its first handler in, one round trip
// fewer per batch. The locks are taken before the savepoint, so that rolling back to it
// keeps them.
func lockOpening(ctx context.Context, tx database.DB, what, savepoint string, sql string, args ...any) ([]Head, error) {
	b, ok := tx.(batchSender)
	if savepoint == "" || !ok {
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		heads, err := scanHeads(rows, what)
		if err != nil || savepoint == "" {
			return heads, err
		}
		if _, err := tx.Exec(ctx, "SAVEPOINT "+savepoint); err != nil {
			return nil, fmt.Errorf("%s: opening savepoint: %w", what, err)
		}
		return heads, nil
	}
	batch := &pgx.Batch{}
	batch.Queue(sql, args...)
	batch.Queue("SAVEPOINT " + savepoint)
	br := b.SendBatch(ctx, batch)
	var heads []Head
	rows, err := br.Query()
	if err != nil {
		err = fmt.Errorf("%s: %w", what, err)
	} else {
		heads, err = scanHeads(rows, what)
	}
	if err == nil {
		if _, err = br.Exec(); err != nil {
			err = fmt.Errorf("%s: opening savepoint: %w", what, err)
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("%s: %w", what, cerr)
	}
	if err != nil {
		return nil, err
	}
	return heads, nil
}

// Outcome is the outcome of one entry in a processing batch.
type Outcome struct {
	ID     string
	Status Status // PROCESSED, REJECTED, FAILED or DEAD
	Error  string // the handler's error, for all but PROCESSED
	// Backoff is the delay before the next attempt of a FAILED entry.
	Backoff time.Duration
	// The attempt, for the history (journal_attempt): when its first handler run
	// started (zero: now), how long its runs took, and how many there were (zero: 1).
	StartedAt time.Time
	Took      time.Duration
	Runs      int
	// SkipDead, on a DEAD outcome, records it skipped by RunOnSkipper at once (its event
	// type runs on past DEAD), so that it does not park its aggregate (Settle only).
	SkipDead bool
}

func outcomeArgs(results []Outcome) []any {
	ids := make([]string, len(results))
	statuses := make([]string, len(results))
	errs := make([]*string, len(results))
	backoffs := make([]int64, len(results))
	for i, r := range results {
		ids[i], statuses[i], backoffs[i] = r.ID, string(r.Status), r.Backoff.Milliseconds()
		if r.Status != StatusProcessed {
			s := errorText(r.Error)
			errs[i] = &s
		}
	}
	started, took := runArgs(results)
	return []any{ids, statuses, errs, backoffs, started, took}
}

// runArgs are the start times (zero: now) and durations (ms) of results' attempts.
func runArgs(results []Outcome) (started []time.Time, took []int64) {
	started = make([]time.Time, len(results))
	took = make([]int64, len(results))
	now := time.Now()
	for i, r := range results {
		started[i], took[i] = r.StartedAt, r.Took.Milliseconds()
		if r.StartedAt.IsZero() {
			started[i] = now
		}
	}
	return started, took
}

// Attempt is one recorded handler attempt of a journal entry.
type Attempt struct {
	Attempt    int
	StartedAt  time.Time
	Duration   time.Duration
	Runs       int
	Outcome    string
	Error      *string
	RecordedAt time.Time
	// An operator's edit (Outcome OutcomeEdited, see EditAndRetry): who, from where, and
	// the payload as it was before it; nil and empty on a handler attempt.
	EditedBy   *string
	EditedFrom *string
	Original   json.RawMessage
}

// maxAttemptsRead bounds the timeline Attempts returns: the latest ones.
const maxAttemptsRead = 200

// attemptsSQL reads the history of entry $1, its latest $2 rows, and the PROCESSED
// attempt that historyOf left out of it, from the entry's state row (a row the history
// already holds for that attempt, written by an earlier release or after immediate
// retries, wins).
const attemptsSQL = `
		SELECT attempt, started_at, duration_ms, runs, outcome, error, recorded_at, edited_by, edited_from, original_payload
		FROM (
			(SELECT h.attempt, h.started_at, h.duration_ms, h.runs, h.outcome, h.error, h.recorded_at,
			        h.edited_by, h.edited_from, h.original_payload
			 FROM journal_attempt AS h WHERE h.journal_id = $1::UUID ORDER BY h.recorded_at DESC LIMIT $2::INT8)
			UNION ALL
			SELECT j.attempts::INT8, j.last_started_at, j.last_duration_ms, 1::INT8, 'PROCESSED'::TEXT, NULL::TEXT,
			       j.processed_at, NULL::TEXT, NULL::TEXT, NULL::JSONB
			FROM journal_state AS j
			WHERE j.id = $1::UUID AND j.status = 'PROCESSED' AND j.last_started_at IS NOT NULL
			  AND NOT EXISTS (SELECT 1 FROM journal_attempt AS x
			                  WHERE x.journal_id = j.id AND x.attempt = j.attempts AND x.outcome = 'PROCESSED')
		) AS a
		ORDER BY recorded_at`

// Attempts returns the attempt history of an entry, oldest first (the latest 200).
func Attempts(ctx context.Context, db database.DB, id string) ([]Attempt, error) {
	rows, err := db.Query(ctx, attemptsSQL, id, maxAttemptsRead)
	if err != nil {
		return nil, fmt.Errorf("reading the attempts of %s: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		var ms int64
		var orig []byte
		err := r.Scan(&a.Attempt, &a.StartedAt, &ms, &a.Runs, &a.Outcome, &a.Error, &a.RecordedAt, &a.EditedBy, &a.EditedFrom, &orig)
		a.Original = orig
		a.Duration = time.Duration(ms) * time.Millisecond
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the attempts of %s: %w", id, err)
	}
	return out, nil
}

// NoHandlerError is how the last_error of an attempt that found no handler begins
// (process.ErrNoHandler's text), which WakeNoHandler matches.
const NoHandlerError = "no handler registered for event type"

// wakeNoHandlerSQL makes due the FAILED entries of the given types whose last attempt
// found no handler and whose next attempt is still ahead (parked, or backing off). Its
// LIKE pattern is NoHandlerError's text.
const wakeNoHandlerSQL = `UPDATE journal_state AS s SET next_attempt_at = now(), updated_at = now()
	FROM journal AS j
	WHERE j.id = s.id AND s.status = 'FAILED' AND j.event_type = ANY($1::TEXT[]) AND s.next_attempt_at > now()
	  AND s.last_error LIKE 'no handler registered for event type%'
	RETURNING s.aggregate_id`

// WakeNoHandler makes the entries of eventTypes that failed for want of a handler due
// now, with their aggregates' heads, for an engine that starts with handlers for them;
// it returns how many.
func WakeNoHandler(ctx context.Context, db database.DB, eventTypes []string) (int, error) {
	if len(eventTypes) == 0 {
		return 0, nil
	}
	var n int
	err := inTx(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, wakeNoHandlerSQL, eventTypes)
		if err != nil {
			return err
		}
		aggs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		n = len(aggs)
		slices.Sort(aggs)
		return SyncHeads(ctx, tx, slices.Compact(aggs))
	})
	if err != nil {
		return 0, fmt.Errorf("waking the events that had no handler: %w", err)
	}
	return n, nil
}
