package schema_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/schema"
)

// A migration that "-- inboxd:requires" a release refuses, unless forced, a database
// that skipped that release and holds data; a new database, one that ran the release,
// or an empty table, takes it.
func TestMigrationRequiresTheReleaseBeforeIt(t *testing.T) {
	t.Parallel()
	const (
		first    = "CREATE TABLE IF NOT EXISTS req_journal (id INT PRIMARY KEY)"
		release  = "CREATE TABLE IF NOT EXISTS req_state (id INT PRIMARY KEY)"
		contract = "-- inboxd:contract\n-- inboxd:requires v0.2.0 2 req_journal\nDROP TABLE IF EXISTS req_state"
	)
	ms := []schema.Migration{
		{Version: 1, Name: "0001_req_journal.sql", SQL: first, ServesFrom: 1},
		{Version: 2, Name: "0002_req_state.sql", SQL: release, ServesFrom: 1},
		{Version: 3, Name: "0003_req_contract.sql", SQL: contract, ServesFrom: 3,
			Requires: &schema.Requirement{Release: "v0.2.0", Version: 2, Table: "req_journal"}},
	}
	for _, tc := range []struct {
		name      string
		before    int  // migrations applied by an earlier run: the first n
		rows      bool // req_journal holds a row
		force     bool
		wantError bool
	}{
		{name: "new database", before: 0},
		{name: "ran the release", before: 2, rows: true},
		{name: "skipped the release, empty", before: 1},
		{name: "skipped the release, with data", before: 1, rows: true, wantError: true},
		{name: "skipped the release, with data, forced", before: 1, rows: true, force: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
			if tc.before > 0 {
				if _, err := schema.MigrateList(ctx, db.Pool, ms[:tc.before], schema.Options{}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.rows {
				if _, err := db.Pool.Exec(ctx, "INSERT INTO req_journal VALUES (1)"); err != nil {
					t.Fatal(err)
				}
			}
			applied, err := schema.MigrateList(ctx, db.Pool, ms, schema.Options{Force: tc.force})
			if !tc.wantError {
				if err != nil {
					t.Fatalf("migrating: %v", err)
				}
				if got := applied[len(applied)-1]; got != "0003_req_contract.sql" {
					t.Errorf("applied %v, want the contract last", applied)
				}
				return
			}
			if !errors.Is(err, schema.ErrReleaseSkipped) {
				t.Fatalf("migrating: %v, want ErrReleaseSkipped", err)
			}
			for _, want := range []string{"0003_req_contract.sql", "v0.2.0", "-force"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
			var n int
			if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM schema_migrations WHERE version = 3").Scan(&n); err != nil || n != 0 {
				t.Errorf("contract recorded %d times (%v), want 0", n, err)
			}
		})
	}
}

// The directive is read from the migration's text.
func TestRequiresDirectiveParsed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{"-- inboxd:requires v0.2.0 26 journal", true},
		{"-- inboxd:requires 0.2.0 26 journal", false},
		{"-- inboxd:requires v0.2.0 x journal", false},
		{"-- inboxd:requires v0.2.0 26 journal; DROP TABLE x", false},
	} {
		_, err := schema.Statements(tc.line + "\nSELECT 1;")
		if err != nil {
			t.Errorf("%q: Statements: %v", tc.line, err)
		}
		_, err = schema.ParseRequires(tc.line)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v, want ok %v", tc.line, err, tc.ok)
		}
	}
}
