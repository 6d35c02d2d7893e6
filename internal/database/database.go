// Package database is inboxd's one seam to the database: DB, what every package runs
// its statements on, and SerializablePool, the pool operator transactions begin
// SERIALIZABLE on when the database is CockroachDB.
//
// The statements themselves stay with the package that owns their table (journal,
// outbox, feed, …); this package holds none.
package database

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is what inboxd needs of the database: a pool, a connection, or a transaction (on
// which Begin starts a savepoint). It is pgx's own method set, so *pgxpool.Pool,
// *pgxpool.Conn, *pgx.Conn, pgx.Tx and SerializablePool are DBs as they are.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

var (
	_ DB = (*pgxpool.Pool)(nil)
	_ DB = (*pgxpool.Conn)(nil)
	_ DB = (*pgx.Conn)(nil)
	_ DB = (pgx.Tx)(nil)
	_ DB = SerializablePool{}
)

// SerializablePool is a pool whose transactions (operator actions, head repairs) begin
// with explicit SERIALIZABLE isolation, whatever the session's default: on CockroachDB
// an operator's READ COMMITTED default would otherwise change the guarantees (issue 19,
// item 3). The service wraps its pool in it on CockroachDB, as process.Config.Dialect
// does for processing. It has BeginTx, so journal retries its transactions on it as on
// a plain pool.
type SerializablePool struct{ *pgxpool.Pool }

// Begin begins a SERIALIZABLE transaction.
func (p SerializablePool) Begin(ctx context.Context) (pgx.Tx, error) {
	return p.BeginTx(ctx, pgx.TxOptions{})
}

// BeginTx begins a transaction with opts, SERIALIZABLE unless opts name an isolation.
func (p SerializablePool) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	if opts.IsoLevel == "" {
		opts.IsoLevel = pgx.Serializable
	}
	return p.Pool.BeginTx(ctx, opts)
}
