package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/database"
)

// ErrSchemaBehind matches (errors.Is) Check's error for a database that lacks
// migrations this release needs: run "inboxd migrate" (or inboxd.Migrate) first.
var ErrSchemaBehind = errors.New("database schema is behind this release")

// ErrSchemaAhead matches Check's error for a database migrated by a newer release that
// contracted the schema (dropped, renamed or retyped something) this release uses.
var ErrSchemaAhead = errors.New("database schema is ahead of this release")

// VersionError is Check's error: the migrations the database lacks, or those it has
// that this release does not know and that do not keep serving it.
type VersionError struct {
	Missing []string // names of migrations this release has and the database lacks
	Unknown []int    // versions of migrations the database has that this release cannot run beside: newer and contracting, or unknown below its newest
}

func (e *VersionError) Error() string {
	if len(e.Missing) > 0 {
		return fmt.Sprintf("%s: migrations %s not applied; run \"inboxd migrate\" (or inboxd.Migrate) with the schema owner's role first, "+
			"or start with INBOXD_MIGRATE=auto (Config.MigrateAtStart)", ErrSchemaBehind, strings.Join(e.Missing, ", "))
	}
	return fmt.Sprintf("%s: migrations %v were applied by a newer release and are not compatible with this one; "+
		"run the newer release", ErrSchemaAhead, e.Unknown)
}

// Is makes errors.Is match ErrSchemaBehind or ErrSchemaAhead.
func (e *VersionError) Is(target error) bool {
	return target == ErrSchemaBehind && len(e.Missing) > 0 || target == ErrSchemaAhead && len(e.Missing) == 0
}

// applied is one row of schema_migrations.
type applied struct {
	version    int
	servesFrom *int // NULL: recorded by a release before the column, or none known
}

// readApplied reads schema_migrations. A missing table reads as no migrations; one
// written before serves_from existed reads with none recorded.
func readApplied(ctx context.Context, db database.DB) ([]applied, error) {
	out, err := scanApplied(ctx, db, `SELECT version, serves_from FROM schema_migrations`)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch pgErr.Code {
		case "42P01": // undefined_table
			return nil, nil
		case "42703": // undefined_column: written by a release before serves_from
			return scanApplied(ctx, db, `SELECT version, NULL::INT FROM schema_migrations`)
		}
	}
	return out, err
}

// scanApplied reads the rows of query, a version and a serves_from each.
func scanApplied(ctx context.Context, db database.DB, query string) ([]applied, error) {
	rows, err := db.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("reading schema_migrations: %w", err)
	}
	defer rows.Close()
	var out []applied
	for rows.Next() {
		var a applied
		if err := rows.Scan(&a.version, &a.servesFrom); err != nil {
			return nil, fmt.Errorf("reading schema_migrations: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading schema_migrations: %w", err)
	}
	return out, nil
}

// Check reads the database's schema version, with nothing but SELECT on
// schema_migrations, and returns nil when this release can run on it: every migration
// it has is applied, and any it does not know is numbered above its newest and recorded
// that it still serves a release that knows this one's migrations
// (Migration.ServesFrom, the expand-only rule). Otherwise a *VersionError: ErrSchemaBehind, naming the missing migrations, or
// ErrSchemaAhead.
func Check(ctx context.Context, db database.DB) error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	return check(ctx, db, ms)
}

// check is Check against the migrations ms.
func check(ctx context.Context, db database.DB, ms []Migration) error {
	rows, err := readApplied(ctx, db)
	if err != nil {
		return err
	}
	return compare(ms, rows)
}

// compare is Check's decision, on the migrations this release has and those recorded.
func compare(ms []Migration, rows []applied) error {
	have := map[int]bool{}
	for _, r := range rows {
		have[r.version] = true
	}
	known := map[int]bool{}
	latest := 0
	var e VersionError
	for _, m := range ms {
		known[m.Version] = true
		latest = max(latest, m.Version)
		// A retired migration changes nothing: Migrate records it, Check never asks for it.
		if !have[m.Version] && !m.Retired() {
			e.Missing = append(e.Missing, m.Name)
		}
	}
	if len(e.Missing) > 0 {
		return &e
	}
	for _, r := range rows {
		if known[r.version] {
			continue
		}
		// Numbers are not dense: one at or below this release's newest that it does not
		// know was applied by another line of work, which it cannot vouch for, whatever
		// that recorded (a later release holds its numbers above the last release's:
		// TestNewMigrationsNumberedAfterLastRelease).
		if r.version <= latest || r.servesFrom == nil || *r.servesFrom > latest {
			e.Unknown = append(e.Unknown, r.version)
		}
	}
	if len(e.Unknown) > 0 {
		return &e
	}
	return nil
}
