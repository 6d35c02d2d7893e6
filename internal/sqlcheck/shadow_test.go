package sqlcheck

import (
	"testing"
	"time"

	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/parser"

	"github.com/inboxd/inboxd/internal/database"
)

// A shadow run's transaction begins with Dialect.ShadowBeginSQL, sent as pgx's
// BeginQuery (not a call site the harvest reads): on CockroachDB it parses, and it is
// a low-priority transaction with its lock and statement timeouts.
func TestShadowBeginOnCockroachDB(t *testing.T) {
	sql := database.CockroachDB.ShadowBeginSQL(time.Second, 30*time.Second)
	stmts, err := parser.Parse(sql)
	if err != nil {
		t.Fatalf("CockroachDB refuses %q: %v", sql, err)
	}
	if len(stmts) != 3 {
		t.Fatalf("%d statements in %q, want BEGIN and two SET LOCAL", len(stmts), sql)
	}
	want := []string{"BEGIN TRANSACTION ISOLATION LEVEL SERIALIZABLE, PRIORITY LOW", "SET LOCAL lock_timeout = 1000", "SET LOCAL statement_timeout = 30000"}
	for i, st := range stmts {
		if got := st.AST.String(); got != want[i] {
			t.Errorf("statement %d reads back as %q, want %q", i, got, want[i])
		}
	}
	if _, err := parser.Parse(database.PostgreSQL.ShadowBeginSQL(time.Second, time.Second)); err != nil {
		t.Errorf("the PostgreSQL form: %v", err)
	}
}
