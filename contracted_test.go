package inboxd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// contractSQL is what v0.3.0's contract does to the journal (see the shared design of
// the state move): the indexes and the check that name the state columns go first
// (CockroachDB refuses to drop a column a partial index's predicate names), then the
// columns themselves.
const contractSQL = `
DROP INDEX IF EXISTS journal_aggregate_pending;
DROP INDEX IF EXISTS journal_attention;
DROP INDEX IF EXISTS journal_aggregate_parked;
DROP INDEX IF EXISTS journal_terminal;
ALTER TABLE journal DROP CONSTRAINT IF EXISTS journal_status_valid;
ALTER TABLE journal DROP COLUMN status;
ALTER TABLE journal DROP COLUMN attempts;
ALTER TABLE journal DROP COLUMN last_error;
ALTER TABLE journal DROP COLUMN next_attempt_at;
ALTER TABLE journal DROP COLUMN updated_at;
ALTER TABLE journal DROP COLUMN processed_at;
ALTER TABLE journal DROP COLUMN skipped_by;
ALTER TABLE journal DROP COLUMN skipped_at;
ALTER TABLE journal DROP COLUMN last_started_at;
ALTER TABLE journal DROP COLUMN last_duration_ms;`

// TestContractedSchemaFailsClosed runs this release while a newer one (v0.3.0)
// contracts the schema under it, dropping the journal's state columns, as happens in a
// rolling upgrade: this instance must lose nothing (a message it cannot journal is not
// acked, so the broker redelivers it to an upgraded instance), run nothing twice (no
// handler commit), say so once at ERROR, report /readyz not ready with the reason, and
// back off instead of retrying hot.
func TestContractedSchemaFailsClosed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// inFlight contracts the schema while a processing transaction holds events
		// (its handler is waiting): the contract waits for its locks.
		inFlight bool
	}{
		{name: "idle"},
		{name: "under a processing transaction", inFlight: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testContracted(t, tc.inFlight)
		})
	}
}

func testContracted(t *testing.T, inFlight bool) {
	db := testenv.NewDB(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE effects (id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	q := testenv.Queue(t)
	var logs testenv.Buffer
	reg := prometheus.NewRegistry()
	cfg := inboxd.Config{
		StompAddr: testenv.Broker(t), Destinations: []string{q}, HTTPAddr: testenv.FreeAddr(t),
		BatchSize: 10, BatchLinger: 5 * time.Millisecond, Prefetch: 50, AckMode: "client",
		DefaultEventType: "evt", Concurrency: 1, SweepInterval: 50 * time.Millisecond,
		ShutdownTimeout: 3 * time.Second, StallAfter: time.Second, DisableWebhook: true,
		MetricsRegisterer: reg,
		Logger:            slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	c, err := inboxd.New(db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The handler holds the first event after gateAt until the gate opens, inside its
	// processing transaction.
	const gateAt = 5
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	var ran atomic.Int64
	c.Handle("evt", inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		if inFlight && ran.Add(1) > gateAt {
			select {
			case entered <- struct{}{}:
			default:
			}
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (id) VALUES ($1)`, ev.ID)
		return err
	}))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Run did not return within a minute of the stop")
		}
	}
	defer stop()
	defer func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	}()
	readyz := func() (int, string) {
		cl := http.Client{Timeout: time.Second}
		resp, err := cl.Get("http://" + cfg.HTTPAddr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testenv.Eventually(t, 30*time.Second, "ready", func() bool { code, _ := readyz(); return code == http.StatusOK })

	var published []string
	publish := func(n int) {
		t.Helper()
		p := stompx.NewPublisher(stompx.Config{Addr: cfg.StompAddr}, 1)
		defer p.Close()
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		defer pcancel()
		for range n {
			id := fmt.Sprintf("00000000-0000-4000-8000-%012d", len(published))
			if err := p.Publish(pctx, q, fmt.Appendf(nil, `{"id":%q,"type":"evt"}`, id), nil); err != nil {
				t.Fatal(err)
			}
			published = append(published, id)
		}
	}
	count := func(query string) (n int) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, query).Scan(&n); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return n
	}

	publish(20)
	if inFlight {
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the handler never reached the gate")
		}
		// The contract queues behind the processing transaction's locks; the gate opens
		// once it waits, and the transaction commits before the columns go.
		contracted := make(chan error, 1)
		go func() { _, err := db.Pool.Exec(ctx, contractSQL); contracted <- err }()
		testenv.Eventually(t, 30*time.Second, "the contract waits for the processing transaction", func() bool {
			return count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%DROP INDEX IF EXISTS journal_aggregate_pending%'`) > 0
		})
		close(gate)
		if err := <-contracted; err != nil {
			t.Fatalf("contracting: %v", err)
		}
	} else {
		testenv.Eventually(t, 30*time.Second, "the first events processed", func() bool {
			return count(`SELECT count(*) FROM effects`) == 20
		})
		if _, err := db.Pool.Exec(ctx, contractSQL); err != nil {
			t.Fatalf("contracting: %v", err)
		}
	}
	publish(20) // after the contract: only an upgraded instance may take them

	testenv.Eventually(t, 30*time.Second, "/readyz not ready, saying the schema was contracted", func() bool {
		code, body := readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "contracted")
	})
	// The API answers what it cannot do any more with the reason, not an error a request.
	for _, path := range []string{"/journal/stats"} {
		resp, err := http.Get("http://" + cfg.HTTPAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "contracted") {
			t.Errorf("GET %s = %d %s, want 503 saying the schema was contracted", path, resp.StatusCode, b)
		}
	}
	errorLines := func() (n int, about string) {
		for _, l := range readLog(t, &logs) {
			if l.Level == "ERROR" {
				n, about = n+1, l.Msg
			}
		}
		return n, about
	}
	testenv.Eventually(t, 30*time.Second, "an ERROR line about the contracted schema", func() bool { n, _ := errorLines(); return n > 0 })
	// No hot loop: the workers back off while the schema stays contracted.
	runs := func() float64 { return gathered(t, reg, "inboxd_sweeper_runs_total") }
	before := runs()
	time.Sleep(3 * time.Second) // a window to count tries in (not a wait for an outcome)
	tries := runs() - before
	t.Logf("%.0f processing tries in 3 s with the schema contracted", tries)
	if tries > 10 {
		t.Errorf("%.0f processing tries in 3 s with the schema contracted (sweep interval %s), want a backoff", tries, cfg.SweepInterval)
	}
	stop()

	// Nothing ran twice.
	if n, distinct := count(`SELECT count(*) FROM effects`), count(`SELECT count(DISTINCT id) FROM effects`); n != distinct {
		t.Errorf("%d handler commits for %d events: some ran twice", n, distinct)
	}
	// Nothing lost: every message published is journaled or still on the broker.
	journaled := map[string]bool{}
	rows, err := db.Pool.Query(ctx, `SELECT id::TEXT FROM journal`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		journaled[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	missing := map[string]bool{}
	for _, id := range published {
		if !journaled[id] {
			missing[id] = true
		}
	}
	t.Logf("%d published, %d journaled, %d left on the broker", len(published), len(journaled), len(missing))
	if len(missing) > 0 {
		drainIDs(t, cfg.StompAddr, q, missing)
	}

	for _, l := range readLog(t, &logs) {
		if l.Level == "WARN" || l.Level == "ERROR" {
			t.Logf("%s %s %s: %s", l.Level, l.Component, l.What, l.Msg)
		}
	}
	n, about := errorLines()
	if n != 1 || !strings.Contains(about, "contracted") || !strings.Contains(about, "upgrade") {
		t.Errorf("%d ERROR lines (the last %q), want exactly one saying the schema was contracted and to upgrade", n, about)
	}
}

// drainIDs reads queue until every id in want has come back (the broker redelivers what
// was never acked), or fails the test after 30 s.
func drainIDs(t *testing.T, addr, queue string, want map[string]bool) {
	t.Helper()
	conn, err := stomp.Dial("tcp", addr, stomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Disconnect() }()
	sub, err := conn.Subscribe(queue, stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for len(want) > 0 {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			for id := range want {
				if strings.Contains(string(m.Body), id) {
					delete(want, id)
				}
			}
		case <-deadline:
			t.Fatalf("%d messages neither journaled nor on the broker: lost", len(want))
		}
	}
}

// gathered is the sum of a counter's series in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
