package journal

import (
	"context"
	"errors"
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

// selectionArgs are a Selection's statement arguments: the default statuses, and
// NULL for a zero time.
type selectionArgs struct {
	statuses     []string
	since, until *time.Time
	ids          []string
}

func (s Selection) args() selectionArgs {
	a := selectionArgs{ids: s.IDs}
	for _, st := range s.Statuses {
		a.statuses = append(a.statuses, string(st))
	}
	if len(a.statuses) == 0 {
		a.statuses = []string{string(StatusProcessed), string(StatusRejected)}
	}
	if !s.Since.IsZero() {
		a.since = &s.Since
	}
	if !s.Until.IsZero() {
		a.until = &s.Until
	}
	if a.ids == nil {
		a.ids = []string{}
	}
	return a
}

// selectionWhere is a shadow or replay selection ($1 statuses, $2 type, $3/$4 received
// from/until, $5 aggregate, $6 ids when $9), over recordFrom: empty meaning none.
const selectionWhere = `
	WHERE s.status = ANY ($1::TEXT[])
	  AND ($2::TEXT = '' OR j.event_type = $2::TEXT)
	  AND ($3::TIMESTAMPTZ IS NULL OR j.received_at >= $3::TIMESTAMPTZ)
	  AND ($4::TIMESTAMPTZ IS NULL OR j.received_at < $4::TIMESTAMPTZ)
	  AND ($5::TEXT = '' OR j.aggregate_id = $5::TEXT)
	  AND (NOT $9::BOOL OR j.id = ANY ($6::UUID[]))`

// sqlSelectSettled reads one keyset page (sequence_no > $7, $8 rows) of the selection ($9: $6 lists ids):
// every filter is a parameter, empty meaning none, so that one constant statement
// serves every selection.
const sqlSelectSettled = `SELECT ` + recordColumns + `
	FROM ` + recordFrom + selectionWhere + `
	  AND j.sequence_no > $7::INT8
	ORDER BY j.sequence_no
	LIMIT $8::INT8`

// SelectSettled returns up to limit events of s after sequence number after, in
// journal order: a page of a shadow run's selection.
func SelectSettled(ctx context.Context, db database.DB, s Selection, after int64, limit int) ([]Record, error) {
	a := s.args()
	rows, err := db.Query(ctx, sqlSelectSettled, a.statuses, s.EventType, a.since, a.until, s.AggregateID, a.ids, after, limit, len(a.ids) > 0)
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

// PlanItem is one event of a replay plan, in journal order.
type PlanItem struct {
	ID          string
	EventType   string
	AggregateID string
	SequenceNo  int64
	// Selected: the selection chose it; otherwise the tail rule added it.
	Selected bool
}

// ErrPlanTooLarge is PlanReplay's error for a plan of more than its limit of events.
var ErrPlanTooLarge = errors.New("replay plan too large")

// sqlPlanReplay is the selection of sqlSelectSettled (without its page) plus, with $7,
// the tail rule: for each aggregate with a selected event, every later event of it
// that was already settled (PROCESSED or REJECTED), so that a replay reapplies the
// aggregate's history after the first replayed event in journal order. $8 bounds the
// rows read (the caller asks for one more than it accepts, to tell a plan too large).
const sqlPlanReplay = `
WITH sel AS (
	SELECT j.id, j.aggregate_id, j.sequence_no FROM ` + recordFrom + selectionWhere + `
),
firsts AS (
	SELECT aggregate_id, min(sequence_no) AS first_seq FROM sel GROUP BY aggregate_id
),
tail AS (
	SELECT s.id FROM journal_state AS s JOIN firsts AS f ON s.aggregate_id = f.aggregate_id
	WHERE $7::BOOL AND s.sequence_no > f.first_seq AND s.status IN ('PROCESSED', 'REJECTED')
)
SELECT j.id::TEXT, j.event_type, j.aggregate_id, j.sequence_no, j.id IN (SELECT id FROM sel)
FROM journal AS j
WHERE j.id IN (SELECT id FROM sel UNION SELECT id FROM tail)
ORDER BY j.sequence_no
LIMIT $8::INT8`

// PlanReplay returns the events a replay of s would run, in journal order: the
// selected ones and, with tail, the later settled events of their aggregates. It
// returns ErrPlanTooLarge past limit events.
func PlanReplay(ctx context.Context, db database.DB, s Selection, tail bool, limit int) ([]PlanItem, error) {
	a := s.args()
	rows, err := db.Query(ctx, sqlPlanReplay, a.statuses, s.EventType, a.since, a.until, s.AggregateID, a.ids, tail, limit+1, len(a.ids) > 0)
	if err != nil {
		return nil, fmt.Errorf("planning a replay: %w", err)
	}
	defer rows.Close()
	var out []PlanItem
	for rows.Next() {
		var it PlanItem
		if err := rows.Scan(&it.ID, &it.EventType, &it.AggregateID, &it.SequenceNo, &it.Selected); err != nil {
			return nil, fmt.Errorf("planning a replay: %w", err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("planning a replay: %w", err)
	}
	if len(out) > limit {
		return nil, fmt.Errorf("%w: more than %d events", ErrPlanTooLarge, limit)
	}
	return out, nil
}
