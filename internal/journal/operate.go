package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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

// RetryableStatuses are the statuses an operator retry applies to.
var RetryableStatuses = []string{StatusFailed, StatusDead, StatusRejected}

// ErrNotRetryable is returned by RetryOne for an entry that is not FAILED, DEAD or REJECTED.
var ErrNotRetryable = errors.New("entry is not FAILED, DEAD or REJECTED")

const requeueSet = `status = 'FAILED', attempts = 0, next_attempt_at = now(), updated_at = now()`

// RetryOne requeues one FAILED, DEAD or REJECTED entry. It returns the entry as it is
// afterwards; for an entry in another status it returns the entry and ErrNotRetryable.
func RetryOne(ctx context.Context, db DB, id string) (Record, error) {
	r, err := scanRecord(db.QueryRow(ctx, `UPDATE journal SET `+requeueSet+`
		WHERE id = $1::UUID AND status IN ('FAILED', 'DEAD', 'REJECTED')
		RETURNING `+recordColumns, id))
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
	var keep []string
	for _, s := range f.Statuses {
		for _, r := range RetryableStatuses {
			if s == r {
				keep = append(keep, s)
			}
		}
	}
	f.Statuses = keep
	return f, len(keep) > 0
}

// CountMatching counts the entries a requeue with f and m would touch (a dry run).
func CountMatching(ctx context.Context, db DB, f Filter, m RequeueMode) (int64, error) {
	f, ok := m.restrict(f)
	if !ok {
		return 0, nil
	}
	sql, args := countMatchingSQL(f)
	var n int64
	if err := db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting entries to %s: %w", m, err)
	}
	return n, nil
}

func countMatchingSQL(f Filter) (string, []any) {
	var args []any
	return "SELECT count(*) FROM journal" + whereClause(where(f, &args)), args
}

// RequeueBatchSize bounds the rows one requeue statement updates, keeping each implicit
// transaction small (CockroachDB retries and intent sizes grow with the transaction).
const RequeueBatchSize = 500

// Requeue requeues every entry matching f that m may touch and returns how many it
// requeued. It walks the matching entries in sequence_no order, one batch per statement,
// up to the highest sequence_no present when it started, so entries ingested meanwhile
// cannot keep it running. It is not one transaction: if it fails halfway the entries
// already requeued stay requeued, and running it again is harmless.
func Requeue(ctx context.Context, db DB, f Filter, m RequeueMode) (int64, error) {
	f, ok := m.restrict(f)
	if !ok {
		return 0, nil
	}
	var upper int64
	if err := db.QueryRow(ctx, `SELECT coalesce(max(sequence_no), 0) FROM journal`).Scan(&upper); err != nil {
		return 0, fmt.Errorf("reading highest sequence number: %w", err)
	}
	var total int64
	var after int64 // sequence numbers start at 1
	for {
		sql, args := requeueSQL(f, m, after, upper)
		var picked, last, updated int64
		if err := db.QueryRow(ctx, sql, args...).Scan(&picked, &last, &updated); err != nil {
			return total, fmt.Errorf("requeueing entries (%s): %w", m, err)
		}
		total += updated
		if picked < RequeueBatchSize {
			return total, nil
		}
		after = last
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// requeueSQL builds one batch of Requeue: entries matching f with after < sequence_no <= upper.
func requeueSQL(f Filter, m RequeueMode, after, upper int64) (string, []any) {
	var args []any
	conds := where(f, &args)
	args = append(args, after, upper, RequeueBatchSize)
	n := len(args)
	conds = append(conds, fmt.Sprintf("sequence_no > $%d::INT8 AND sequence_no <= $%d::INT8", n-2, n-1))
	// The status check is repeated on the UPDATE so that an entry the engine finished
	// between the two reads is left alone by a retry.
	recheck := ""
	if m == Retry {
		recheck = " AND status IN ('FAILED', 'DEAD', 'REJECTED')"
	}
	return `WITH picked AS (
				SELECT id, sequence_no FROM journal` + whereClause(conds) + fmt.Sprintf(`
				ORDER BY sequence_no LIMIT $%d::INT8
			),
			upd AS (
				UPDATE journal SET `+requeueSet+`
				WHERE id IN (SELECT id FROM picked)`+recheck+`
				RETURNING 1
			)
			SELECT (SELECT count(*) FROM picked), (SELECT coalesce(max(sequence_no), 0) FROM picked), (SELECT count(*) FROM upd)`, n), args
}

// Beginner starts a transaction; *pgxpool.Pool is one.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
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
func Reinject(ctx context.Context, db Beginner, id string, force bool,
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
