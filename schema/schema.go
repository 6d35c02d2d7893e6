// Package schema holds inboxd's numbered SQL migrations and applies them.
//
// Every migration runs on PostgreSQL 15 and CockroachDB alike, and is written with
// IF NOT EXISTS so that applying it twice, or from two processes at once, is harmless.
package schema

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed *.sql
var files embed.FS

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("listing migrations: %w", err)
	}
	out := make([]Migration, 0, len(names))
	for _, name := range names {
		prefix, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %q: name must start with a number and an underscore", name)
		}
		body, err := files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("reading migration %q: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %q and %q share version %d", out[i-1].Name, out[i].Name, out[i].Version)
		}
	}
	return out, nil
}

// Migrate applies every migration not yet recorded in schema_migrations and returns
// the names of those it applied. Processes that start together may call it together:
// PostgreSQL's IF NOT EXISTS is not atomic against another session creating the same
// object, so a pass that collides with another one is run again (every statement is
// idempotent), a few times at most.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	var all []string
	for attempt := 1; ; attempt++ {
		done, err := migrateOnce(ctx, pool)
		all = append(all, done...)
		if err == nil || attempt == collisionAttempts || !collided(err) {
			return all, err
		}
		// Jittered, so that the colliding processes fall out of step.
		t := time.NewTimer(time.Duration(attempt) * time.Duration(10+rand.IntN(40)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return all, err
		case <-t.C:
		}
	}
}

// collisionAttempts bounds Migrate's passes when migrations collide.
const collisionAttempts = 10

// collided reports whether err is another session creating the same object at the same
// moment: a unique violation in a catalog, a duplicate object, or (CockroachDB) a
// retryable conflict.
func collided(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "23505", "42P07", "42P06", "42710", "42723", "40001":
		return true
	}
	return false
}

// migrateOnce is one pass over the migrations not yet recorded.
func migrateOnce(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	migrations, err := Migrations()
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INT         PRIMARY KEY,
		name       TEXT        NOT NULL,
		applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("creating schema_migrations: %w", err)
	}
	applied := map[int]bool{}
	rows, err := pool.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, fmt.Errorf("reading schema_migrations: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("reading schema_migrations: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading schema_migrations: %w", err)
	}
	var done []string
	var db string // the dialect, detected when a statement needs it
	for _, m := range migrations {
		if applied[m.Version] {
			continue
		}
		// Statements run one by one: CockroachDB does not allow schema changes of a table
		// created in the same implicit transaction to be mixed freely with other statements.
		stmts, err := Statements(m.SQL)
		if err != nil {
			return done, fmt.Errorf("migration %s: %w", m.Name, err)
		}
		for _, stmt := range stmts {
			if stmt.Only != "" && db == "" {
				if db, err = dialect(ctx, pool); err != nil {
					return done, err
				}
			}
			if !stmt.RunsOn(db) {
				continue
			}
			if _, err := pool.Exec(ctx, stmt.SQL); err != nil {
				if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && stmt.DoneIf != "" && pgErr.Code == stmt.DoneIf {
					continue
				}
				return done, fmt.Errorf("applying migration %s: %w", m.Name, err)
			}
		}
		if _, err := pool.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)
			ON CONFLICT (version) DO NOTHING`, m.Version, m.Name); err != nil {
			return done, fmt.Errorf("recording migration %s: %w", m.Name, err)
		}
		done = append(done, m.Name)
	}
	return done, nil
}

// Dialects a statement may be limited to (see Statement.Only).
const (
	PostgreSQL  = "postgresql"
	CockroachDB = "cockroachdb"
)

// Statement is one statement of a migration, with the directives written in comment
// lines just above it:
//
//	-- inboxd:only postgresql|cockroachdb   run it on that database only
//	-- inboxd:done-if SQLSTATE              that error means the statement's work is done
//
// Both are for the rare change the two databases spell differently; keep such
// statements small and in pairs.
type Statement struct {
	SQL    string
	Only   string // "" (both), PostgreSQL or CockroachDB
	DoneIf string // a SQLSTATE that means already applied
}

// RunsOn reports whether s runs on the database of that dialect.
func (s Statement) RunsOn(dialect string) bool { return s.Only == "" || s.Only == dialect }

// Statements splits a migration into its statements, on semicolons at line ends.
// Migrations hold no semicolons inside strings or bodies, which TestMigrationsSplit keeps
// true.
func Statements(sql string) ([]Statement, error) {
	var out []Statement
	var cur strings.Builder
	var next Statement
	for n, line := range strings.Split(sql, "\n") {
		trimmed := strings.TrimSpace(line)
		if d, ok := strings.CutPrefix(trimmed, "-- inboxd:"); ok {
			key, val, _ := strings.Cut(d, " ")
			val = strings.TrimSpace(val)
			switch {
			case key == "only" && (val == PostgreSQL || val == CockroachDB):
				next.Only = val
			case key == "done-if" && len(val) == 5:
				next.DoneIf = val
			default:
				return nil, fmt.Errorf("line %d: unknown directive %q", n+1, trimmed)
			}
			continue
		}
		if strings.HasPrefix(trimmed, "--") || trimmed == "" {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			next.SQL = strings.TrimSpace(cur.String())
			out = append(out, next)
			cur.Reset()
			next = Statement{}
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		next.SQL = s
		out = append(out, next)
	}
	return out, nil
}

// dialect is the database's dialect, from version(): CockroachDB says so.
func dialect(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var v string
	if err := pool.QueryRow(ctx, `SELECT version()`).Scan(&v); err != nil {
		return "", fmt.Errorf("detecting the database: %w", err)
	}
	if strings.Contains(v, "CockroachDB") {
		return CockroachDB, nil
	}
	return PostgreSQL, nil
}
