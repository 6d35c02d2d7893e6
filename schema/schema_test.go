package schema_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

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
	want := 0
	for _, m := range ms {
		if !m.Retired() {
			want++
		}
	}
	if err != nil || len(applied) != want {
		t.Fatalf("re-applying all migrations: %v (applied %v)", err, applied)
	}
}

// Replicas that start together migrate together: concurrent Migrate calls on a fresh
// schema all succeed, and each migration is applied by exactly one of them (the lock),
// not by several that each ran its IF NOT EXISTS statements.
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
		type result struct {
			applied []string
			err     error
		}
		results := make(chan result, 8)
		for range 8 {
			go func() {
				applied, err := schema.Migrate(ctx, pool)
				results <- result{applied, err}
			}()
		}
		times := map[string]int{}
		for range 8 {
			r := <-results
			if r.err != nil {
				t.Errorf("round %d: concurrent Migrate: %v", round, r.err)
			}
			for _, name := range r.applied {
				times[name]++
			}
		}
		ms, _ := schema.Migrations()
		for _, m := range ms {
			if !m.Retired() && times[m.Name] != 1 {
				t.Errorf("round %d: %s applied %d times, want once", round, m.Name, times[m.Name])
			}
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(ms) {
			t.Errorf("round %d: %d migrations recorded (%v), want %d", round, n, err, len(ms))
		}
	}
}

// Five processes that start at the same instant on an empty database (as "inboxd
// migrate -demo" jobs and "inboxd serve" replicas with INBOXD_MIGRATE=auto do) all
// succeed, 20 rounds out of 20, and each migration, the demo's table included, is
// applied by exactly one of them. The processes are this test binary (TestMain's
// migrator). Before the lock, one in a few rounds failed with 23505 on the demo's
// table (issue 27, item 2), and migrations were applied by several processes at once.
func TestConcurrentStartersMigrateOnce(t *testing.T) {
	const rounds, starters = 20, 5
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	// The rounds run side by side (each has its own database), -parallel at a time:
	// one after another they took 35 s, mostly waiting on the start gate and the
	// processes starting.
	for round := range rounds {
		t.Run(fmt.Sprintf("round=%d", round), func(t *testing.T) {
			t.Parallel()
			db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
			// A start gate: every process waits for the same instant, so that they connect
			// and migrate together rather than in the order they were forked.
			at := time.Now().Add(time.Second)
			type result struct {
				out    string
				stderr string
				err    error
			}
			results := make(chan result, starters)
			for range starters {
				go func() {
					cmd := exec.Command(exe, "-test.run=^$")
					cmd.Env = append(os.Environ(), migratorEnv+"="+db.URL, migratorAtEnv+"="+strconv.FormatInt(at.UnixNano(), 10))
					var stdout, stderr strings.Builder
					cmd.Stdout, cmd.Stderr = &stdout, &stderr
					err := cmd.Run()
					results <- result{stdout.String(), stderr.String(), err}
				}()
			}
			times := map[string]int{}
			for range starters {
				r := <-results
				if r.err != nil {
					t.Errorf("round %d: a starter failed: %v: %s", round, r.err, r.stderr)
				}
				for _, name := range strings.Fields(r.out) {
					times[name]++
				}
			}
			for _, m := range ms {
				if !m.Retired() && times[m.Name] != 1 {
					t.Errorf("round %d: %s applied %d times, want once", round, m.Name, times[m.Name])
				}
			}
			ctx := context.Background()
			var n int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(ms) {
				t.Errorf("round %d: %d migrations recorded (%v), want %d", round, n, err, len(ms))
			}
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM customers`).Scan(&n); err != nil {
				t.Errorf("round %d: the demo's table: %v", round, err)
			}
			if err := schema.Check(ctx, db.Pool); err != nil {
				t.Errorf("round %d: Check after migrating: %v", round, err)
			}
		})
	}
}

// Migration numbers are not dense (they are handed out ahead to work that lands in
// any order): a migration this release does not know, numbered at or below its newest,
// belongs to another line of work, which this release cannot vouch for, whatever it
// recorded as serving.
func TestCheckRefusesUnknownMigrationBelowNewest(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	known := map[int]bool{}
	for _, m := range ms {
		known[m.Version] = true
	}
	gap := 1
	for known[gap] {
		gap++
	}
	if gap > ms[len(ms)-1].Version {
		t.Skip("no gap below the newest migration")
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO schema_migrations (version, name, serves_from) VALUES ($1, 'gap_contract.sql', $1)`, gap); err != nil {
		t.Fatal(err)
	}
	if err := schema.Check(ctx, db.Pool); !errors.Is(err, schema.ErrSchemaAhead) || !strings.Contains(err.Error(), strconv.Itoa(gap)) {
		t.Fatalf("Check with unknown migration %d recorded: %v, want ErrSchemaAhead naming it", gap, err)
	}
}
