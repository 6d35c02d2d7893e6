package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/database"
)

// RateBucket is one time bucket of Rates.
type RateBucket struct {
	Start     time.Time
	Journaled int64 // new journal rows received in the bucket (duplicates collapse, so not counted)
	Processed int64 // entries that became PROCESSED in the bucket
}

// Rates counts new journal rows and processed entries per bucket over the last window,
// on the database's clock, oldest bucket first and empty buckets included. It reads
// the partial indexes only, so its cost follows the window's traffic and the pending
// work, not the journal's size (received_at and processed_at carry no index, which
// would cost ingest on every insert): an entry settled in the window is found through
// journal_state_terminal (updated_at, which is its processed_at, and never before its
// received_at), one still pending through journal_state_pending, a DEAD one through
// journal_state_attention; received_at, the journal's, is read by key, one entry at a
// time (a LATERAL subquery with a LIMIT is not pulled up into a join): as a join, the
// generic plan hash-joined a scan of the journal to the settled entries of the window.
// https://www.cockroachlabs.com/docs/stable/subqueries#lateral-subqueries
func Rates(ctx context.Context, db database.DB, window, bucket time.Duration) ([]RateBucket, time.Time, error) {
	if bucket <= 0 || window < bucket {
		return nil, time.Time{}, fmt.Errorf("rates: window %s must be at least one bucket of %s", window, bucket)
	}
	var now time.Time
	if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, time.Time{}, fmt.Errorf("reading the database clock: %w", err)
	}
	n := int(window / bucket)
	// The last bucket is the one now falls in, so it fills as time passes.
	bs := int64(bucket / time.Second)
	if bs < 1 || bucket%time.Second != 0 {
		return nil, time.Time{}, fmt.Errorf("rates: bucket %s must be whole seconds", bucket)
	}
	firstIdx := now.Unix()/bs - int64(n-1)
	first := time.Unix(firstIdx*bs, 0)
	out := make([]RateBucket, n)
	for i := range out {
		out[i].Start = first.Add(time.Duration(i) * bucket).UTC()
	}
	rows, err := db.Query(ctx, ratesSQL, first, bucket.Seconds())
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("counting journal rates: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var b, r, p int64
		if err := rows.Scan(&b, &r, &p); err != nil {
			return nil, time.Time{}, fmt.Errorf("counting journal rates: %w", err)
		}
		if i := b - firstIdx; i >= 0 && i < int64(n) {
			out[i].Journaled, out[i].Processed = r, p
		}
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("counting journal rates: %w", err)
	}
	return out, now.UTC(), nil
}

// ratesSQL buckets the entries received ($1 is the window's start, $2 the bucket width in
// seconds) and settled in the window. Statuses are literals so that each branch's filter
// proves its partial index's predicate.
const ratesSQL = `SELECT b, sum(r)::INT8, sum(p)::INT8 FROM (
		SELECT floor(extract(epoch FROM j.received_at) / $2::FLOAT8)::INT8 AS b, 1 AS r, 0 AS p
		FROM journal_state AS s CROSS JOIN LATERAL (SELECT j.received_at FROM journal AS j WHERE j.id = s.id LIMIT 1) AS j
		WHERE s.status IN ('RECEIVED', 'FAILED') AND j.received_at >= $1::TIMESTAMPTZ
		UNION ALL
		SELECT floor(extract(epoch FROM j.received_at) / $2::FLOAT8)::INT8, 1, 0
		FROM journal_state AS s CROSS JOIN LATERAL (SELECT j.received_at FROM journal AS j WHERE j.id = s.id LIMIT 1) AS j
		WHERE s.status = 'DEAD' AND j.received_at >= $1::TIMESTAMPTZ
		UNION ALL
		SELECT floor(extract(epoch FROM j.received_at) / $2::FLOAT8)::INT8, 1, 0
		FROM journal_state AS s CROSS JOIN LATERAL (SELECT j.received_at FROM journal AS j WHERE j.id = s.id LIMIT 1) AS j
		WHERE s.status IN ('PROCESSED', 'REJECTED') AND s.updated_at >= $1::TIMESTAMPTZ AND j.received_at >= $1::TIMESTAMPTZ
		UNION ALL
		SELECT floor(extract(epoch FROM s.updated_at) / $2::FLOAT8)::INT8, 0, 1 FROM journal_state AS s
		WHERE s.status IN ('PROCESSED', 'REJECTED') AND s.updated_at >= $1::TIMESTAMPTZ
	) AS t GROUP BY b`
