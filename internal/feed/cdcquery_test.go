package feed

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testenv"
)

// Issue 19: the outbox feed's `WHERE sent_at IS NULL` let the relay's cleanup deletes
// through. A CDC query evaluates a delete with every column but the primary key NULL
// and event_op() = 'delete'; an insert or update without diff has event_op() = 'upsert'
// (docs cdc-queries, "CDC query function support", "Capture delete messages"). This
// evaluates each feed's WHERE clause for such rows on PostgreSQL: the expressions are
// plain SQL once event_op() is a value.
func TestFeedPredicates(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	const id = "'6f1d2a3e-0000-4000-8000-000000000001'::UUID"
	journalStmt, err := BuildCreate(DefaultOptions("webhook-https://inboxd:8443/changefeed", testCA, "Bearer t"))
	if err != nil {
		t.Fatal(err)
	}
	outboxStmt, err := BuildOutboxCreate(DefaultOptions("webhook-https://inboxd:8443/changefeed/outbox", testCA, "Bearer t"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, stmt, table string
		op                string            // event_op()
		row               map[string]string // column → SQL value
		emitted           bool
	}{
		{"outbox insert", outboxStmt, "outbox", "upsert", map[string]string{"id": id, "sent_at": "NULL::TIMESTAMPTZ"}, true},
		{"outbox marked sent", outboxStmt, "outbox", "upsert", map[string]string{"id": id, "sent_at": "now()"}, false},
		{"outbox cleanup delete", outboxStmt, "outbox", "delete", map[string]string{"id": id, "sent_at": "NULL::TIMESTAMPTZ"}, false},
		// The journal row is written by ingest, and rewritten only by an operator's edit
		// (which retries the entry): both are emitted. Processing writes journal_state.
		{"journal insert", journalStmt, "journal", "upsert", map[string]string{"id": id, "event_type": "'t'"}, true},
		{"journal edit", journalStmt, "journal", "upsert", map[string]string{"id": id, "event_type": "'t'"}, true},
		{"journal retention delete", journalStmt, "journal", "delete", map[string]string{"id": id, "event_type": "NULL::TEXT"}, false},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, query, ok := strings.Cut(tt.stmt, " AS SELECT ")
			if !ok {
				t.Fatalf("not a CDC query: %s", tt.stmt)
			}
			_, where, ok := strings.Cut(query, " FROM "+tt.table+" WHERE ")
			if !ok {
				t.Fatalf("no WHERE on %s: %s", tt.table, query)
			}
			var cols []string
			for c, v := range tt.row {
				cols = append(cols, v+" AS "+c)
			}
			where = strings.ReplaceAll(where, "event_op()", "'"+tt.op+"'")
			var emitted bool
			sql := "SELECT (" + where + ") IS TRUE FROM (SELECT " + strings.Join(cols, ", ") + ") AS " + tt.table
			if err := db.Pool.QueryRow(ctx, sql).Scan(&emitted); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			if emitted != tt.emitted {
				t.Errorf("WHERE %s for %s %v: emitted %v, want %v", where, tt.op, tt.row, emitted, tt.emitted)
			}
		})
	}
}
