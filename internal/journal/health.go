package journal

import (
	"context"
	"fmt"
	"time"
)

// OldestWaiting returns how long the longest-waiting event that processing could take
// has waited, or 0 when none has waited longer than minAge. An event waits when it is
// RECEIVED (since received_at, whether a sweeper claimed it or not: a claim that does
// not finish is no progress), or FAILED and due (since next_attempt_at), and no earlier
// event of its aggregate is held back for a later retry (that one waits by design, and
// so do its successors).
//
// Each half reads one range of the journal_pending index and stops at its first row:
// unclaimed rows in next_attempt_at order, and the few rows whose next_attempt_at lies
// ahead (claimed, or FAILED and scheduled). Cheap enough to run every second.
func OldestWaiting(ctx context.Context, db DB, minAge time.Duration) (time.Duration, error) {
	var secs float64
	err := db.QueryRow(ctx, oldestWaitingSQL, minAge.Milliseconds()).Scan(&secs)
	if err != nil {
		return 0, fmt.Errorf("reading the oldest waiting event: %w", err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// oldestWaitingSQL is OldestWaiting's statement; $1 is minAge in milliseconds.
const oldestWaitingSQL = `		WITH unblocked AS (
			SELECT j.status, j.received_at, j.next_attempt_at FROM journal AS j
			WHERE j.status IN ('RECEIVED', 'FAILED')
			  AND NOT EXISTS (
				SELECT 1 FROM journal AS p
				WHERE p.aggregate_id = j.aggregate_id AND p.sequence_no < j.sequence_no
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
