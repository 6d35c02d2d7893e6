package inboxd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/retention"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/schema"
)

// newRuntimeRole creates a login role with no rights at all, dropped when the test ends
// (after its database, whose grants would otherwise hold it).
func newRuntimeRole(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testenv.AdminURL())
	if err != nil {
		t.Fatalf("postgresql: %v", err)
	}
	defer admin.Close(ctx)
	role := "inboxd_rt_" + testenv.Suffix()
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), testenv.AdminURL())
		if err != nil {
			t.Logf("dropping role %s: %v", role, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP ROLE IF EXISTS "+role); err != nil {
			t.Logf("dropping role %s: %v", role, err)
		}
	})
	return role
}

// A role with nothing but the grants "inboxd migrate -print-grants" prints (DML on the
// tables, SELECT on schema_migrations, nextval on the sequences) runs inboxd whole:
// Run starts (it checks the schema version, with no DDL), ingests, processes, retries,
// dead-letters, edits and retries, quarantines and reinjects, relays the outbox,
// prunes, and LISTENs. Before issue 27 Run could not start on such a role (serve
// migrated at start: "permission denied for schema public").
func TestRuntimeRoleNeedsOnlyDML(t *testing.T) {
	role := newRuntimeRole(t)
	db := testenv.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := registration.Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	grants, err := schema.Grants(role, "customers")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range grants {
		if _, err := db.Pool.Exec(ctx, g); err != nil {
			t.Fatalf("%s: %v", g, err)
		}
	}
	pool := db.OpenPool(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.User = role
		cfg.MaxConns = 30
	})
	// The role really has no DDL.
	var pgErr *pgconn.PgError
	if _, err := pool.Exec(ctx, "CREATE TABLE ddl_probe (id INT)"); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Fatalf("CREATE TABLE as the runtime role: %v, want insufficient_privilege (42501)", err)
	}
	if err := schema.Check(ctx, pool); err != nil {
		t.Fatalf("Check as the runtime role: %v", err)
	}

	// LISTEN and pg_notify, as push and the relay use them, with the role's rights.
	listener, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := listener.Exec(ctx, "LISTEN inboxd_role_probe"); err != nil {
		t.Fatalf("LISTEN as the runtime role: %v", err)
	}
	if _, err := pool.Exec(ctx, "SELECT pg_notify('inboxd_role_probe', 'x')"); err != nil {
		t.Fatalf("pg_notify as the runtime role: %v", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	if n, err := listener.Conn().WaitForNotification(wctx); err != nil || n.Payload != "x" {
		t.Fatalf("notification as the runtime role: %v %v", n, err)
	}
	wcancel()
	listener.Release()

	queue, out := testenv.Queue(t), testenv.Queue(t)
	const token = "role-admin-token"
	httpAddr := testenv.FreeAddr(t)
	var firstTry sync.Map
	cfg := inboxd.Config{
		StompAddr: testenv.Broker(t), Destinations: []string{queue}, HTTPAddr: httpAddr, AdminToken: token,
		DisableWebhook: true, MaxAttempts: 2, ImmediateRetries: -1, RetryBaseDelay: 50 * time.Millisecond, RetryMaxDelay: 100 * time.Millisecond,
		SweepInterval: 50 * time.Millisecond, ShutdownTimeout: 10 * time.Second, OutboxPollInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	c, err := inboxd.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Handle("rt.order", inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		var p struct{ Poison, Flaky bool }
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return inboxd.Reject(err)
		}
		if p.Poison {
			return errors.New("poisoned")
		}
		if _, seen := firstTry.LoadOrStore(ev.ID, true); p.Flaky && !seen {
			return errors.New("flaky: the first attempt fails")
		}
		_, err := inboxd.Emit(ctx, tx, inboxd.Outgoing{Destination: out, Body: ev.Payload})
		return err
	}))
	testenv.Start(t, 2*time.Minute, c.Run)

	pub := stompx.NewPublisher(stompx.Config{Addr: testenv.Broker(t)}, 1)
	defer pub.Close()
	ids := make([]string, 6)
	for i := range ids {
		ids[i] = message.NewID()
		body := fmt.Sprintf(`{"id":%q,"flaky":%v,"poison":%v}`, ids[i], i%2 == 1, i == 5)
		if err := pub.Publish(ctx, queue, []byte(body), map[string]string{"event-type": "rt.order"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Publish(ctx, queue, []byte("not an event"), map[string]string{"event-type": "rt.order"}); err != nil {
		t.Fatal(err)
	}
	count := func(sql string, args ...any) int {
		var n int
		if err := pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	testenv.Eventually(t, time.Minute, "5 processed (3 after a failed attempt), 1 dead, 1 quarantined", func() bool {
		return count(`SELECT count(*) FROM journal_state WHERE status = 'PROCESSED'`) == 5 &&
			count(`SELECT count(*) FROM journal_state WHERE status = 'DEAD'`) == 1 && count(`SELECT count(*) FROM quarantine`) == 1
	})
	if n := count(`SELECT count(*) FROM journal_attempt`); n < 3 {
		t.Errorf("attempts recorded: %d, want at least 3 (the flaky ones' and the poisoned one's)", n)
	}

	post := func(path, body string) int {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+httpAddr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return resp.StatusCode
	}
	post("/admin/events/"+ids[5]+"/edit-and-retry", fmt.Sprintf(`{"by":"op@example.com","payload":{"id":%q,"poison":false}}`, ids[5]))
	testenv.Eventually(t, time.Minute, "the edited event processed", func() bool {
		return count(`SELECT count(*) FROM journal_state WHERE status = 'PROCESSED'`) == 6
	})
	var qid string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM quarantine`).Scan(&qid); err != nil {
		t.Fatal(err)
	}
	post("/admin/quarantine/"+qid+"/reinject", `{}`)
	testenv.Eventually(t, time.Minute, "every outbox message sent", func() bool {
		return count(`SELECT count(*) FROM outbox`) == 6 && count(`SELECT count(*) FROM outbox WHERE sent_at IS NULL`) == 0
	})

	// Pruning, by the parts' own code on the role's pool: the journal and quarantine
	// pruner, and the relay's cleanup of sent messages.
	pruner := retention.New(pool, retention.Config{Journal: time.Second, Quarantine: time.Second}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	testenv.Eventually(t, 30*time.Second, "processed entries pruned", func() bool {
		if _, err := pruner.Pass(ctx); err != nil {
			t.Fatalf("pruning as the runtime role: %v", err)
		}
		return count(`SELECT count(*) FROM journal`) == 0 && count(`SELECT count(*) FROM journal_state`) == 0
	})
	relay := outbox.NewRelay(pool, nil, outbox.Config{Retention: time.Millisecond}, metrics.New(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := relay.Cleanup(ctx); err != nil {
		t.Fatalf("outbox cleanup as the runtime role: %v", err)
	}
	if n := count(`SELECT count(*) FROM outbox`); n != 0 {
		t.Errorf("outbox after cleanup: %d rows, want 0", n)
	}
}

// Run changes no schema unless told to: on a database that is behind it refuses to
// start, naming the missing migrations and "inboxd migrate"; on one migrated by a newer
// release it starts only if the newer migrations recorded that they still serve this
// one (expand-only); with MigrateAtStart it migrates, under the lock, and starts.
func TestRunChecksTheSchemaVersion(t *testing.T) {
	ctx := context.Background()
	base := inboxd.Config{StompAddr: testenv.Broker(t), DisableHTTP: true, DisableWebhook: true, ShutdownTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	run := func(t *testing.T, pool *pgxpool.Pool, cfg inboxd.Config) error {
		cfg.Destinations = []string{testenv.Queue(t)}
		c, err := inboxd.New(pool, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return c.Run(rctx) // nil once it ran until the timeout
	}
	t.Run("behind", func(t *testing.T) {
		db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
		err := run(t, db.Pool, base)
		if !errors.Is(err, schema.ErrSchemaBehind) || !strings.Contains(err.Error(), "inboxd migrate") || !strings.Contains(err.Error(), "0001_journal.sql") {
			t.Fatalf("Run on an empty database: %v, want ErrSchemaBehind naming the migrations and inboxd migrate", err)
		}
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil || n != 0 {
			t.Errorf("Run created %d tables (%v), want none", n, err)
		}
	})
	t.Run("migrate at start", func(t *testing.T) {
		db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
		cfg := base
		cfg.MigrateAtStart = true
		if err := run(t, db.Pool, cfg); err != nil {
			t.Fatalf("Run with MigrateAtStart: %v", err)
		}
		if err := schema.Check(ctx, db.Pool); err != nil {
			t.Errorf("after Run with MigrateAtStart: %v", err)
		}
	})
	t.Run("ahead", func(t *testing.T) {
		db := testenv.NewDB(t)
		ms, _ := schema.Migrations()
		latest := ms[len(ms)-1]
		// A newer release's expand-only migration: it still serves this release.
		if _, err := db.Pool.Exec(ctx, `INSERT INTO schema_migrations (version, name, serves_from) VALUES (9001, '9001_newer.sql', $1)`, latest.ServesFrom); err != nil {
			t.Fatal(err)
		}
		if err := run(t, db.Pool, base); err != nil {
			t.Fatalf("Run on a schema ahead by an expand-only migration: %v", err)
		}
		// A newer release's contracting migration: refused.
		if _, err := db.Pool.Exec(ctx, `INSERT INTO schema_migrations (version, name, serves_from) VALUES (9002, '9002_contract.sql', 9002)`); err != nil {
			t.Fatal(err)
		}
		if err := run(t, db.Pool, base); !errors.Is(err, schema.ErrSchemaAhead) || !strings.Contains(err.Error(), "9002") {
			t.Fatalf("Run on a schema ahead by a contracting migration: %v, want ErrSchemaAhead naming 9002", err)
		}
	})
	// With MigrateAtStart, Run checks the schema after migrating, as without: a newer
	// release's contracting migration, which Migrate skips as unknown, is refused.
	t.Run("ahead, migrate at start", func(t *testing.T) {
		db := testenv.NewDB(t)
		if _, err := db.Pool.Exec(ctx, `INSERT INTO schema_migrations (version, name, serves_from) VALUES (9002, '9002_contract.sql', 9002)`); err != nil {
			t.Fatal(err)
		}
		cfg := base
		cfg.MigrateAtStart = true
		if err := run(t, db.Pool, cfg); !errors.Is(err, schema.ErrSchemaAhead) || !strings.Contains(err.Error(), "9002") {
			t.Fatalf("Run with MigrateAtStart on a schema ahead by a contracting migration: %v, want ErrSchemaAhead naming 9002", err)
		}
	})
}

// The upgrade from the oldest journal, written before migration 0007 (no aggregate
// heads; ids generated by the database, before 0013), with events still RECEIVED:
// Run refuses the schema until it is migrated, migrating refuses to skip v0.2.0 unless
// forced, and then every event is processed once, in each aggregate's order.
func TestUpgradeFromJournalBefore0007(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	testenv.MigrateBefore(t, db.Pool, 7) // as the release before 0007 left it
	const n = 300
	for i := range n {
		// As the old ingest wrote them: the id computed by the database from the payload.
		body := fmt.Sprintf(`{"id":%q,"n":%d}`, message.NewID(), i)
		if _, err := db.Pool.Exec(ctx, `INSERT INTO journal (payload, event_type, aggregate_id) VALUES ($1::TEXT::JSONB, 'old.event', $2)`,
			body, fmt.Sprintf("agg-%d", i%7)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE old_runs (run_seq BIGSERIAL PRIMARY KEY, event_id UUID NOT NULL, aggregate_id TEXT NOT NULL, sequence_no BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	cfg := inboxd.Config{StompAddr: testenv.Broker(t), Destinations: []string{testenv.Queue(t)}, DisableHTTP: true, DisableWebhook: true,
		SweepInterval: 50 * time.Millisecond, ShutdownTimeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c, err := inboxd.New(db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Handle("old.event", inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO old_runs (event_id, aggregate_id, sequence_no) VALUES ($1, $2, $3)`, ev.ID, ev.AggregateID, ev.SequenceNo)
		return err
	}))
	if err := c.Run(ctx); !errors.Is(err, schema.ErrSchemaBehind) || !strings.Contains(err.Error(), "0007_aggregate_heads.sql") {
		t.Fatalf("Run before migrating: %v, want ErrSchemaBehind naming 0007", err)
	}
	// From before v0.2.0, with entries: the contract of v0.3.0 refuses, naming v0.2.0,
	// until forced (no older release writes to this database any more).
	if err := inboxd.Migrate(ctx, db.Pool); !errors.Is(err, schema.ErrReleaseSkipped) || !strings.Contains(err.Error(), "v0.2.0") {
		t.Fatalf("Migrate from before v0.2.0: %v, want ErrReleaseSkipped naming v0.2.0", err)
	}
	if _, err := schema.MigrateWith(ctx, db.Pool, schema.Options{Force: true}); err != nil {
		t.Fatal(err)
	}
	testenv.Start(t, time.Minute, c.Run)
	count := func(sql string) int {
		var v int
		if err := db.Pool.QueryRow(ctx, sql).Scan(&v); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return v
	}
	testenv.Eventually(t, time.Minute, "every old event processed", func() bool {
		return count(`SELECT count(*) FROM journal_state WHERE status = 'PROCESSED'`) == n
	})
	if got := count(`SELECT count(*) FROM old_runs`); got != n {
		t.Errorf("committed handler runs = %d, want %d", got, n)
	}
	if got := count(`SELECT count(*) FROM (SELECT run_seq < lag(run_seq) OVER (PARTITION BY aggregate_id ORDER BY sequence_no) AS back FROM old_runs) o WHERE back`); got != 0 {
		t.Errorf("%d events ran before an earlier event of their aggregate", got)
	}
}
