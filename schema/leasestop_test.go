package schema_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/schema"
)

// proxiedPool opens a pool on db that goes through a FreezeProxy.
func proxiedPool(t *testing.T, db *testenv.DB) (*pgxpool.Pool, *testenv.FreezeProxy) {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartFreezeProxy(t, u.Host)
	pool := db.OpenPool(t, func(c *pgxpool.Config) {
		host, port, _ := net.SplitHostPort(proxy.Addr)
		p, _ := strconv.Atoi(port)
		c.ConnConfig.Host, c.ConnConfig.Port = host, uint16(p)
	})
	// Cleanups run last first: the proxy forwards again before the pool closes.
	t.Cleanup(proxy.Thaw)
	return pool, proxy
}

// A holder whose renewals hang (its path to the database frozen right after it took
// the lease, while its migration's own connection would live on) is cancelled with
// ErrLeaseLost before the lease expires, so that the migrator that takes the lease
// next never runs beside it.
func TestLeaseHolderWithHungRenewalsIsStopped(t *testing.T) {
	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	proxied, proxy := proxiedPool(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const lease = 900 * time.Millisecond
	var firstStopped, secondStarted atomic.Int64 // Unix nanoseconds
	took := make(chan struct{})
	firstErr := make(chan error, 1)
	go func() {
		firstErr <- schema.WithLease(ctx, proxied, lease, func(ctx context.Context) error {
			proxy.Freeze()
			close(took)
			// Its migration keeps working for 4 leases, unless stopped.
			select {
			case <-ctx.Done():
			case <-time.After(4 * lease):
			}
			firstStopped.Store(time.Now().UnixNano())
			return ctx.Err()
		})
	}()
	<-took
	if err := schema.WithLease(ctx, db.Pool, lease, func(context.Context) error {
		secondStarted.Store(time.Now().UnixNano())
		return nil
	}); err != nil {
		t.Fatalf("the second migrator: %v", err)
	}
	proxy.Thaw()
	err := <-firstErr
	if !errors.Is(err, schema.ErrLeaseLost) {
		t.Errorf("the first holder returned %v, want ErrLeaseLost", err)
	}
	if first, second := firstStopped.Load(), secondStarted.Load(); first > second {
		t.Errorf("two holders at once: the first stopped %s after the second took the lease", time.Duration(first-second))
	} else {
		t.Logf("the first holder stopped %s before the second took the lease (lease %s)", time.Duration(second-first), lease)
	}
}

// The lease's statements do not take a connection from the caller's pool: a migrator
// on a pool of one connection (which its migration holds) gets the lease.
func TestLeaseOnAPoolOfOne(t *testing.T) {
	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	pool := db.OpenPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pool.Acquire(ctx) // as withLock holds it for the migration
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	ran := false
	if err := schema.WithLease(ctx, pool, 3*time.Second, func(ctx context.Context) error {
		ran = true
		_, err := conn.Exec(ctx, `SELECT 1`)
		return err
	}); err != nil || !ran {
		t.Fatalf("withLease on a pool of one: %v (ran %v)", err, ran)
	}
}

// leaseHeld reports whether any migrator holds a lease row (other than the "dead" one
// a test left, expired).
func leaseHeld(t *testing.T, db *testenv.DB) bool {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM schema_migration_lock WHERE holder <> 'dead' AND expires_at > now()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// A migration that panics leaves no lease behind: the next migrator does not wait
// for it to expire.
func TestLeaseReleasedAfterPanic(t *testing.T) {
	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not reach the caller")
			}
		}()
		_ = schema.WithLease(ctx, db.Pool, 30*time.Second, func(context.Context) error { panic("a migration's bug") })
	}()
	if leaseHeld(t, db) {
		t.Error("the lease is still held after the holder panicked")
	}
}

// A take whose reply is lost (its context ended while the statement went on in the
// server) leaves no lease behind, even when the server commits it after the
// migrator's release ran: the release deletes again once the take's statement timeout
// has passed. Whether the server commits a take whose client is gone is up to its
// timing, so the test tries a few times.
func TestLeaseReleasedAfterLostTakeReply(t *testing.T) {
	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, schema.LeaseTableSQL); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		lostTakeReply(t, db)
		if leaseHeld(t, db) {
			t.Fatalf("round %d: a lease is held after its take's reply was lost", round)
		}
	}
}

// lostTakeReply makes a migrator's take wait for a row lock, ends the migrator's
// context, then lets the take go on in the server.
func lostTakeReply(t *testing.T, db *testenv.DB) {
	ctx := context.Background()
	// An expired lease, locked by a transaction of the test's: the take waits for it.
	if _, err := db.Pool.Exec(ctx, `DELETE FROM schema_migration_lock`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, schema.TakeLeaseSQL, "dead", -time.Second); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT * FROM schema_migration_lock FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	done := make(chan error, 1)
	go func() {
		done <- schema.WithLease(mctx, db.Pool, 30*time.Second, func(context.Context) error { return nil })
	}()
	waiting := func(stmt string) bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`, stmt+" schema_migration_lock%").Scan(&n)
		return n > 0
	}
	testenv.Eventually(t, 10*time.Second, "the take waits for the row lock", func() bool { return waiting("INSERT INTO") })
	// The migrator gives up (pgx drops the connection, sends no cancel request) and
	// releases: its delete finds no row of its own, so it does not wait for the test's
	// row lock. Then the take may go on in the server and commit.
	mcancel()
	testenv.Eventually(t, 10*time.Second, "the migrator's release deletes", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'DELETE FROM schema_migration_lock%'`).Scan(&n)
		return n > 0 || len(done) > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("withLease succeeded after its context ended")
	}
	testenv.Eventually(t, 10*time.Second, "the take ends in the server", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'INSERT INTO schema_migration_lock%' AND state = 'active'`).Scan(&n)
		return n == 0
	})
}
