package schema_test

import (
	"context"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/schema"
)

// Statements are split on line-ending semicolons, so none may hide inside a literal.
func TestMigrationsSplit(t *testing.T) {
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.Version != i+1 {
			t.Errorf("%s: version %d, want %d (numbers are consecutive)", m.Name, m.Version, i+1)
		}
		for n, line := range strings.Split(m.SQL, "\n") {
			code, _, _ := strings.Cut(line, "--")
			if strings.Contains(strings.TrimRight(strings.TrimSpace(code), ";"), ";") {
				t.Errorf("%s:%d: a semicolon inside a statement would break the split: %q", m.Name, n+1, line)
			}
		}
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	db := testenv.NewDB(t) // migrated once already
	for i := 0; i < 2; i++ {
		applied, err := schema.Migrate(context.Background(), db.Pool)
		if err != nil {
			t.Fatalf("migrating again: %v", err)
		}
		if len(applied) != 0 {
			t.Errorf("run %d applied %v, want nothing", i, applied)
		}
	}
	// Re-running every statement (as after a crash before it was recorded) is harmless.
	ms, _ := schema.Migrations()
	if _, err := db.Pool.Exec(context.Background(), "DELETE FROM schema_migrations"); err != nil {
		t.Fatal(err)
	}
	applied, err := schema.Migrate(context.Background(), db.Pool)
	if err != nil || len(applied) != len(ms) {
		t.Fatalf("re-applying all migrations: %v (applied %v)", err, applied)
	}
}
