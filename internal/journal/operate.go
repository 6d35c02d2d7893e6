package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
)

// Operator actions.
//
// Retry and replay both requeue an entry the same way: status FAILED, attempts 0,
// next_attempt_at now(). A FAILED entry whose next attempt is due is exactly what the
// sweeper and the processing engine pick up, so no other component needs to know about
// operator actions. The default changefeed emits RECEIVED rows only, so a requeued entry
// is the sweeper's, within one sweep interval, whichever database. last_error and processed_at are left as they were: they
// are the history of the previous attempts, and the next attempt overwrites them.
// Requeueing an entry that is already due changes nothing an observer can act on, so
// every action is idempotent.

// ErrNotRetryable is returned by RetryOne for an entry that is not FAILED, DEAD or REJECTED.
var ErrNotRetryable = errors.New("entry is not FAILED, DEAD or REJECTED")

const requeueSet = `status = 'FAILED', attempts = 0, next_attempt_at = now(), updated_at = now(),
	skipped_by = NULL, skipped_at = NULL`

// RetryOne requeues one FAILED, DEAD or REJECTED entry. It returns the entry as it is
// afterwards; for an entry in another status it returns the entry and ErrNotRetryable.
func RetryOne(ctx context.Context, db database.DB, id string) (Record, error) {
	var r Record
	err := inTx(ctx, db, func(tx pgx.Tx) error {
		var err error
		r, err = retryInTx(ctx, tx, id)
		return err
	})
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Record{}, fmt.Errorf("retrying journal entry %s: %w", id, err)
	}
	r, err = Get(ctx, db, id)
	if err != nil {
		return Record{}, err
	}
	return r, ErrNotRetryable
}

// retryInTx is the one retry of one entry, shared by RetryOne and EditAndRetry: it
// requeues id if it is FAILED, DEAD or REJECTED (pgx.ErrNoRows otherwise) and moves its
// aggregate's head in the same transaction, unparking the aggregate of a DEAD head.
func retryInTx(ctx context.Context, tx pgx.Tx, id string) (Record, error) {
	r, err := scanRecord(tx.QueryRow(ctx, `WITH s AS (
		UPDATE journal_state SET `+requeueSet+`
		WHERE id = $1::UUID AND status IN ('FAILED', 'DEAD', 'REJECTED')
		RETURNING *)
		SELECT `+recordColumns+` FROM s JOIN journal AS j ON j.id = s.id`, id))
	if err != nil {
		return Record{}, err
	}
	return r, SyncHeads(ctx, tx, []string{r.AggregateID})
}

// RequeueMode says which entries a bulk requeue may touch.
type RequeueMode int

const (
	// Retry touches FAILED, DEAD and REJECTED entries only.
	Retry RequeueMode = iota
	// Replay touches every matching entry, PROCESSED ones included: handlers are
	// idempotent by event id, so processing an event again repeats no business effect.
	Replay
)

func (m RequeueMode) String() string {
	if m == Replay {
		return "replay"
	}
	return "retry"
}

// restrict narrows f's statuses to what the mode may touch. A Retry filter naming only
// statuses outside RetryableStatuses matches nothing.
func (m RequeueMode) restrict(f Filter) (Filter, bool) {
	if m != Retry {
		return f, true
	}
	if len(f.Statuses) == 0 {
		f.Statuses = RetryableStatuses
		return f, true
	}
	var keep []Status
	for _, s := range f.Statuses {
		if slices.Contains(RetryableStatuses, s) {
			keep = append(keep, s)
		}
	}
	f.Statuses = keep
	return f, len(keep) > 0
}

// CountMatching counts the entries a requeue with f and m would touch (a dry run). It
// counts through the same indexes as Requeue walks, so a retry's count costs what the
// FAILED, DEAD and REJECTED entries cost, whatever the journal's size.
func CountMatching(ctx context.Context, db database.DB, f Filter, m RequeueMode) (int64, error) {
	f, ok := m.restrict(f)
	if !ok {
		return 0, nil
	}
	var total int64
	err := eachScope(ctx, db, f, func(sc requeueScope) error {
		sql, args := countMatchingSQL(f, sc)
		var n int64
		if err := db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			return err
		}
		total += n
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("counting entries to %s: %w", m, err)
	}
	return total, nil
}

func countMatchingSQL(f Filter, sc requeueScope) (string, []any) {
	var args []any
	return "SELECT count(*) FROM " + sc.from() + whereClause(sc.where(f, &args)), args
}

// RequeueBatchSize bounds the rows one requeue statement updates, keeping each implicit
// transaction small (CockroachDB retries and intent sizes grow with the transaction).
const RequeueBatchSize = 500

// requeueScope is one index range that a bulk requeue walks in sequence_no order, by
// keyset: each batch continues where the previous one stopped, so no batch sorts or
// rereads the entries before it. Entries in FAILED, DEAD or REJECTED are walked one
// status at a time through journal_state_attention (status, sequence_no), each joined to
// its journal row by key; any other selection one event type at a time through
// journal_type_seq (event_type, sequence_no), each joined to its state row by key.
type requeueScope struct {
	status    Status // one of attentionStatuses, written into the SQL as a literal
	eventType string // when status is ""
}

// attentionStatuses are journal_state_attention's statuses, in the order a requeue walks them:
// FAILED first, so that the DEAD and REJECTED entries a retry turns FAILED are not
// walked (and counted) a second time.
var attentionStatuses = []Status{StatusFailed, StatusDead, StatusRejected}

// where is f's WHERE conditions (over recordFrom) restricted to the scope. A status is
// a literal, not a parameter, so that the planner proves journal_state_attention's
// predicate even in a generic plan.
func (sc requeueScope) where(f Filter, args *[]any) []string {
	if sc.status != "" {
		f.Statuses = nil
	} else {
		f.EventType = sc.eventType
	}
	conds := where(f, args)
	if sc.status != "" {
		conds = append(conds, "s.status = '"+string(sc.status)+"'")
	}
	return conds
}

// from is what the scope's statements read: recordFrom, led by the table whose index
// the scope walks (the journal's for an event type, journal_state's for a status).
func (sc requeueScope) from() string {
	if sc.status != "" {
		return recordFrom
	}
	return `journal AS j JOIN journal_state AS s ON s.id = j.id`
}

// seq is the sequence_no the scope walks: that of the table whose index it walks.
func (sc requeueScope) seq() string {
	if sc.status != "" {
		return "s.sequence_no"
	}
	return "j.sequence_no"
}

// attentionOnly reports whether every status f selects is one of journal_state_attention's.
func attentionOnly(f Filter) bool {
	if len(f.Statuses) == 0 {
		return false
	}
	for _, s := range f.Statuses {
		if !slices.Contains(attentionStatuses, s) {
			return false
		}
	}
	return true
}

// nextTypeSQL is the first event type after $1: one descent of journal_type_seq.
const nextTypeSQL = `SELECT event_type FROM journal WHERE event_type > $1::TEXT ORDER BY event_type LIMIT 1`

// eachScope calls fn with every scope that f's entries lie in.
func eachScope(ctx context.Context, db database.DB, f Filter, fn func(requeueScope) error) error {
	if attentionOnly(f) {
		for _, s := range attentionStatuses {
			if !slices.Contains(f.Statuses, s) {
				continue
			}
			if err := fn(requeueScope{status: s}); err != nil {
				return err
			}
		}
		return nil
	}
	if f.EventType != "" {
		return fn(requeueScope{eventType: f.EventType})
	}
	// Every event type, found one index descent at a time ("" sorts first).
	typ := ""
	for {
		err := db.QueryRow(ctx, nextTypeSQL, typ).Scan(&typ)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("finding the next event type: %w", err)
		}
		if err := fn(requeueScope{eventType: typ}); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// upperSQL is a scope's highest sequence_no: the last entry of its index range.
func (sc requeueScope) upperSQL() (string, []any) {
	if sc.status != "" {
		return "SELECT coalesce(max(sequence_no), 0) FROM journal_state WHERE status = '" + string(sc.status) + "'", nil
	}
	return `SELECT coalesce(max(sequence_no), 0) FROM journal WHERE event_type = $1::TEXT`, []any{sc.eventType}
}

// Requeue requeues every entry matching f that m may touch and returns how many it
// requeued. It walks the matching entries scope by scope (see requeueScope), in
// sequence_no order, one batch per statement, up to the highest sequence_no the scope
// held when its walk started, so entries ingested meanwhile cannot keep it running. It
// is not one transaction: if it fails halfway the entries already requeued stay
// requeued, and running it again is harmless.
func Requeue(ctx context.Context, db database.DB, f Filter, m RequeueMode) (int64, error) {
	f, ok := m.restrict(f)
	if !ok {
		return 0, nil
	}
	var total int64
	err := eachScope(ctx, db, f, func(sc requeueScope) error {
		sql, args := sc.upperSQL()
		var upper int64
		if err := db.QueryRow(ctx, sql, args...).Scan(&upper); err != nil {
			return fmt.Errorf("reading highest sequence number: %w", err)
		}
		var after int64 // sequence numbers start at 1
		for {
			sql, args := requeueSQL(f, m, sc, after, upper)
			var picked, last, updated int64
			err := inTx(ctx, db, func(tx pgx.Tx) error {
				var aggs []string
				if err := tx.QueryRow(ctx, sql, args...).Scan(&picked, &last, &updated, &aggs); err != nil {
					return err
				}
				return SyncHeads(ctx, tx, aggs)
			})
			if err != nil {
				return err
			}
			total += updated
			if picked < RequeueBatchSize {
				return nil
			}
			after = last
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	})
	if err != nil {
		return total, fmt.Errorf("requeueing entries (%s): %w", m, err)
	}
	return total, nil
}

// requeueSQL builds one batch of Requeue: entries of scope sc matching f with
// after < sequence_no <= upper, the next RequeueBatchSize in the scope's index order.
// It updates their state rows (journal_state) by key.
func requeueSQL(f Filter, m RequeueMode, sc requeueScope, after, upper int64) (string, []any) {
	var args []any
	conds := sc.where(f, &args)
	args = append(args, after, upper, RequeueBatchSize)
	n := len(args)
	seq := sc.seq()
	conds = append(conds, fmt.Sprintf("%s > $%d::INT8 AND %s <= $%d::INT8", seq, n-2, seq, n-1))
	// The status check is repeated on the UPDATE so that an entry the engine finished
	// between the two reads is left alone by a retry.
	recheck := ""
	if m == Retry {
		recheck = " AND status IN ('FAILED', 'DEAD', 'REJECTED')"
	}
	return `WITH picked AS (
				SELECT j.id, ` + seq + ` AS sequence_no FROM ` + sc.from() + whereClause(conds) + fmt.Sprintf(`
				ORDER BY %s LIMIT $%d::INT8
			),
			upd AS (
				UPDATE journal_state SET `+requeueSet+`
				WHERE id = ANY (ARRAY(SELECT id FROM picked))`+recheck+`
				RETURNING aggregate_id
			)
			SELECT (SELECT count(*) FROM picked), (SELECT coalesce(max(sequence_no), 0) FROM picked), (SELECT count(*) FROM upd),
			       ARRAY(SELECT DISTINCT aggregate_id FROM upd)`, seq, n), args
}

// ReinjectResult says what Reinject did.
type ReinjectResult struct {
	Record    QuarantineRecord // as it is afterwards
	Published bool             // false: it was already reinjected and force was not set
}

// Reinject hands a quarantined body to publish and then marks the row reinjected, while
// holding the row lock so that two concurrent calls publish it once. A row already
// reinjected is left alone unless force is set. If publish fails nothing is marked; if
// the commit fails after publishing, the body was published but the row is not marked,
// so a second call publishes it again (at least once, never lost).
func Reinject(ctx context.Context, db database.DB, id string, force bool,
	publish func(ctx context.Context, q QuarantineRecord, body []byte) error) (ReinjectResult, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return ReinjectResult{}, fmt.Errorf("reinjecting quarantine row %s: %w", id, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var body []byte
	q, err := scanQuarantine(tx.QueryRow(ctx, "SELECT "+quarantineColumns+", body FROM quarantine WHERE id = $1::UUID FOR UPDATE", id), &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return ReinjectResult{}, ErrNotFound
	}
	if err != nil {
		return ReinjectResult{}, fmt.Errorf("reading quarantine row %s: %w", id, err)
	}
	if q.ReinjectedAt != nil && !force {
		return ReinjectResult{Record: q}, nil
	}
	if bodyTruncated(q.Detail) {
		return ReinjectResult{Record: q}, fmt.Errorf("reinjecting quarantine row %s: %w", id, ErrBodyTruncated)
	}
	if err := publish(ctx, q, body); err != nil {
		return ReinjectResult{}, err
	}
	var at time.Time
	if err := tx.QueryRow(ctx, `UPDATE quarantine SET reinjected_at = now() WHERE id = $1::UUID RETURNING reinjected_at`, id).Scan(&at); err != nil {
		return ReinjectResult{}, fmt.Errorf("marking quarantine row %s reinjected: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return ReinjectResult{}, fmt.Errorf("marking quarantine row %s reinjected: %w", id, err)
	}
	q.ReinjectedAt = &at
	return ReinjectResult{Record: q, Published: true}, nil
}
