package schema

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
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
// missing. fn gets the lease's holder on CockroachDB ("" on PostgreSQL), with which
// each migration is recorded (recordSQL).
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
//     (withLease), which it renews while it migrates and which expires if it dies.
func withLock(ctx context.Context, pool *pgxpool.Pool, fn func(ctx context.Context, conn *pgxpool.Conn, holder string) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connecting to migrate: %w", err)
	}
	defer conn.Release()
	if database.DialectOf(conn.Conn()) == database.CockroachDB {
		lc := leaseConfigOf(pool, defaults.MigrationLease)
		// SHOW JOBS is CockroachDB's only: chosen as the migrations' own CockroachDB-only
		// statements are (dialect, from version()), so that a server that only says it
		// is CockroachDB at startup (the tests' PostgreSQL behind a proxy) gets neither.
		d, err := dialect(ctx, conn)
		if err != nil {
			return err
		}
		if d == CockroachDB {
			lc.jobs = schemaChangeJobs
		}
		return withLease(ctx, lc, func(ctx context.Context, holder string) error { return fn(ctx, conn, holder) })
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
	return fn(ctx, conn, "")
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
	// leaseHolderSQL tells, after a migration was not recorded, whether the lease is
	// still ours.
	leaseHolderSQL = `SELECT count(*) FROM schema_migration_lock WHERE name = 'migrate' AND holder = $1 AND expires_at > now()`
)

// ErrLeaseLost is returned when a migrator's lease was taken by another, or could not
// be renewed in time, before it finished; its context is cancelled then.
var ErrLeaseLost = errors.New("lost the migration lease")

// leaseConfig shapes withLease.
type leaseConfig struct {
	// ttl is the lease's length. The holder renews it every third of it, each renewal
	// bounded by a third too, and stops its work (ErrLeaseLost) once ttl less margin
	// has passed since it sent its last successful renewal: the server's expiry counts
	// from a later instant (its now() when the statement ran), so the holder always
	// stops before another may take the lease.
	ttl, margin time.Duration
	// connect opens the lease's own connection: its statements never wait for a
	// connection of the migrator's pool, which the migration holds (a pool of one works).
	connect func(context.Context) (*pgx.Conn, error)
	// jobs lists the schema changes still running in the background (CockroachDB's
	// jobs, schemaChangeJobs); nil where there are none (PostgreSQL, whose DDL ends with
	// its statement).
	jobs func(context.Context, database.DB) ([]schemaJob, error)
	// poll is how often jobs is asked again while some run.
	poll time.Duration
	// keep bounds how long, after fn returned, the lease is kept while a schema change
	// fn started (its statement cancelled) still runs.
	keep time.Duration
}

// leaseConfigOf is the lease of length ttl whose connection is opened as pool's are.
func leaseConfigOf(pool *pgxpool.Pool, ttl time.Duration) leaseConfig {
	cc := pool.Config().ConnConfig
	return leaseConfig{
		ttl: ttl, margin: ttl / 4, poll: jobPoll, keep: ttl,
		connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc.Copy()) },
	}
}

// leaseConn is the lease's connection, used by one statement at a time (the renewals,
// the job polls, the release), each bounded by its own timeout. A statement that
// timed out leaves the connection closed (pgx closes it), and the next one dials again.
type leaseConn struct {
	connect func(context.Context) (*pgx.Conn, error)
	turn    chan struct{} // a token: held by the statement in flight
	conn    *pgx.Conn
}

func newLeaseConn(connect func(context.Context) (*pgx.Conn, error)) *leaseConn {
	l := &leaseConn{connect: connect, turn: make(chan struct{}, 1)}
	l.turn <- struct{}{}
	return l
}

// do runs f on the connection, dialed if need be, within timeout.
func (l *leaseConn) do(ctx context.Context, timeout time.Duration, f func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case <-l.turn:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { l.turn <- struct{}{} }()
	if l.conn == nil || l.conn.IsClosed() {
		c, err := l.connect(ctx)
		if err != nil {
			return fmt.Errorf("connecting for the migration lease: %w", err)
		}
		l.conn = c
	}
	err := f(ctx, l.conn)
	if err != nil && ctx.Err() != nil {
		// The statement's outcome is unknown and its reply may still come: never reuse
		// the connection.
		l.drop()
	}
	return err
}

func (l *leaseConn) drop() {
	if l.conn != nil {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = l.conn.Close(cctx)
		l.conn = nil
	}
}

// close closes the connection once no statement is in flight.
func (l *leaseConn) close() {
	<-l.turn
	l.drop()
	l.turn <- struct{}{}
}

func (l *leaseConn) exec(ctx context.Context, timeout time.Duration, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := l.do(ctx, timeout, func(ctx context.Context, c *pgx.Conn) error {
		var err error
		tag, err = c.Exec(ctx, sql, args...)
		return err
	})
	return tag, err
}

// withLease runs fn while holding the lease row (see leaseConfig). fn gets the holder,
// with which each migration is recorded in the same statement that checks the lease
// (recordLeasedSQL), and a context that is cancelled, with ErrLeaseLost as its cause, once
// the lease is lost or could not be renewed in time. Every migration statement is
// idempotent, so a migrator that lost its lease halfway leaves nothing that the next
// one cannot finish.
//
// On CockroachDB a schema change runs as a job that outlives the statement that
// started it when that statement is cancelled (see schemaChangeJobs). So, with lc.jobs,
// the holder first waits for the schema changes still running (a dead migrator's),
// and, when fn returns while its own still run, keeps the lease until they end (for
// lc.keep at most; past it the lease stays taken until it expires, and the next
// migrator waits for them in turn).
//
// The lease is released whatever fn does (a panic included), and also when its take
// failed: a take whose reply was lost may have taken it.
func withLease(ctx context.Context, lc leaseConfig, fn func(context.Context, string) error) (err error) {
	third := lc.ttl / 3
	conn := newLeaseConn(lc.connect)
	defer conn.close()
	// The table itself may be created by several migrators at once: a collision there
	// is retried (a few times, jittered).
	for attempt := 1; ; attempt++ {
		_, err := conn.exec(ctx, lc.ttl, leaseTableSQL)
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
	// lastTake is when the latest take whose reply never came can have ended in the
	// server, at the latest: the release deletes again after it (releaseLease).
	var lastTake time.Time
	defer func() {
		if rerr := releaseLease(ctx, conn, holder, third, lastTake); rerr != nil && err == nil {
			err = rerr
		}
	}()
	var renewed atomic.Int64 // when the last successful take or renewal was sent (UnixNano)
	for {
		sent := time.Now()
		err := conn.do(ctx, third, func(ctx context.Context, c *pgx.Conn) error {
			// The server ends the take by then too, so that a take whose client gave up
			// cannot commit after the release (see releaseLease).
			if _, err := c.Exec(ctx, "SET statement_timeout = "+strconv.FormatInt(third.Milliseconds(), 10)); err != nil {
				return err
			}
			var got string
			return c.QueryRow(ctx, takeLeaseSQL, holder, lc.ttl).Scan(&got)
		})
		if err == nil {
			renewed.Store(sent.UnixNano())
			break
		}
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			lastTake = sent.Add(third)
		}
		timedOut := errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
		if !errors.Is(err, pgx.ErrNoRows) && !collided(err) && !timedOut {
			return fmt.Errorf("taking the migration lease: %w", err)
		}
		// Held by another migrator (or a take that timed out): look again soon.
		if err := sleep(ctx, time.Duration(100+mrand.IntN(200))*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for the migration lease: %w", err)
		}
	}

	// lctx lives as long as the lease is held, past ctx's end when a schema change must
	// be waited for; fn's context ends with ctx, or when the lease is lost.
	lctx, lcancel := context.WithCancelCause(context.WithoutCancel(ctx))
	fctx, fcancel := context.WithCancelCause(ctx)
	defer fcancel(nil)
	stopLost := context.AfterFunc(lctx, func() { fcancel(context.Cause(lctx)) })
	defer stopLost()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer lcancel(nil) // runs before wg.Wait: the renewals end first
	// The renewals: every third of the lease, each bounded by a third.
	wg.Go(func() {
		t := time.NewTicker(third)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
			sent := time.Now()
			tag, err := conn.exec(lctx, third, renewLeaseSQL, holder, lc.ttl)
			switch {
			case err == nil && tag.RowsAffected() == 0:
				lcancel(ErrLeaseLost) // taken by another
				return
			case err == nil:
				renewed.Store(sent.UnixNano())
			}
			// A failed renewal is tried again at the next tick, while the lease lasts.
		}
	})
	// The watchdog: the holder stops before its lease may expire unrenewed, whatever
	// the renewals wait for.
	wg.Go(func() {
		t := time.NewTimer(lc.ttl)
		defer t.Stop()
		for {
			left := time.Until(time.Unix(0, renewed.Load()).Add(lc.ttl - lc.margin))
			if left <= 0 {
				lcancel(ErrLeaseLost)
				return
			}
			t.Reset(left)
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
		}
	})
	lost := func() bool { return errors.Is(context.Cause(lctx), ErrLeaseLost) }

	if lc.jobs != nil {
		if err := waitForJobs(fctx, conn, lc, "before migrating"); err != nil {
			if lost() {
				err = errors.Join(err, ErrLeaseLost)
			}
			return err
		}
	}
	err = fn(fctx, holder)
	if lc.jobs != nil && err != nil && !lost() {
		// fn's statement may have been cancelled while its schema change goes on: keep
		// the lease (renewing it) until that ends, for lc.keep at most, even when ctx
		// itself ended.
		kctx, kcancel := context.WithTimeout(lctx, lc.keep)
		if werr := waitForJobs(kctx, conn, lc, "after an interrupted migration"); werr != nil {
			// Still running (or unknown): leave the lease to expire rather than let the
			// next migrator start beside it (it would wait for the job in turn).
			holder = ""
			err = errors.Join(err, werr)
		}
		kcancel()
	}
	if lost() {
		err = errors.Join(err, ErrLeaseLost)
	}
	return err
}

// releaseLease deletes holder's lease (nothing if holder is ""), bounded, even after
// ctx ended; a conflict is tried again.
func releaseLease(ctx context.Context, conn *leaseConn, holder string, timeout time.Duration, lastTake time.Time) error {
	if holder == "" {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*timeout)
	defer cancel()
	release := func() error {
		for {
			_, err := conn.exec(rctx, timeout, releaseLeaseSQL, holder)
			if err == nil {
				return nil
			}
			if !collided(err) || rctx.Err() != nil {
				return fmt.Errorf("releasing the migration lease: %w", err)
			}
		}
	}
	if err := release(); err != nil || lastTake.IsZero() {
		return err
	}
	// A take whose reply never came may still be running in the server, waiting for a
	// row lock, and commit after the delete above: PostgreSQL notices a client that is
	// gone only when it writes to it. Its statement_timeout ends it by lastTake; delete
	// again once that has passed.
	if err := sleep(rctx, time.Until(lastTake)+timeout/4); err != nil {
		return fmt.Errorf("releasing the migration lease after a lost take: %w", err)
	}
	return release()
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
