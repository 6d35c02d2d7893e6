package schema

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/defaults"
)

// advisoryKey is the PostgreSQL advisory lock every migrator takes: any fixed number,
// which advisory locks scope to the current database. ("inboxd" in ASCII.)
const advisoryKey int64 = 0x696e626f7864

// withLock runs fn on a connection of its own while this process holds the migration
// lock, so that one migrator at a time reads schema_migrations and applies what is
// missing.
//
//   - PostgreSQL: a session-level advisory lock (pg_advisory_lock) on that connection,
//     released by pg_advisory_unlock, or by the server when the session ends, so that a
//     migrator killed halfway frees it at once.
//     https://www.postgresql.org/docs/15/explicit-locking.html#ADVISORY-LOCKS
//   - CockroachDB has no advisory locks, and a row lock held by an open transaction
//     cannot cover the migrations: CockroachDB supports DDL only in implicit
//     transactions, one statement each, not atomically inside an explicit one
//     (https://www.cockroachlabs.com/docs/v24.1/online-schema-changes, "Schema changes
//     within transactions" under Limitations). So a migrator holds a lease row instead
//     (leaseLock), which it renews while it migrates and which expires if it dies.
func withLock(ctx context.Context, pool *pgxpool.Pool, fn func(context.Context, *pgxpool.Conn) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connecting to migrate: %w", err)
	}
	defer conn.Release()
	if database.DialectOf(conn.Conn()) == database.CockroachDB {
		return withLease(ctx, pool, defaults.MigrationLease, func(ctx context.Context) error { return fn(ctx, conn) })
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, advisoryKey); err != nil {
		return fmt.Errorf("taking the migration lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, advisoryKey); err != nil {
			// Ending the session releases the lock: never hand a locked connection back.
			_ = conn.Conn().Close(uctx)
		}
	}()
	return fn(ctx, conn)
}

// The lease row of CockroachDB's migration lock (one row, named migrate), in one place.
const (
	leaseTableSQL = `CREATE TABLE IF NOT EXISTS schema_migration_lock (
		name       TEXT        PRIMARY KEY,
		holder     TEXT        NOT NULL,
		expires_at TIMESTAMPTZ NOT NULL)`
	// Taken when free, expired, or already ours.
	takeLeaseSQL = `INSERT INTO schema_migration_lock AS l (name, holder, expires_at) VALUES ('migrate', $1, now() + $2::INTERVAL)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE l.expires_at < now() OR l.holder = excluded.holder
		RETURNING holder`
	renewLeaseSQL   = `UPDATE schema_migration_lock SET expires_at = now() + $2::INTERVAL WHERE name = 'migrate' AND holder = $1`
	releaseLeaseSQL = `DELETE FROM schema_migration_lock WHERE name = 'migrate' AND holder = $1`
)

// ErrLeaseLost is returned when a migrator's lease was taken by another before it
// finished (it could not renew it in time); its context is cancelled then.
var ErrLeaseLost = errors.New("lost the migration lease")

// withLease runs fn while holding the lease row, renewing it every third of lease.
// If a renewal finds the lease gone, fn's context is cancelled. Every migration
// statement is idempotent, so a migrator that lost its lease halfway leaves nothing
// that the next one cannot finish.
func withLease(ctx context.Context, db database.DB, lease time.Duration, fn func(context.Context) error) error {
	// The table itself may be created by several migrators at once: a collision there
	// is retried (a few times, jittered).
	for attempt := 1; ; attempt++ {
		_, err := db.Exec(ctx, leaseTableSQL)
		if err == nil {
			break
		}
		if attempt == 10 || !collided(err) {
			return fmt.Errorf("creating schema_migration_lock: %w", err)
		}
		if err := sleep(ctx, time.Duration(attempt)*time.Duration(10+mrand.IntN(40))*time.Millisecond); err != nil {
			return err
		}
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	holder := hex.EncodeToString(b)
	for {
		var got string
		err := db.QueryRow(ctx, takeLeaseSQL, holder, lease).Scan(&got)
		if err == nil {
			break
		}
		if !errors.Is(err, pgx.ErrNoRows) && !collided(err) {
			return fmt.Errorf("taking the migration lease: %w", err)
		}
		// Held by another migrator: look again soon.
		if err := sleep(ctx, time.Duration(100+mrand.IntN(200))*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for the migration lease: %w", err)
		}
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(lease / 3)
		defer t.Stop()
		for {
			select {
			case <-fctx.Done():
				return
			case <-t.C:
			}
			tag, err := db.Exec(fctx, renewLeaseSQL, holder, lease)
			if err == nil && tag.RowsAffected() == 0 {
				cancel(ErrLeaseLost)
				return
			}
			// A failed renewal is tried again at the next tick, while the lease lasts.
		}
	}()
	err := fn(fctx)
	cancel(nil)
	<-renewed
	if cause := context.Cause(fctx); errors.Is(cause, ErrLeaseLost) {
		err = errors.Join(err, ErrLeaseLost)
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	if _, rerr := db.Exec(rctx, releaseLeaseSQL, holder); rerr != nil && err == nil {
		err = fmt.Errorf("releasing the migration lease: %w", rerr)
	}
	return err
}

// collided reports whether err is another session creating the same object at the same
// moment (a unique violation in a catalog, a duplicate object) or, on CockroachDB, a
// retryable conflict.
func collided(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "23505", "42P07", "42710", "40001":
		return true
	}
	return false
}

// sleep waits d, or until ctx ends and returns its error. (Not backoff.Waiter: the tests
// of package backoff import testenv, which imports this package.)
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
