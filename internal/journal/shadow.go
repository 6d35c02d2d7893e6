package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/database"
)

// Selection chooses the settled events a shadow run (internal/replay) runs again. Zero
// fields do not filter, except Statuses, whose zero value means PROCESSED and REJECTED.
type Selection struct {
	EventType   string
	Statuses    []Status
	Since       time.Time // received_at >= Since
	Until       time.Time // received_at < Until
	AggregateID string
	IDs         []string
}

// sqlSelectSettled reads one keyset page (sequence_no > $7, $8 rows) of the selection ($9: $6 lists ids):
// every filter is a parameter, empty meaning none, so that one constant statement
// serves every selection.
const sqlSelectSettled = `SELECT ` + recordColumns + `
	FROM journal
	WHERE status = ANY ($1::TEXT[])
	  AND ($2::TEXT = '' OR event_type = $2::TEXT)
	  AND ($3::TIMESTAMPTZ IS NULL OR received_at >= $3::TIMESTAMPTZ)
	  AND ($4::TIMESTAMPTZ IS NULL OR received_at < $4::TIMESTAMPTZ)
	  AND ($5::TEXT = '' OR aggregate_id = $5::TEXT)
	  AND (NOT $9::BOOL OR id = ANY ($6::UUID[]))
	  AND sequence_no > $7::INT8
	ORDER BY sequence_no
	LIMIT $8::INT8`

// SelectSettled returns up to limit events of s after sequence number after, in
// journal order: a page of a shadow run's selection.
func SelectSettled(ctx context.Context, db database.DB, s Selection, after int64, limit int) ([]Record, error) {
	statuses := make([]string, 0, len(s.Statuses))
	for _, st := range s.Statuses {
		statuses = append(statuses, string(st))
	}
	if len(statuses) == 0 {
		statuses = []string{string(StatusProcessed), string(StatusRejected)}
	}
	var since, until *time.Time
	if !s.Since.IsZero() {
		since = &s.Since
	}
	if !s.Until.IsZero() {
		until = &s.Until
	}
	ids := s.IDs
	if ids == nil {
		ids = []string{}
	}
	rows, err := db.Query(ctx, sqlSelectSettled, statuses, s.EventType, since, until, s.AggregateID, ids, after, limit, len(ids) > 0)
	if err != nil {
		return nil, fmt.Errorf("selecting events to shadow: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("selecting events to shadow: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("selecting events to shadow: %w", err)
	}
	return out, nil
}
