// Package schema holds inboxd's numbered SQL migrations and applies them.
//
// Every migration runs on PostgreSQL 15 and CockroachDB alike, and is written with
// IF NOT EXISTS so that applying it twice (after a crash before it was recorded) is
// harmless. Migrate applies them under one lock; Check reads, without DDL, whether a
// database's schema is the one this release serves.
//
// The expand-only rule: a migration numbered after the last release's (RELEASES) adds
// tables, nullable or defaulted columns and indexes only, so that the previous release
// keeps running on the new schema during a rolling upgrade. A release that must drop,
// rename or retype something says so in CHANGELOG.md, and its migration carries
// "-- inboxd:contract" (TestMigrationsExpandOnly, in internal/sqlcheck, holds both,
// reading each statement with CockroachDB's parser).
package schema

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/database"
)

//go:embed *.sql
var files embed.FS

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
	// Contracts is set by a "-- inboxd:contract" line: the migration drops, renames or
	// retypes something, so the releases before it no longer run on its schema. After
	// ExpandOnlyFrom only a release that says it contracts may hold one
	// (TestMigrationsExpandOnly).
	Contracts bool
	// ServesFrom is the oldest schema a release must know for the database to still
	// serve it once this migration is applied: this migration's own version if it (or
	// any before ExpandOnlyFrom) contracts, else the ServesFrom of the one before. It is
	// recorded in schema_migrations, so that a release that finds migrations it does not
	// know can tell whether they only expanded what it knows (Check).
	ServesFrom int
	// Requires is set by a "-- inboxd:requires RELEASE VERSION TABLE" line: the
	// migration may run only on a database that had migration VERSION (RELEASE's last)
	// before this run, or whose TABLE is empty, or when forced (Options.Force). A
	// contracting migration uses it when its backfill trusts what RELEASE wrote beside
	// the old shape: skipping RELEASE would lose what the release before it wrote
	// meanwhile.
	Requires *Requirement
}

// Requirement is a migration's "-- inboxd:requires" line (Migration.Requires).
type Requirement struct {
	Release string // the release to run everywhere first, "vX.Y.Z"
	Version int    // that release's last migration
	Table   string // a table whose emptiness waives the requirement: nothing to lose
}

// requiresRE is the requires directive: a release, its last migration, a table.
var requiresRE = regexp.MustCompile(`^-- inboxd:requires (v\d+\.\d+\.\d+) (\d+) ([a-z_][a-z0-9_]*)$`)

// parseRequires reads a requires directive; ok is false for any other line.
func parseRequires(line string) (r *Requirement, ok bool, err error) {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, requiresDirective) {
		return nil, false, nil
	}
	m := requiresRE.FindStringSubmatch(line)
	if m == nil {
		return nil, true, fmt.Errorf("directive %q: want %q", line, requiresDirective+" vX.Y.Z LAST-MIGRATION TABLE")
	}
	v, err := strconv.Atoi(m[2])
	if err != nil {
		return nil, true, fmt.Errorf("directive %q: %w", line, err)
	}
	return &Requirement{Release: m[1], Version: v, Table: m[3]}, true, nil
}

// ExpandOnlyFrom is the first migration under the expand-only rule: from it on,
// migrations add tables, columns and indexes only, unless marked "-- inboxd:contract"
// in a release that says it contracts. The ones before it (up to the pre-release
// baseline, RELEASES) count as contracting.
const ExpandOnlyFrom = 17

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
		m := Migration{Version: v, Name: name, SQL: string(body), Contracts: v < ExpandOnlyFrom}
		for _, line := range strings.Split(string(body), "\n") {
			if strings.TrimSpace(line) == contractDirective {
				m.Contracts = true
			}
			r, ok, err := parseRequires(line)
			if err != nil {
				return nil, fmt.Errorf("migration %q: %w", name, err)
			}
			if ok {
				m.Requires = r
			}
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := range out {
		if i > 0 && out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %q and %q share version %d", out[i-1].Name, out[i].Name, out[i].Version)
		}
		if out[i].Contracts || i == 0 {
			out[i].ServesFrom = out[i].Version
		} else {
			out[i].ServesFrom = out[i-1].ServesFrom
		}
	}
	return out, nil
}

// Migrate applies every migration not yet recorded in schema_migrations and returns
// the names of those it applied that have statements (a retired one is recorded only); then it checks the schema as Check does, so that a
// database a newer release contracted is refused here too (ErrSchemaAhead). It holds the migration lock (see lock) from before it
// reads schema_migrations until it has run also, the caller's own schema steps (the
// demo's table), so that of processes that start together exactly one applies each
// migration and the others find it recorded. Every step runs on the lock's connection.
//
// It needs the owner's rights (DDL); a runtime role without them runs Check instead.
func Migrate(ctx context.Context, pool *pgxpool.Pool, also ...func(context.Context, database.DB) error) ([]string, error) {
	return MigrateWith(ctx, pool, Options{Also: also})
}

// Options shape MigrateWith.
type Options struct {
	// Also are the caller's own schema steps, run under the migration lock after the
	// migrations (the demo's table).
	Also []func(context.Context, database.DB) error
	// Force applies a migration whose requirement (Migration.Requires) is not met. Only
	// for a database no instance of an older release writes to any more.
	Force bool
}

// MigrateWith is Migrate with options.
func MigrateWith(ctx context.Context, pool *pgxpool.Pool, opts Options) ([]string, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	return migrateList(ctx, pool, ms, opts)
}

// migrateList is MigrateWith on the migrations ms.
func migrateList(ctx context.Context, pool *pgxpool.Pool, ms []Migration, opts Options) ([]string, error) {
	var done []string
	err := withLock(ctx, pool, func(ctx context.Context, conn *pgxpool.Conn, holder string) error {
		var err error
		if done, err = migrateLocked(ctx, conn, holder, ms, opts.Force); err != nil {
			return err
		}
		for _, step := range opts.Also {
			if err := step(ctx, conn); err != nil {
				return err
			}
		}
		// The one check of every path (Check): migrating skips the migrations this
		// release does not know, which a newer release may have recorded.
		return check(ctx, conn, ms)
	})
	return done, err
}

// Retired reports whether m is a retired migration: comments only, its number kept
// because databases recorded it. Migrate records it without reporting it.
func (m Migration) Retired() bool {
	stmts, err := Statements(m.SQL)
	return err == nil && len(stmts) == 0
}

// migrateLocked applies the migrations not yet recorded, on conn, which holds the
// migration lock: on CockroachDB the lease of holder, which each migration's record
// checks (recordMigration).
func migrateLocked(ctx context.Context, conn *pgxpool.Conn, holder string, migrations []Migration, force bool) ([]string, error) {
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INT         PRIMARY KEY,
		name       TEXT        NOT NULL,
		applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("creating schema_migrations: %w", err)
	}
	// serves_from (see Migration.ServesFrom) is added after the table, so that releases
	// before it, which insert only version and name, keep working beside this one.
	if _, err := conn.Exec(ctx, `ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS serves_from INT`); err != nil {
		return nil, fmt.Errorf("adding schema_migrations.serves_from: %w", err)
	}
	recorded, err := readApplied(ctx, conn)
	if err != nil {
		return nil, err
	}
	applied := map[int]bool{}
	for _, r := range recorded {
		applied[r.version] = true
	}
	pool := conn
	var done []string
	var db string // the dialect, detected when a statement needs it
	for _, m := range migrations {
		if applied[m.Version] {
			continue
		}
		if m.Requires != nil && !force {
			// applied is what the database had before this run: a release skipped now
			// never ran beside the one before it.
			if err := checkRequirement(ctx, pool, m, len(recorded) > 0, applied); err != nil {
				return done, err
			}
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
			if err := execRetrying(ctx, pool, stmt.SQL); err != nil {
				if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && stmt.DoneIf != "" && pgErr.Code == stmt.DoneIf {
					continue
				}
				return done, fmt.Errorf("applying migration %s: %w", m.Name, err)
			}
		}
		if err := recordMigration(ctx, pool, m, holder); err != nil {
			return done, err
		}
		// A retired migration is recorded but changed nothing: reporting it as applied
		// would claim a table it no longer creates.
		if len(stmts) > 0 {
			done = append(done, m.Name)
		}
	}
	return done, nil
}

// The record of an applied migration. On CockroachDB it is written only while the
// migrator's lease is still its own, checked in the same statement (one implicit
// transaction): a migrator that lost its lease records nothing, and the next one
// applies the migration again (every statement is idempotent).
const (
	recordSQL = `INSERT INTO schema_migrations (version, name, serves_from) VALUES ($1::INT, $2::TEXT, $3::INT)
		ON CONFLICT (version) DO NOTHING`
	recordLeasedSQL = `INSERT INTO schema_migrations (version, name, serves_from)
		SELECT $1::INT, $2::TEXT, $3::INT WHERE EXISTS (SELECT 1 FROM schema_migration_lock
			WHERE name = 'migrate' AND holder = $4::TEXT AND expires_at > now())
		ON CONFLICT (version) DO NOTHING`
)

// recordMigration records m as applied; with a holder, only while its lease holds,
// else ErrLeaseLost.
func recordMigration(ctx context.Context, db database.DB, m Migration, holder string) error {
	if holder == "" {
		if _, err := db.Exec(ctx, recordSQL, m.Version, m.Name, m.ServesFrom); err != nil {
			return fmt.Errorf("recording migration %s: %w", m.Name, err)
		}
		return nil
	}
	tag, err := db.Exec(ctx, recordLeasedSQL, m.Version, m.Name, m.ServesFrom, holder)
	if err != nil {
		return fmt.Errorf("recording migration %s: %w", m.Name, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	// Nothing written: recorded already, or the lease is no longer ours.
	var held int
	if err := db.QueryRow(ctx, leaseHolderSQL, holder).Scan(&held); err != nil {
		return fmt.Errorf("recording migration %s: reading the lease: %w", m.Name, err)
	}
	if held == 0 {
		return fmt.Errorf("recording migration %s: %w", m.Name, ErrLeaseLost)
	}
	return nil
}

// migrationRetries bounds the runs of a statement that lost a deadlock or a
// serialization conflict to the instances still running beside the migrator.
const migrationRetries = 5

// execRetrying runs one migration statement, again after a deadlock (40P01) or a
// serialization failure (40001): a backfill that locks rows meets the running
// instances' transactions, and the database aborts one side. Every statement is
// idempotent, so running it again is safe.
func execRetrying(ctx context.Context, db database.DB, sql string) error {
	for attempt := 1; ; attempt++ {
		_, err := db.Exec(ctx, sql)
		pgErr, ok := errors.AsType[*pgconn.PgError](err)
		if err == nil || !ok || (pgErr.Code != "40P01" && pgErr.Code != "40001") || attempt == migrationRetries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

// contractDirective marks a contracting migration (Migration.Contracts).
const contractDirective = "-- inboxd:contract"

// requiresDirective starts a migration's requirement (Migration.Requires).
const requiresDirective = "-- inboxd:requires"

// ErrReleaseSkipped matches (errors.Is) Migrate's error for a migration whose
// requirement (Migration.Requires) a database does not meet: it skipped the release
// the migration builds on.
var ErrReleaseSkipped = errors.New("database skipped a release this migration builds on")

// SkippedReleaseError is Migrate's error for a migration whose requirement is not met.
type SkippedReleaseError struct {
	Migration string
	Requires  Requirement
}

func (e *SkippedReleaseError) Error() string {
	return fmt.Sprintf("%s: migration %s needs %s first: upgrade to %s, run it on every instance, then this release; "+
		"or, once no instance of an older release writes to the database, migrate with -force (Options.Force)",
		ErrReleaseSkipped, e.Migration, e.Requires.Release, e.Requires.Release)
}

// Is makes errors.Is match ErrReleaseSkipped.
func (e *SkippedReleaseError) Is(target error) bool { return target == ErrReleaseSkipped }

// checkRequirement returns a *SkippedReleaseError unless m's requirement is met: the
// database is new (nothing was recorded before this run), had the required migration,
// or has nothing in the requirement's table.
func checkRequirement(ctx context.Context, db database.DB, m Migration, migratedBefore bool, applied map[int]bool) error {
	r := m.Requires
	if !migratedBefore || applied[r.Version] {
		return nil
	}
	// The table name is an identifier (requiresRE), not input.
	var holds bool
	err := db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+r.Table+")").Scan(&holds)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42P01" { // undefined_table: empty
		return nil
	}
	if err != nil {
		return fmt.Errorf("migration %s: reading whether %s holds rows: %w", m.Name, r.Table, err)
	}
	if !holds {
		return nil
	}
	return &SkippedReleaseError{Migration: m.Name, Requires: *r}
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
// (and, anywhere in the file, "-- inboxd:contract": see Migration.Contracts).
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
			case trimmed == contractDirective: // the whole migration's (Migration.Contracts)
			case key == "requires": // the whole migration's (Migration.Requires)
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
func dialect(ctx context.Context, pool database.DB) (string, error) {
	var v string
	if err := pool.QueryRow(ctx, `SELECT version()`).Scan(&v); err != nil {
		return "", fmt.Errorf("detecting the database: %w", err)
	}
	if strings.Contains(v, "CockroachDB") {
		return CockroachDB, nil
	}
	return PostgreSQL, nil
}
