package testenv

import (
	"context"
	"slices"
	"testing"

	"github.com/inboxd/inboxd/schema"
)

// TestNewDBIsLikeAFreshMigration: a database copied from the template has exactly the
// schema and the schema_migrations rows that migrating an empty database gives.
func TestNewDBIsLikeAFreshMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	copied := NewDB(t)
	fresh := NewDBWith(t, DBOptions{Empty: true})
	if _, err := schema.Migrate(ctx, fresh.Pool); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || coalesce(column_default, '') || ' ' || is_nullable
		   FROM information_schema.columns WHERE table_schema = 'public'`,
		`SELECT indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = 'public'`,
		`SELECT conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = 'public'::regnamespace`,
		`SELECT version::text || ' ' || name || ' ' || serves_from::text FROM schema_migrations`,
		`SELECT sequencename || ' ' || coalesce(last_value, 0)::text FROM pg_sequences WHERE schemaname = 'public'`,
	} {
		got, want := lines(t, copied, q), lines(t, fresh, q)
		if !slices.Equal(got, want) {
			t.Errorf("%s\ncopied: %q\nfresh:  %q", q, got, want)
		}
	}
}

func lines(t *testing.T, db *DB, q string) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	if len(out) == 0 {
		t.Fatalf("%s: no rows", q)
	}
	return out
}
