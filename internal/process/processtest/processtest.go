// Package processtest helps test processing end to end: it journals synthetic events
// and provides a handler whose business effect is a row in a test table, so that a
// test can check every event's effect happened exactly once and in aggregate order.
package processtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/testenv"
)

// EffectType is the event type the Effects handler is registered for.
const EffectType = "effect"

// Spec describes a synthetic event and how its handler behaves.
type Spec struct {
	ID        string `json:"id"`             // generated when empty
	Type      string `json:"type,omitempty"` // default EffectType
	Aggregate string `json:"aggregateId,omitempty"`
	FailTimes int    `json:"failTimes,omitempty"` // fail attempts 1..FailTimes, then succeed
	Always    bool   `json:"alwaysFail,omitempty"`
	Reject    bool   `json:"reject,omitempty"`
	Conflicts int    `json:"conflicts,omitempty"` // return SQLSTATE 40001 on the first n runs
	Panic     bool   `json:"panic,omitempty"`
	Extra     any    `json:"extra,omitempty"`
}

// NewID returns a random UUID.
func NewID() string { return message.NewID() }

// Payload renders the spec, filling in the id and type.
func Payload(s Spec) []byte {
	if s.ID == "" {
		s.ID = NewID()
	}
	if s.Type == "" {
		s.Type = EffectType
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

// Ingest journals the payloads, in order (so sequence_no follows the argument order),
// and returns their ids.
func Ingest(t testing.TB, db database.DB, payloads ...[]byte) []string {
	t.Helper()
	var b journal.Batch
	ids := make([]string, 0, len(payloads))
	for _, p := range payloads {
		ev, err := message.Decode(p, func(string) string { return "" }, message.Options{DefaultEventType: EffectType})
		if err != nil {
			t.Fatalf("decoding %s: %v", p, err)
		}
		b.Entries = append(b.Entries, journal.Entry{Event: ev, Destination: "/queue/test"})
		ids = append(ids, ev.ID)
	}
	// Ingest in chunks: one statement per chunk keeps the parameter arrays small.
	for len(b.Entries) > 0 {
		n := min(500, len(b.Entries))
		if _, err := journal.Ingest(context.Background(), db, journal.Batch{Entries: b.Entries[:n]}); err != nil {
			t.Fatalf("ingesting: %v", err)
		}
		b.Entries = b.Entries[n:]
	}
	return ids
}

// Effects is a handler whose business effect is one row in test_effects per event.
type Effects struct {
	mu        sync.Mutex
	conflicts map[string]int
	calls     map[string]int
}

// NewEffects creates the test_effects table and returns the handler.
func NewEffects(t testing.TB, db database.DB) *Effects {
	t.Helper()
	// No unique key on purpose: a second effect for one event must be visible, not refused.
	if _, err := db.Exec(context.Background(), `CREATE TABLE IF NOT EXISTS test_effects (
		n            BIGINT GENERATED ALWAYS AS IDENTITY,
		event_id     UUID   NOT NULL,
		aggregate_id TEXT   NOT NULL,
		sequence_no  BIGINT NOT NULL)`); err != nil {
		t.Fatalf("creating test_effects: %v", err)
	}
	return &Effects{conflicts: map[string]int{}, calls: map[string]int{}}
}

// Calls returns how many times the handler ran for an event (transaction retries and
// failed attempts included).
func (e *Effects) Calls(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[id]
}

// Handle implements process.Handler. It writes the effect first and fails afterwards,
// so a failure also proves the effect was rolled back.
func (e *Effects) Handle(ctx context.Context, tx pgx.Tx, ev process.Event) error {
	var s Spec
	if err := json.Unmarshal(ev.Payload, &s); err != nil {
		return process.Reject(err)
	}
	e.mu.Lock()
	e.calls[ev.ID]++
	conflict := e.conflicts[ev.ID] < s.Conflicts
	if conflict {
		e.conflicts[ev.ID]++
	}
	e.mu.Unlock()
	if _, err := tx.Exec(ctx, `INSERT INTO test_effects (event_id, aggregate_id, sequence_no) VALUES ($1, $2, $3)`,
		ev.ID, ev.AggregateID, ev.SequenceNo); err != nil {
		return err
	}
	switch {
	case conflict:
		// A real conflict of this transaction: the server fails it with 40001, as a
		// serialization failure would. (A 40001 the handler merely returns is a conflict
		// elsewhere, its own failure.)
		_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'restart transaction (simulated)' USING ERRCODE = '40001'; END $$`)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
			return fmt.Errorf("simulating a conflict: want SQLSTATE 40001, got %v", err)
		}
		return fmt.Errorf("simulated conflict: %w", err)
	case s.Panic:
		panic("simulated panic")
	case s.Reject:
		return process.Reject(errors.New("simulated rejection"))
	case s.Always:
		return fmt.Errorf("simulated permanent failure (attempt %d)", ev.Attempt)
	case ev.Attempt <= s.FailTimes:
		return fmt.Errorf("simulated transient failure (attempt %d of %d failing)", ev.Attempt, s.FailTimes)
	}
	return nil
}

// NoState is Report.ByStatus's key for journal entries without a journal_state row,
// which ingest never leaves.
const NoState journal.Status = "NO STATE"

// Report is what Check found.
type Report struct {
	Events    int                    // journal entries
	ByStatus  map[journal.Status]int // journal entries by status
	Effects   int                    // rows in test_effects
	Distinct  int                    // distinct events with an effect
	Duplicate int                    // events with more than one effect
}

// Check asserts the exactly-once invariant: every PROCESSED effect event has exactly
// one effect row, no other event has any, and each aggregate's effects were applied in
// sequence_no order.
func Check(t testing.TB, db database.DB) Report {
	t.Helper()
	var r Report
	var missing, orphan, disorder int
	if err := testenv.Observe(context.Background(), db, func(q pgx.Tx) (err error) {
		r, missing, orphan, disorder, err = check(q)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if r.Duplicate > 0 {
		t.Errorf("%d events have more than one effect", r.Duplicate)
	}
	if missing > 0 {
		t.Errorf("%d PROCESSED events have no effect", missing)
	}
	if orphan > 0 {
		t.Errorf("%d effects belong to events that are not PROCESSED", orphan)
	}
	if disorder > 0 {
		t.Errorf("%d effects were applied before an earlier event of their aggregate", disorder)
	}
	if n := r.ByStatus[NoState]; n > 0 {
		t.Errorf("%d journal entries have no journal_state row", n)
	}
	return r
}

// check reads what Check asserts.
func check(db database.DB) (r Report, missing, orphan, disorder int, err error) {
	ctx := context.Background()
	r = Report{ByStatus: map[journal.Status]int{}}
	// Every entry has its state (ingest writes both rows in one statement): an entry
	// without one is counted under NoState, which Check reports.
	rows, err := db.Query(ctx, `SELECT COALESCE(s.status, $1), count(*)
		FROM journal AS j LEFT JOIN journal_state AS s ON s.id = j.id GROUP BY 1`, string(NoState))
	if err != nil {
		return r, 0, 0, 0, fmt.Errorf("counting statuses: %w", err)
	}
	for rows.Next() {
		var s journal.Status
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return r, 0, 0, 0, fmt.Errorf("counting statuses: %w", err)
		}
		r.ByStatus[s] = n
		r.Events += n
	}
	if err := rows.Err(); err != nil {
		return r, 0, 0, 0, fmt.Errorf("counting statuses: %w", err)
	}
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM test_effects`).Scan(&r.Effects, &r.Distinct); err != nil {
		return r, 0, 0, 0, fmt.Errorf("counting effects: %w", err)
	}
	if err := db.QueryRow(ctx, `SELECT count(*) FROM (SELECT event_id FROM test_effects GROUP BY event_id HAVING count(*) > 1) AS d`).Scan(&r.Duplicate); err != nil {
		return r, 0, 0, 0, fmt.Errorf("counting duplicate effects: %w", err)
	}
	if err := db.QueryRow(ctx, `
		SELECT
		  (SELECT count(*) FROM journal j JOIN journal_state s ON s.id = j.id WHERE s.status = 'PROCESSED' AND j.event_type = $1
		     AND NOT EXISTS (SELECT 1 FROM test_effects e WHERE e.event_id = j.id)),
		  (SELECT count(*) FROM test_effects e JOIN journal_state s ON s.id = e.event_id WHERE s.status <> 'PROCESSED')`,
		EffectType).Scan(&missing, &orphan); err != nil {
		return r, 0, 0, 0, fmt.Errorf("counting missing and orphan effects: %w", err)
	}
	if err := db.QueryRow(ctx, `
		SELECT count(*) FROM (
			SELECT sequence_no < lag(sequence_no) OVER (PARTITION BY aggregate_id ORDER BY n) AS back
			FROM test_effects) AS o
		WHERE back`).Scan(&disorder); err != nil {
		return r, 0, 0, 0, fmt.Errorf("counting effects out of order: %w", err)
	}
	return r, missing, orphan, disorder, nil
}

// Status returns an entry's status and attempts.
func Status(t testing.TB, db database.DB, id string) (status journal.Status, attempts int, lastError string) {
	t.Helper()
	var le *string
	if err := testenv.Observe(context.Background(), db, func(q pgx.Tx) error {
		return q.QueryRow(context.Background(), `SELECT status, attempts, last_error FROM journal_state WHERE id = $1`, id).
			Scan(&status, &attempts, &le)
	}); err != nil {
		t.Fatalf("reading status of %s: %v", id, err)
	}
	if le != nil {
		lastError = *le
	}
	return status, attempts, lastError
}

// CountStatus returns the number of entries in a status.
func CountStatus(t testing.TB, db database.DB, status journal.Status) int {
	t.Helper()
	var n int64
	err := testenv.Observe(context.Background(), db, func(q pgx.Tx) (err error) {
		n, err = journal.CountByStatus(context.Background(), q, status)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}
