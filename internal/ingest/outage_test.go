package ingest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/testenv"
)

// killingDB is the test database seen through a wrapper that, on chosen ingest calls,
// first terminates every backend of the database (as a failover or an operator would),
// so the ingest statement runs on a dead connection. It records the failures it caused.
type killingDB struct {
	database.DB
	t        *testing.T
	dbName   string
	calls    atomic.Int32
	failOn   map[int32]bool
	mu       sync.Mutex
	failures []error
}

func (k *killingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !strings.Contains(sql, "INSERT INTO journal") {
		return k.DB.QueryRow(ctx, sql, args...)
	}
	if n := k.calls.Add(1); k.failOn[n] {
		admin, err := pgx.Connect(ctx, testenv.AdminURL())
		if err != nil {
			k.t.Errorf("admin connection: %v", err)
		} else {
			var killed int
			if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = $1 AND pid <> pg_backend_pid()`, k.dbName).Scan(&killed); err != nil {
				k.t.Errorf("terminating backends: %v", err)
			}
			admin.Close(ctx)
		}
	}
	return recordRow{Row: k.DB.QueryRow(ctx, sql, args...), k: k}
}

type recordRow struct {
	pgx.Row
	k *killingDB
}

func (r recordRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if err != nil {
		r.k.mu.Lock()
		r.k.failures = append(r.k.failures, err)
		r.k.mu.Unlock()
	}
	return err
}

// TestDatabaseGoesAway terminates the subscriber's database connections under it, three
// batches in a row: nothing may be acked for those batches, the subscriber must come back
// by itself, and the end state must be exact.
func TestDatabaseGoesAway(t *testing.T) {
	for _, inFlight := range []int{1, 2} {
		t.Run(fmt.Sprintf("commits in flight %d", inFlight), func(t *testing.T) { testDatabaseGoesAway(t, inFlight) })
	}
}

func testDatabaseGoesAway(t *testing.T, inFlight int) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	exp := publishPlan(t, addr, q, 500, 0.2, 0.02, 31)
	var dbName string
	if err := db.Pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	kdb := &killingDB{DB: db.Pool, t: t, dbName: dbName, failOn: map[int32]bool{3: true, 4: true, 5: true}}
	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 20, Linger: 2 * time.Millisecond, CommitsInFlight: inFlight}, kdb, hooks{})
	waitExact(t, db.Pool, exp, 60*time.Second)
	testenv.Eventually(t, 30*time.Second, "every message acked", func() bool { return r.counter("acked", q) >= float64(exp.Sent) })
	r.stop(t)
	kdb.mu.Lock()
	failures := len(kdb.failures)
	kdb.mu.Unlock()
	if failures == 0 {
		t.Fatal("no ingest call failed: the outage was not exercised")
	}
	// One reconnect per failed session: serially that is one per failed ingest; with two
	// writes in flight, one terminated connection pool can fail both in one session.
	if got := r.counter("reconnects", "db"); got < 1 || got > float64(failures) || (inFlight == 1 && got != float64(failures)) {
		t.Errorf("db reconnects = %v for %d failed ingests with %d in flight", got, failures, inFlight)
	}
	// Acked exactly once per delivery that was committed: failed batches were not acked,
	// so the acked total is the number of messages plus only the redelivered duplicates.
	if acked, recv := r.counter("acked", q), r.counter("received", q); acked >= recv {
		t.Errorf("acked %v of %v received: failed batches must not be acked", acked, recv)
	}
	assertDrained(t, addr, q)
}

// TestBrokerRestart kills a private broker while a batch is being committed, starts it
// again on the same data directory, and checks that the subscriber reconnects and
// ingests everything exactly once.
func TestBrokerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private ActiveMQ twice")
	}
	t.Parallel()
	broker := testenv.StartPrivateBroker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	exp := publishPlan(t, broker.Addr, q, 1000, 0.2, 0.02, 41)

	reached, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	h := hooks{beforeIngest: func(context.Context, string, int) {
		if calls.Add(1) == 5 {
			close(reached)
			<-release
		}
	}}
	r := startSubscriber(t, Config{Addr: broker.Addr, Destinations: []string{q}, BatchSize: 25, Linger: 2 * time.Millisecond}, db.Pool, h)
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("subscriber did not reach its fifth batch")
	}
	broker.Kill()
	close(release) // this batch commits after the broker died: its acks are lost, it comes back as duplicates
	testenv.Eventually(t, 30*time.Second, "subscriber notices the dead broker", func() bool { return !r.Ready() })
	if n := count(t, db.Pool, `SELECT count(*) FROM journal`); n >= len(exp.IDs) {
		t.Fatalf("journal already has %d of %d rows before the restart: not mid-stream", n, len(exp.IDs))
	}
	broker.Start()
	back := time.Now()
	// Reconnects are tried at least every second: resubscribed within seconds of the
	// broker's return (loosely: the machine is shared).
	testenv.Eventually(t, 10*time.Second, "resubscribed soon after the broker's return", func() bool { return r.Ready() })
	t.Logf("resubscribed %s after the broker came back", time.Since(back).Round(time.Millisecond))
	waitExact(t, db.Pool, exp, 60*time.Second)
	if got := r.counter("reconnects", "stomp"); got < 1 {
		t.Errorf("stomp reconnects = %v, want at least 1", got)
	}
	testenv.Eventually(t, 20*time.Second, "caught up", func() bool { return r.Ready() })
	r.stop(t)
	assertDrained(t, broker.Addr, q)
}
