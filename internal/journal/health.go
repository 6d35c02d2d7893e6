package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/database"
)

// OldestWaiting returns how long the longest-waiting event that processing could take
// has waited, or 0 when none has waited longer than minAge. Only an aggregate's head can
// be taken, and it has waited longest of its aggregate's events: a RECEIVED head since
// it was received (its due_at is its received_at: claims are row locks and never push a
// RECEIVED entry's next_attempt_at), a FAILED head since its retry came due. A FAILED
// head due later, and a parked aggregate, wait by design, and so do their successors.
//
// It reads the first row of each of the two ranges of aggregate_head_due (migration
// 0007), so its cost depends neither on the events waiting behind failed or parked heads
// nor on the journal's size: readiness runs it every second.
func OldestWaiting(ctx context.Context, db database.DB, minAge time.Duration) (time.Duration, error) {
	var secs float64
	err := db.QueryRow(ctx, oldestWaitingSQL, minAge.Milliseconds()).Scan(&secs)
	if err != nil {
		return 0, fmt.Errorf("reading the oldest waiting event: %w", err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// oldestWaitingSQL is OldestWaiting's statement; $1 is minAge in milliseconds. Each
// subquery is one descent of aggregate_head_due (received, due_at) WHERE NOT parked.
const oldestWaitingSQL = `
SELECT COALESCE(EXTRACT(EPOCH FROM now() - least(
	(SELECT min(h.due_at) FROM aggregate_head AS h
	 WHERE NOT h.parked AND NOT h.received AND h.due_at <= now() - $1::INT8 * INTERVAL '1 millisecond'),
	(SELECT min(h.due_at) FROM aggregate_head AS h
	 WHERE NOT h.parked AND h.received AND h.due_at <= now() - $1::INT8 * INTERVAL '1 millisecond'))), 0)::FLOAT8`
