package schema

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
