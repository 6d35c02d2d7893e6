package journal_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/schema"
)

// applyMigrations runs the statements of the migrations numbered from..to (inclusive) as
// the migrator runs them on PostgreSQL: one by one, an error its done-if names meaning
// done, the CockroachDB-only ones left out.
func applyMigrations(t *testing.T, pool *pgxpool.Pool, from, to int) {
	t.Helper()
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version < from || m.Version > to {
			continue
		}
		stmts, err := schema.Statements(m.SQL)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range stmts {
			if !st.RunsOn(schema.PostgreSQL) {
				continue
			}
			if _, err := pool.Exec(context.Background(), st.SQL); err != nil {
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && st.DoneIf != "" && pgErr.Code == st.DoneIf {
					continue
				}
				t.Fatalf("migration %s: %v\n%s", m.Name, err, st.SQL)
			}
		}
	}
}

// The contract migration (0028) on a database that v0.1.0 and v0.2.0 wrote: the
// journal's state columns were authoritative, v0.2.0 mirrored its writes into
// journal_state, and v0.1.0 did not. Afterwards every entry's state row holds what its
// journal row held, the journal's state columns and indexes are gone, the package reads
// the entries as they were, and the migration runs again as a no-op.
func TestContractMigrationKeepsEveryState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	applyMigrations(t, db.Pool, 0, 27)
	type state struct {
		status    string
		attempts  int
		lastError *string
		skippedBy *string
	}
	errText, skipper := "handler failed", "ops"
	entries := []struct {
		id, agg string
		journal state // in the journal's columns
		mirror  *state
	}{
		// Written by v0.1.0 only: no state row.
		{id: "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0b01", agg: "a", journal: state{status: "FAILED", attempts: 2, lastError: &errText}},
		// Ingested by v0.2.0, never processed: no state row ("as ingested").
		{id: "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0b02", agg: "b", journal: state{status: "RECEIVED"}},
		// Settled by v0.2.0: mirrored.
		{id: "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0b03", agg: "c", journal: state{status: "PROCESSED", attempts: 1},
			mirror: &state{status: "PROCESSED", attempts: 1}},
		// Mirrored by v0.2.0, then skipped by v0.1.0: the mirror is stale.
		{id: "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0b04", agg: "d", journal: state{status: "DEAD", attempts: 5, lastError: &errText, skippedBy: &skipper},
			mirror: &state{status: "DEAD", attempts: 5, lastError: &errText}},
	}
	for _, e := range entries {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO journal (id, payload, event_type, aggregate_id, status, attempts, last_error,
				skipped_by, skipped_at, processed_at)
			VALUES ($1::UUID, jsonb_build_object('id', $1::TEXT), 'e', $2::TEXT, $3::TEXT, $4::INT, $5::TEXT,
				$6::TEXT, CASE WHEN $6::TEXT IS NULL THEN NULL ELSE now() END,
				CASE WHEN $3::TEXT = 'PROCESSED' THEN now() END)`,
			e.id, e.agg, e.journal.status, e.journal.attempts, e.journal.lastError, e.journal.skippedBy); err != nil {
			t.Fatal(err)
		}
		if m := e.mirror; m != nil {
			if _, err := db.Pool.Exec(ctx, `INSERT INTO journal_state (id, aggregate_id, sequence_no, status, attempts, last_error,
					next_attempt_at, updated_at, processed_at)
				SELECT id, aggregate_id, sequence_no, $2::TEXT, $3::INT, $4::TEXT, next_attempt_at, updated_at - INTERVAL '1 second', processed_at
				FROM journal WHERE id = $1::UUID`, e.id, m.status, m.attempts, m.lastError); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func(table, id string) contractRow {
		var r contractRow
		if err := db.Pool.QueryRow(ctx, `SELECT status, aggregate_id, sequence_no, attempts, last_error, skipped_by,
				next_attempt_at, updated_at, processed_at, skipped_at FROM `+table+` WHERE id = $1::UUID`, id).Scan(
			&r.status, &r.aggregate, &r.seq, &r.attempts, &r.lastError, &r.skippedBy, &r.next, &r.updated, &r.processed, &r.skipped); err != nil {
			t.Fatalf("reading %s %s: %v", table, id, err)
		}
		return r
	}
	before := map[string]contractRow{}
	for _, e := range entries {
		before[e.id] = read("journal", e.id)
	}

	for range 2 { // the second run finds it done
		applyMigrations(t, db.Pool, 28, 28)
	}
	for _, e := range entries {
		got, want := read("journal_state", e.id), before[e.id]
		if !equalRows(got, want) {
			t.Errorf("%s: state %+v, want the journal's %+v", e.id, got, want)
		}
		r, err := journal.Get(ctx, db.Pool, e.id)
		if err != nil || string(r.Status) != want.status || r.Attempts != want.attempts || (r.SkippedBy == nil) != (want.skippedBy == nil) {
			t.Errorf("%s: Get = %+v, %v; want status %s, %d attempts", e.id, r, err, want.status, want.attempts)
		}
	}
	// An entry a v0.2.0 instance journals while 0028 runs, after its backfill, has no
	// state row: the migration's last step, run again here, gives it one, as ingested.
	const late = "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0b05"
	if _, err := db.Pool.Exec(ctx, `INSERT INTO journal (id, payload, event_type, aggregate_id, received_at)
		VALUES ($1::UUID, jsonb_build_object('id', $1::TEXT), 'e', 'e', now() - INTERVAL '1 minute')`, late); err != nil {
		t.Fatal(err)
	}
	applyMigrations(t, db.Pool, 28, 28)
	if r, err := journal.Get(ctx, db.Pool, late); err != nil || r.Status != journal.StatusReceived || r.Attempts != 0 ||
		!r.NextAttemptAt.Equal(r.ReceivedAt) || !r.UpdatedAt.Equal(r.ReceivedAt) {
		t.Errorf("entry journaled during the migration: %+v, %v; want RECEIVED, due since received", r, err)
	}
	var cols, idx int
	if err := db.Pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM information_schema.columns WHERE table_name = 'journal' AND column_name IN ('status', 'attempts',
				'last_error', 'next_attempt_at', 'updated_at', 'processed_at', 'skipped_by', 'skipped_at', 'last_started_at', 'last_duration_ms')),
			(SELECT count(*) FROM pg_indexes WHERE tablename = 'journal' AND indexname IN ('journal_aggregate_pending', 'journal_attention',
				'journal_aggregate_parked', 'journal_terminal', 'journal_pending'))`).Scan(&cols, &idx); err != nil {
		t.Fatal(err)
	}
	if cols != 0 || idx != 0 {
		t.Errorf("after the contract: %d state columns and %d state indexes left on the journal, want none", cols, idx)
	}
}

func equalRows(a, b contractRow) bool { return a.String() == b.String() }

// contractRow is one entry's state as a table holds it.
type contractRow struct {
	status, aggregate    string
	seq                  int64
	attempts             int
	lastError, skippedBy *string
	next, updated        time.Time
	processed, skipped   *time.Time
}

func (r contractRow) String() string {
	str := func(p *string) string {
		if p == nil {
			return "NULL"
		}
		return *p
	}
	at := func(p *time.Time) string {
		if p == nil {
			return "NULL"
		}
		return p.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s %s %d %d %s %s %s %s %s %s", r.status, r.aggregate, r.seq, r.attempts, str(r.lastError),
		str(r.skippedBy), at(&r.next), at(&r.updated), at(r.processed), at(r.skipped))
}
