package schema_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/schema"
)

// Issue 22.3: a journal written before migration 0013 (id generated from payload->>'id')
// keeps its rows and their ids; its events' redeliveries still collapse onto them; and
// after it an entry with a non-UUID id is journaled under its computed key.
func TestMigration0013KeepsExistingJournal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	// A fresh, empty schema first in the search path stands in for a database that
	// stopped before 0013.
	if _, err := db.Pool.Exec(ctx, "CREATE SCHEMA before0013"); err != nil {
		t.Fatal(err)
	}
	pool := db.OpenPool(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["search_path"] = "before0013"
	})
	testenv.MigrateBefore(t, pool, 13)
	const old = "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"
	oldBody := `{"id":"6F1C1F0E-1C3A-4C55-9A65-8B7E2D1F0A01","type":"t"}`
	// Written as the old ingest did: the id computed by the database.
	if _, err := pool.Exec(ctx, `INSERT INTO journal (payload, event_type, aggregate_id) VALUES ($1::TEXT::JSONB, 't', 'a')`, oldBody); err != nil {
		t.Fatal(err)
	}

	for range 2 { // idempotent: a second run (as after a crash before it was recorded) is harmless
		if _, err := pool.Exec(ctx, `DELETE FROM schema_migrations WHERE version = 13`); err != nil {
			t.Fatal(err)
		}
		// Later migrations (0014, …) are applied by the first run too; forced past 0028's
		// requirement of v0.2.0, since no older release writes to this database.
		applied, err := schema.MigrateWith(ctx, pool, schema.Options{Force: true})
		if err != nil || len(applied) == 0 || applied[0] != "0013_journal_id_key.sql" {
			t.Fatalf("Migrate = %v, %v; want 0013 applied", applied, err)
		}
	}
	var generated string
	if err := pool.QueryRow(ctx, `SELECT is_generated FROM information_schema.columns
		WHERE table_schema = 'before0013' AND table_name = 'journal' AND column_name = 'id'`).Scan(&generated); err != nil || generated != "NEVER" {
		t.Fatalf("journal.id is_generated = %q (%v), want NEVER", generated, err)
	}
	r, err := journal.Get(ctx, pool, old) // what GET /journal/{id} reads
	if err != nil || r.ID != old {
		t.Fatalf("journal.Get(%s) after 0013 = %+v, %v", old, r, err)
	}

	decode := func(body string) journal.Entry {
		ev, err := message.Decode([]byte(body), func(string) string { return "" }, message.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return journal.Entry{Event: ev, Destination: "/queue/q"}
	}
	res, err := journal.Ingest(ctx, pool, journal.Batch{Entries: []journal.Entry{
		decode(oldBody), decode(`{"id":"evt-456","type":"t"}`), decode(`{"id":"evt-456","type":"t"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Inserted != 1 || res.Duplicates != 2 {
		t.Fatalf("ingest after 0013 = %+v, want the old event a duplicate and evt-456 inserted once", res)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM journal`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("journal rows = %d (%v), want 2", n, err)
	}
	if _, err := journal.Get(ctx, pool, message.JournalID("evt-456")); err != nil {
		t.Fatalf("evt-456 under its computed key %s: %v", message.JournalID("evt-456"), err)
	}
}
