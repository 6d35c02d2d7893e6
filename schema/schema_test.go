package schema_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/schema"
)

// Statements are split on line-ending semicolons, so none may hide inside a literal.
func TestMigrationsSplit(t *testing.T) {
	t.Parallel()
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		// Increasing, not necessarily consecutive: numbers are handed out ahead to work
		// that lands in any order.
		if m.Version <= i {
			t.Errorf("%s: version %d, want above %d (numbers increase)", m.Name, m.Version, i)
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
	t.Parallel()
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

// Replicas that start together migrate together: every concurrent Migrate on a fresh
// database succeeds (PostgreSQL's IF NOT EXISTS is not atomic against another session
// creating the same object), and the schema ends up whole.
func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	for round := range 3 {
		// A fresh, empty schema first in the search path stands in for a fresh database.
		fresh := fmt.Sprintf("fresh%d", round)
		if _, err := db.Pool.Exec(ctx, "CREATE SCHEMA "+fresh); err != nil {
			t.Fatal(err)
		}
		pool := db.OpenPool(t, func(cfg *pgxpool.Config) {
			cfg.ConnConfig.RuntimeParams["search_path"] = fresh
			cfg.MaxConns = 8
		})
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				_, err := schema.Migrate(ctx, pool)
				errs <- err
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Errorf("round %d: concurrent Migrate: %v", round, err)
			}
		}
		ms, _ := schema.Migrations()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(ms) {
			t.Errorf("round %d: %d migrations recorded (%v), want %d", round, n, err, len(ms))
		}
	}
}
