package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/database"
)

// The statements below serve the benchmark (internal/bench): the naive inbox it
// compares ingest with, and the checks it runs after each row.

// InsertOne is the textbook inbox write, one statement per message:
// INSERT … ON CONFLICT DO NOTHING, with the new row's state row (journal_state) in the
// same statement. It reports whether the row is new.
func InsertOne(ctx context.Context, db database.DB, e Entry) (bool, error) {
	var n int64
	err := db.QueryRow(ctx, `WITH ins AS (
		INSERT INTO journal (id, payload, event_type, aggregate_id, tag)
		VALUES ($1::UUID, $2::TEXT::JSONB, $3, $4, $5) ON CONFLICT (id) DO NOTHING
		RETURNING id, aggregate_id, sequence_no),
	st AS (
		INSERT INTO journal_state (id, aggregate_id, sequence_no)
		SELECT id, aggregate_id, sequence_no FROM ins
		RETURNING 1)
	SELECT count(*) FROM ins`,
		e.Event.ID, string(e.Event.Payload), e.Event.EventType, e.Event.AggregateID, e.Destination).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("inserting event %s: %w", e.Event.ID, err)
	}
	return n == 1, nil
}

// seedExpiredSQL writes n PROCESSED entries last updated age ago, for the benchmark of
// retention; their ids are random, their tag says what they are.
const seedExpiredSQL = `
WITH ins AS (
	INSERT INTO journal (id, payload, event_type, aggregate_id, tag)
	SELECT s.u, jsonb_build_object('id', s.u::TEXT), 'seed', 'seed', 'retention-seed'
	FROM (SELECT gen_random_uuid() AS u FROM generate_series(1, $1::INT8)) AS s
	RETURNING id, aggregate_id, sequence_no)
INSERT INTO journal_state (id, aggregate_id, sequence_no, status, updated_at, processed_at)
SELECT id, aggregate_id, sequence_no, 'PROCESSED',
       now() - $2::INT8 * INTERVAL '1 millisecond', now() - $2::INT8 * INTERVAL '1 millisecond'
FROM ins`

// SeedExpired writes n expired PROCESSED entries (the retention benchmark's backlog).
func SeedExpired(ctx context.Context, db database.DB, n int, age time.Duration) error {
	if _, err := db.Exec(ctx, seedExpiredSQL, n, age.Milliseconds()); err != nil {
		return fmt.Errorf("seeding %d expired entries: %w", n, err)
	}
	return nil
}

// Counts is how many rows the journal holds, by status, and the quarantine.
type Counts struct {
	Journal    int
	ByStatus   map[Status]int
	Quarantine int
}

// CountRows counts the journal by status and the quarantine.
func CountRows(ctx context.Context, db database.DB) (Counts, error) {
	return countRows(ctx, db, `SELECT status, count(*) FROM journal_state GROUP BY status`)
}

// IDs returns every journal id.
func IDs(ctx context.Context, db database.DB) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT id::TEXT FROM journal`)
	if err != nil {
		return nil, fmt.Errorf("listing journal ids: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("listing journal ids: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing journal ids: %w", err)
	}
	return ids, nil
}

// Timing is when one processed event was sent (the payload's "sentAt", as written by
// the publisher), journaled and processed.
type Timing struct {
	SentAt      string
	ReceivedAt  time.Time
	ProcessedAt time.Time
}

// ProcessedTimings returns the timings of every processed event whose payload has a
// "sentAt".
func ProcessedTimings(ctx context.Context, db database.DB) ([]Timing, error) {
	rows, err := db.Query(ctx, `SELECT j.payload->>'sentAt', j.received_at, s.processed_at
		FROM journal_state AS s JOIN journal AS j ON j.id = s.id
		WHERE s.processed_at IS NOT NULL AND j.payload->>'sentAt' IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("reading processing timings: %w", err)
	}
	defer rows.Close()
	var out []Timing
	for rows.Next() {
		var t Timing
		if err := rows.Scan(&t.SentAt, &t.ReceivedAt, &t.ProcessedAt); err != nil {
			return nil, fmt.Errorf("reading processing timings: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading processing timings: %w", err)
	}
	return out, nil
}

// Received returns, in sequence order, up to limit RECEIVED rows: each one's id and,
// unless its id is in seen, the JSON object of its columns (as a changefeed's "after");
// nil for the seen ones, so that only new rows are serialized. The benchmark's
// stand-in for a CockroachDB changefeed polls it and remembers what it emitted: a
// cursor on sequence_no would miss the rows of a batch that commits after a later
// one (commits in flight), which a rangefeed never misses. The partial pending index
// serves it.
func Received(ctx context.Context, db database.DB, seen []string, limit int) (ids []string, rows [][]byte, err error) {
	r, err := db.Query(ctx, `SELECT r.id::TEXT, CASE WHEN e.id IS NULL THEN row_to_json(r)::TEXT END
		FROM (SELECT j.*, `+stateColumnsJSON+`
		      FROM journal_state AS s JOIN journal AS j ON j.id = s.id
		      WHERE s.status = 'RECEIVED') AS r
		LEFT JOIN unnest($1::UUID[]) AS e(id) ON e.id = r.id
		ORDER BY r.sequence_no LIMIT $2`, seen, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("reading received journal rows: %w", err)
	}
	defer r.Close()
	for r.Next() {
		var (
			id  string
			row *string
		)
		if err := r.Scan(&id, &row); err != nil {
			return nil, nil, fmt.Errorf("reading received journal rows: %w", err)
		}
		ids = append(ids, id)
		if row == nil {
			rows = append(rows, nil)
		} else {
			rows = append(rows, []byte(*row))
		}
	}
	if err := r.Err(); err != nil {
		return nil, nil, fmt.Errorf("reading received journal rows: %w", err)
	}
	return ids, rows, nil
}

// Tags of the entries the benchmark writes straight into the journal.
const (
	SeedSettledTag = "bench-settled"
	SeedBlockedTag = "bench-blocked"
)

// seedSettledSQL writes $2 PROCESSED entries numbered from $1, received and settled
// over the last week, shaped like the demo's registration events.
const seedSettledSQL = `
WITH ins AS (
	INSERT INTO journal (id, payload, event_type, aggregate_id, tag, received_at)
	SELECT s.u, jsonb_build_object('id', s.u::TEXT, 'type', 'registration', 'aggregateId', 'settled-' || g::TEXT,
	         'jurisdiction', 'mga', 'email', 'settled-' || g::TEXT || '@example.com', 'name', 'Settled Customer ' || g::TEXT),
	       'registration', 'settled-' || g::TEXT, 'bench-settled', now() - (g % 604800) * INTERVAL '1 second'
	FROM (SELECT g, gen_random_uuid() AS u FROM generate_series($1::INT8, $1::INT8 + $2::INT8 - 1) AS g) AS s
	RETURNING id, aggregate_id, sequence_no, received_at)
INSERT INTO journal_state (id, aggregate_id, sequence_no, status, attempts, next_attempt_at, updated_at, processed_at)
SELECT id, aggregate_id, sequence_no, 'PROCESSED', 1, received_at, received_at, received_at FROM ins`

// SeedSettled writes n settled entries (the journal-size benchmark's history), a
// million per statement, and analyzes the journal as autovacuum would have by then.
// Settled entries are no aggregate's pending work, so nothing else needs to know them.
func SeedSettled(ctx context.Context, db database.DB, n int) error {
	const chunk = 1_000_000
	for from := 0; from < n; from += chunk {
		if _, err := db.Exec(ctx, seedSettledSQL, from+1, min(chunk, n-from)); err != nil {
			return fmt.Errorf("seeding settled entries %d–%d: %w", from+1, min(from+chunk, n), err)
		}
	}
	if err := analyzeJournal(ctx, db); err != nil {
		return err
	}
	return nil
}

// seedBlockedSQL writes, for $1 aggregates, a FAILED head whose next attempt is an hour
// ahead, and $2 RECEIVED events spread over those aggregates behind their heads: the
// state after a downstream outage. Sequence numbers are explicit (heads first), and the
// sequence is moved past them so that later ingest batches number after them.
const seedBlockedSQL = `
WITH ins AS (
	INSERT INTO journal (id, payload, event_type, aggregate_id, tag, sequence_no)
	SELECT s.u, jsonb_build_object('id', s.u::TEXT, 'type', 'registration', 'aggregateId', 'blocked-' || (n % $1::INT8)::TEXT),
	       'registration', 'blocked-' || (n % $1::INT8)::TEXT, 'bench-blocked', n + 1
	FROM (SELECT n, gen_random_uuid() AS u FROM generate_series(0, $1::INT8 + $2::INT8 - 1) AS n) AS s
	RETURNING id, aggregate_id, sequence_no
),
st AS (
	INSERT INTO journal_state (id, aggregate_id, sequence_no, status, attempts, last_error, next_attempt_at)
	SELECT id, aggregate_id, sequence_no,
	       CASE WHEN sequence_no <= $1::INT8 THEN 'FAILED' ELSE 'RECEIVED' END,
	       CASE WHEN sequence_no <= $1::INT8 THEN 1 ELSE 0 END,
	       CASE WHEN sequence_no <= $1::INT8 THEN 'downstream unavailable' END,
	       CASE WHEN sequence_no <= $1::INT8 THEN now() + INTERVAL '1 hour' ELSE now() END
	FROM ins
	RETURNING 1
)
SELECT setval('journal_sequence_no', (SELECT count(*) FROM ins) + 1)`

// SeedBlocked writes heads FAILED heads due in an hour and blocked RECEIVED events
// behind them (the backlog benchmark's setup), in one statement, on an empty journal,
// then their aggregate_head rows (RebuildHeads), as claims read those.
func SeedBlocked(ctx context.Context, db database.DB, heads, blocked int) error {
	if heads < 1 {
		return fmt.Errorf("seeding blocked events: %d heads", heads)
	}
	if _, err := db.Exec(ctx, seedBlockedSQL, heads, blocked); err != nil {
		return fmt.Errorf("seeding %d blocked events behind %d failed heads: %w", blocked, heads, err)
	}
	if err := RebuildHeads(ctx, db); err != nil {
		return err
	}
	if err := analyzeJournal(ctx, db); err != nil {
		return err
	}
	return nil
}

// CountPending counts RECEIVED and FAILED entries through journal_state_pending (literal
// statuses: a generic plan of status = $1 could not use the partial index and would
// read the whole journal).
func CountPending(ctx context.Context, db database.DB) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM journal_state WHERE status IN ('RECEIVED', 'FAILED')`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting pending journal entries: %w", err)
	}
	return n, nil
}

// CountRowsTagged is CountRows restricted to the journal entries of one tag (the
// quarantine is counted whole): the check of a row whose journal was pre-filled.
func CountRowsTagged(ctx context.Context, db database.DB, tag string) (Counts, error) {
	return countRows(ctx, db, `SELECT s.status, count(*) FROM journal_state AS s JOIN journal AS j ON j.id = s.id
		WHERE j.tag = $1 GROUP BY s.status`, tag)
}

// countRows runs a (status, count) query over the journal and counts the quarantine.
func countRows(ctx context.Context, db database.DB, byStatus string, args ...any) (Counts, error) {
	c := Counts{ByStatus: map[Status]int{}}
	rows, err := db.Query(ctx, byStatus, args...)
	if err != nil {
		return c, fmt.Errorf("counting journal rows: %w", err)
	}
	for rows.Next() {
		var s Status
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return c, fmt.Errorf("counting journal rows: %w", err)
		}
		c.ByStatus[s] = int(n)
		c.Journal += int(n)
	}
	if err := rows.Err(); err != nil {
		return c, fmt.Errorf("counting journal rows: %w", err)
	}
	var q int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM quarantine`).Scan(&q); err != nil {
		return c, fmt.Errorf("counting quarantine rows: %w", err)
	}
	c.Quarantine = int(q)
	return c, nil
}

// analyzeJournal analyzes the journal and its state rows, as autovacuum would have.
// One table per statement: CockroachDB's ANALYZE takes one
// (https://www.cockroachlabs.com/docs/stable/create-statistics).
func analyzeJournal(ctx context.Context, db database.DB) error {
	if _, err := db.Exec(ctx, `ANALYZE journal`); err != nil {
		return fmt.Errorf("analyzing the journal: %w", err)
	}
	if _, err := db.Exec(ctx, `ANALYZE journal_state`); err != nil {
		return fmt.Errorf("analyzing journal_state: %w", err)
	}
	return nil
}
