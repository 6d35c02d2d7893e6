package ingest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

func randomText(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b) // random: the database cannot compress it under an index limit
}

// TestPoisonBetweenGoodEvents publishes messages the database would refuse between good
// ones: a 4 KB aggregateId, a 4 KB type, and a number JSONB cannot hold. Before this,
// one of them failed its batch again and again and nothing behind it was journaled.
func TestPoisonBetweenGoodEvents(t *testing.T) {
	addr := testenv.Broker(t)
	poisons := []struct {
		name   string
		body   func(id string) string
		reason message.Reason
	}{
		{"4KB aggregate id", func(id string) string {
			return fmt.Sprintf(`{"id":%q,"aggregateId":%q}`, id, randomText(4000))
		}, message.ReasonInvalidField},
		{"4KB type", func(id string) string { return fmt.Sprintf(`{"id":%q,"type":%q}`, id, randomText(4000)) }, message.ReasonInvalidField},
		{"number out of range", func(id string) string { return fmt.Sprintf(`{"id":%q,"n":1e200000}`, id) }, message.ReasonDBRefused},
	}
	for _, p := range poisons {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			db := testenv.NewDB(t)
			q := testenv.Queue(t)
			const good = 40
			for i := range good + 1 {
				if i == good/2 {
					publish(t, addr, q, []byte(p.body("00000000-0000-4000-8000-ffffffffffff")), map[string]string{"x-test": "poison"})
				}
				if i < good {
					publish(t, addr, q, fmt.Appendf(nil, `{"id":"00000000-0000-4000-8000-%012d"}`, i), nil)
				}
			}
			start := time.Now()
			r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 16, Linger: 2 * time.Millisecond}, db.Pool, hooks{})
			testenv.Eventually(t, 30*time.Second, "good events journaled and the poison quarantined", func() bool {
				return count(t, db.Pool, `SELECT count(*) FROM journal`) == good &&
					count(t, db.Pool, `SELECT count(*) FROM quarantine WHERE reason = $1 AND headers->>'x-test' = 'poison'`, string(p.reason)) == 1
			})
			t.Logf("good events journaled and poison quarantined as %s in %s", p.reason, time.Since(start).Round(time.Millisecond))
			testenv.Eventually(t, 30*time.Second, "every message acked", func() bool { return r.counter("acked", q) == good+1 })
			if p.reason == message.ReasonDBRefused {
				var detail string
				if err := db.Pool.QueryRow(context.Background(), `SELECT detail FROM quarantine`).Scan(&detail); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(detail, "SQLSTATE 22003") {
					t.Errorf("detail = %q, want the SQLSTATE", detail)
				}
				if got := r.counter("quarantined", string(message.ReasonDBRefused)); got != 1 {
					t.Errorf("db_refused counter = %v, want 1", got)
				}
			}
			r.stop(t)
			assertDrained(t, addr, q)
		})
	}
}

// TestInflightBytesBounded publishes bodies of about 200 KB with a prefetch of 2000:
// the subscriber must never hold more than MaxInflightBytes, and still ingest them all.
func TestInflightBytesBounded(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	const n, bound = 30, 1 << 20
	pad := strings.Repeat("p", 200<<10)
	for i := range n {
		publish(t, addr, q, fmt.Appendf(nil, `{"id":"00000000-0000-4000-8000-%012d","pad":%q}`, i, pad), nil)
	}
	for i := range 200 { // small ones behind them
		publish(t, addr, q, fmt.Appendf(nil, `{"id":"00000000-0000-4000-9000-%012d"}`, i), nil)
	}
	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 50, Prefetch: 2000,
		MaxInflightBytes: bound, AckMode: AckCumulative}, db.Pool, hooks{})
	testenv.Eventually(t, 60*time.Second, "all journaled", func() bool { return count(t, db.Pool, `SELECT count(*) FROM journal`) == n+200 })
	if peak := r.dests[q].peakHeld.Load(); peak > bound || peak == 0 {
		t.Errorf("peak bytes held = %d, want at most %d", peak, bound)
	}
	r.stop(t)
	assertDrained(t, addr, q)
}

// TestDatabaseOutageResumes takes the test's database away for real (no new
// connections, every backend terminated) for three seconds, with messages waiting:
// ingest must report itself stuck, resume within a couple of seconds of the database's
// return, log the outage once, and lose nothing.
func TestDatabaseOutageResumes(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	var name string
	if err := db.Pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	admin := func(sql string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, testenv.AdminURL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() { admin(`ALTER DATABASE ` + name + ` ALLOW_CONNECTIONS true`) })
	// The default Backoff: at most a second between tries.
	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 20, Backoff: defaultBackoffForTest()}, db.Pool, hooks{})
	first := publishPlan(t, addr, q, 100, 0, 0, 51)
	waitExact(t, db.Pool, first, 20*time.Second)

	admin(`ALTER DATABASE ` + name + ` ALLOW_CONNECTIONS false`)
	admin(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '` + name + `'`)
	more := publishPlan(t, addr, q, 200, 0, 0, 52)
	time.Sleep(3 * time.Second) // the outage itself, not a wait for an outcome
	if err := r.Health(2 * time.Second); err == nil {
		t.Error("Health = nil during a 3s database outage with messages waiting, want stuck")
	}
	admin(`ALTER DATABASE ` + name + ` ALLOW_CONNECTIONS true`)
	back := time.Now()
	all := first
	all.IDs = append(append([]string{}, first.IDs...), more.IDs...)
	waitExact(t, db.Pool, all, 30*time.Second)
	resumed := time.Since(back)
	t.Logf("ingest resumed %s after the database came back", resumed.Round(time.Millisecond))
	if resumed > 5*time.Second {
		t.Errorf("ingest resumed %s after the database came back, want within a few seconds", resumed)
	}
	if err := r.Health(2 * time.Second); err != nil {
		t.Errorf("Health after recovery: %v", err)
	}
	r.stop(t)
	assertDrained(t, addr, q)
}

// defaultBackoffForTest is the production pacing (at most a second between tries).
func defaultBackoffForTest() backoff.Policy { return backoff.Policy{} }

// schemaBrokenDB answers everything but the ingest statement, which fails as if the
// journal table were missing (42P01): not the message's fault, so nothing may be
// quarantined, and the subscriber retries.
type schemaBrokenDB struct{ database.DB }

func (d schemaBrokenDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, "INSERT INTO journal") {
		return errRow{&pgconn.PgError{Code: "42P01", Message: `relation "journal" does not exist`}}
	}
	return d.DB.QueryRow(ctx, sql, args...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// TestRepeatedFailureLoggedOnceAndReported: journal writes that keep failing are
// retried at least every second, logged once (not once per try), never quarantined,
// and reported by Health once they have failed for longer than stallAfter.
func TestRepeatedFailureLoggedOnceAndReported(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	publishPlan(t, addr, q, 10, 0, 0, 61)
	var logs testenv.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 5, Logger: log, Backoff: defaultBackoffForTest()},
		schemaBrokenDB{db.Pool}, hooks{})
	testenv.Eventually(t, 30*time.Second, "at least four failed writes", func() bool { return r.counter("reconnects", "db") >= 4 })
	if n := strings.Count(logs.String(), "journal write failed"); n != 1 {
		t.Errorf("the failure was logged %d times, want once:\n%s", n, logs.String())
	}
	testenv.Eventually(t, 30*time.Second, "Health reports the failing writes", func() bool {
		err := r.Health(time.Second)
		return err != nil && strings.Contains(err.Error(), "journal writes failing")
	})
	if n := count(t, db.Pool, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Errorf("quarantine rows = %d, want 0: a broken schema is not the messages' fault", n)
	}
}
