package schema

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/database"
)

// The lease lock's parts, for the tests of package schema_test (which may import
// testenv, which imports this package).
var (
	LeaseTableSQL = leaseTableSQL
	TakeLeaseSQL  = takeLeaseSQL
)

// WithLease is withLease with a lease of length ttl whose connection is opened as
// pool's are, and no schema-change jobs to wait for (PostgreSQL has none).
func WithLease(ctx context.Context, pool *pgxpool.Pool, ttl time.Duration, fn func(context.Context) error) error {
	return withLease(ctx, leaseConfigOf(pool, ttl), func(ctx context.Context, _ string) error { return fn(ctx) })
}

// SchemaJob is a schema change still running, as the lease's jobs lister reports it.
type SchemaJob = schemaJob

// WithLeaseJobs is WithLease with jobs standing in for CockroachDB's schema-change
// jobs (SHOW JOBS), asked every poll.
func WithLeaseJobs(ctx context.Context, pool *pgxpool.Pool, ttl, poll time.Duration, jobs func(context.Context) ([]SchemaJob, error), fn func(context.Context) error) error {
	lc := leaseConfigOf(pool, ttl)
	lc.poll = poll
	lc.jobs = func(ctx context.Context, _ database.DB) ([]schemaJob, error) { return jobs(ctx) }
	return withLease(ctx, lc, func(ctx context.Context, _ string) error { return fn(ctx) })
}

// RecordMigration records m as applied while holder's lease holds.
var RecordMigration = recordMigration

// CheckNone is Check's decision on a database with no migration recorded.
func CheckNone() error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	return compare(ms, nil)
}

// MigrateList is MigrateWith on the migrations ms instead of the embedded ones.
var MigrateList = migrateList

// ParseRequires reads a "-- inboxd:requires" line.
func ParseRequires(line string) (*Requirement, error) {
	r, _, err := parseRequires(line)
	return r, err
}
