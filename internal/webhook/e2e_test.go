package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/webhook"
	"github.com/inboxd/inboxd/internal/webhook/sinktest"
)

// instance is one inboxd: its own pool, engine, HTTPS webhook and (optionally) sweeper.
type instance struct {
	url    string
	client *http.Client
	m      *metrics.Metrics
}

const maxAttempts = 4

// sweepRetriesOnly leaves RECEIVED rows to the webhook: only FAILED rows are swept.
var sweepRetriesOnly = &process.SweeperConfig{Interval: 10 * time.Millisecond, Grace: time.Hour}

func startInstance(t *testing.T, db *testenv.DB, fx *pt.Effects, sweeper *process.SweeperConfig) instance {
	t.Helper()
	pool := db.OpenPool(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 10
	})
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, fx)
	reg.Register(registration.EventType, registration.Handler)
	m := metrics.New()
	engine := process.New(pool, reg, process.Config{Concurrency: 8, MaxAttempts: maxAttempts,
		BaseBackoff: 2 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		ImmediateRetries: -1}, m, nil) // the checks count one handler run per attempt
	h := webhook.New(webhook.Config{AuthHeader: token, Sink: "journal"}, engine, pool, m, nil)
	u, client := serve(t, h)
	if sweeper != nil {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = process.NewSweeper(engine, *sweeper).Run(ctx)
		}()
		t.Cleanup(func() { cancel(); <-done })
	}
	return instance{url: u, client: client, m: m}
}

func newSink(insts ...instance) *sinktest.Sink {
	s := &sinktest.Sink{Client: insts[0].client, AuthHeader: token, InFlight: 8}
	for _, in := range insts {
		s.URLs = append(s.URLs, in.url)
	}
	return s
}

// scenario is a mix of events with known final outcomes.
type scenario struct {
	payloads                      [][]byte
	processed, dead, rejected     int
	customers, effectsProcessed   int
	registrations, effectEvents   int
	duplicateEmails, invalidRegns int
	flaky                         int // fail twice, then succeed
}

func buildScenario(effects, aggregates, registrations int) scenario {
	var s scenario
	for i := 0; i < effects; i++ {
		spec := pt.Spec{Aggregate: fmt.Sprintf("agg-%d", i%aggregates)}
		switch i % 20 {
		case 3:
			spec.FailTimes = 2 // fails twice, then succeeds
			s.flaky++
		case 11:
			// Ends DEAD, which parks its aggregate: alone in its own, so that nothing
			// waits behind it.
			spec.Always, spec.Aggregate = true, fmt.Sprintf("dead-%d", i)
		case 17:
			spec.Reject = true
		}
		switch {
		case spec.Always:
			s.dead++
		case spec.Reject:
			s.rejected++
		default:
			s.processed++
			s.effectsProcessed++
		}
		s.payloads = append(s.payloads, pt.Payload(spec))
	}
	s.effectEvents = effects
	reg := func(email, jurisdiction, name string) []byte {
		b, _ := json.Marshal(map[string]string{"id": pt.NewID(), "type": registration.EventType, "name": name,
			"email": email, "jurisdiction": jurisdiction, "createdAt": "2025-01-02T03:04:05Z"})
		return b
	}
	for i := 0; i < registrations; i++ {
		j := []string{"mga", "ukgc"}[i%2]
		s.payloads = append(s.payloads, reg(fmt.Sprintf("user%d@example.com", i), j, "User"))
		s.processed++
		s.customers++
		if i%8 == 0 { // same email and jurisdiction from another event
			s.payloads = append(s.payloads, reg(fmt.Sprintf("USER%d@example.com", i), strings.ToUpper(j), "Other"))
			s.rejected++
			s.duplicateEmails++
		}
		if i%10 == 0 { // invalid input
			s.payloads = append(s.payloads, reg("not-an-email", j, "X"))
			s.rejected++
			s.invalidRegns++
		}
	}
	s.registrations = registrations + s.duplicateEmails + s.invalidRegns
	return s
}

// verify waits until nothing is pending and checks the exact final state. 90 s: in the
// CockroachDB-faithful profile PostgreSQL's SSI aborts most concurrent batches of the
// webhook and the sweeper (TestTwoInstances logs over 1,000 conflicts), and 45 s ran
// out in CI with events still RECEIVED. 90 s ran out too, once, while the tests' own
// polling reads took part in SSI and made more of those batches conflict; they no
// longer do (testenv.Observe), and 90 s stays as headroom for a slow phase.
func (s scenario) verify(t *testing.T, db *testenv.DB) pt.Report {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for pt.CountStatus(t, db.Pool, "RECEIVED")+pt.CountStatus(t, db.Pool, "FAILED") != 0 {
		if time.Now().After(deadline) {
			dumpPending(t, db)
			t.Fatal("timed out waiting for no pending events")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := pt.Check(t, db.Pool)
	want := map[journal.Status]int{"PROCESSED": s.processed, "DEAD": s.dead, "REJECTED": s.rejected}
	for st, n := range want {
		if r.ByStatus[st] != n {
			t.Errorf("%s = %d, want %d (all: %v)", st, r.ByStatus[st], n, r.ByStatus)
		}
	}
	if r.Effects != s.effectsProcessed || r.Distinct != s.effectsProcessed {
		t.Errorf("effects = %d (%d distinct), want %d", r.Effects, r.Distinct, s.effectsProcessed)
	}
	n, err := registration.Count(context.Background(), db.Pool)
	if err != nil || int(n) != s.customers {
		t.Errorf("customers = %d, %v; want %d", n, err, s.customers)
	}
	var attempts3 int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM journal AS j JOIN journal_state AS s ON s.id = j.id
		WHERE j.payload->>'failTimes' = '2' AND s.status = 'PROCESSED' AND s.attempts = 3`).Scan(&attempts3); err != nil {
		t.Fatal(err)
	}
	if attempts3 != s.flaky {
		t.Errorf("flaky events PROCESSED on attempt 3 = %d, want %d", attempts3, s.flaky)
	}
	var deadAttempts int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM journal_state WHERE status = 'DEAD' AND attempts = $1`, maxAttempts).Scan(&deadAttempts); err != nil {
		t.Fatal(err)
	}
	if deadAttempts != s.dead {
		t.Errorf("DEAD after %d attempts = %d, want %d", maxAttempts, deadAttempts, s.dead)
	}
	return r
}

func shuffled(rows []json.RawMessage) []json.RawMessage {
	out := append([]json.RawMessage(nil), rows...)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func journalRows(t *testing.T, db *testenv.DB, clock *sinktest.Clock) []json.RawMessage {
	t.Helper()
	rows, err := sinktest.FromJournal(context.Background(), db.Pool, nil, clock)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// Whole batches redelivered after a 2xx, duplicates out of order, replay storms, and
// every row emitted once more after processing (as a changefeed restarted from an old
// checkpoint does; a journal from before v0.3.0 also echoed its status updates).
func TestRedeliveryStorm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	if err := registration.Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	fx := pt.NewEffects(t, db.Pool)
	inst := startInstance(t, db, fx, sweepRetriesOnly)
	sink := newSink(inst)
	sc := buildScenario(400, 37, 80)
	pt.Ingest(t, db.Pool, sc.payloads...)
	clock := &sinktest.Clock{}
	rows := journalRows(t, db, clock)

	start := time.Now()
	if err := sink.Send(ctx, shuffled(rows), 25); err != nil {
		t.Fatal(err)
	}
	firstPass := time.Since(start)
	// Replay storm: the same rows three more times, concurrently, in other orders and
	// other batch sizes.
	var wg sync.WaitGroup
	for _, size := range []int{7, 50, 100} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sink.Send(ctx, shuffled(rows), size); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// Every row once more, after processing: all ignored or no-ops.
	if err := sink.Send(ctx, shuffled(journalRows(t, db, clock)), 40); err != nil {
		t.Fatal(err)
	}
	r := sc.verify(t, db)
	st := sink.Stats()
	checkHandlerRuns(t, sinkCallsOver(fx, db, t), inst.m)
	t.Logf("events=%d deliveries=%d (posts %d, retries %d) effects=%d customers=%d statuses=%v; first pass %d rows in %s (%.0f rows/s)",
		r.Events, st.Rows, st.Posts, st.Retries, r.Effects, sc.customers, r.ByStatus, len(rows), firstPass, float64(len(rows))/firstPass.Seconds())
	if gauge(t, inst.m, "inboxd_webhook_rows_total") < float64(st.Rows) {
		t.Errorf("webhook rows counted < rows delivered")
	}
	if n := gaugeLabel(t, inst.m, "inboxd_process_outcomes_total", "outcome", "dead"); int(n) != sc.dead {
		t.Errorf("dead outcomes counted = %v, want %d", n, sc.dead)
	}
	testenv.Eventually(t, 30*time.Second, "DEAD gauge refreshed by the sweeper", func() bool {
		return gauge(t, inst.m, "inboxd_dead_events") == float64(sc.dead)
	})
}

// conflictsOf is how many batches the engines of ms rolled back on a serialization
// conflict (40001) and ran again: inboxd_process_outcomes_total{outcome="conflict"}.
func conflictsOf(t *testing.T, ms ...*metrics.Metrics) int {
	t.Helper()
	n := 0
	for _, m := range ms {
		n += int(gaugeLabel(t, m, "inboxd_process_outcomes_total", "outcome", "conflict"))
	}
	return n
}

// checkHandlerRuns checks how often the handler succeeded per processed event (over:
// sinkCallsOver). Under the default isolation (READ COMMITTED) exactly once. Under
// SERIALIZABLE (testenv.Serializable, the CockroachDB-faithful profile) a batch that
// conflicts is rolled back and run again whole, its handlers included, as on CockroachDB
// (https://www.cockroachlabs.com/docs/stable/transaction-retry-error-reference): the
// README states that only the database effects in the handler's transaction are exactly
// once, and sc.verify/pt.Check count those from the committed table. The runs are still
// bounded: an event runs at most once more per conflicting batch run, and PostgreSQL's
// SSI conflicts more often than CockroachDB's (it tracks reads by index page, not key).
func checkHandlerRuns(t *testing.T, over map[string]int, ms ...*metrics.Metrics) {
	t.Helper()
	if !testenv.Serializable() {
		for id, n := range over {
			t.Errorf("event %s: handler succeeded %d times", id, n)
		}
		return
	}
	conflicts := conflictsOf(t, ms...)
	for id, n := range over {
		if n < 1 || n > 1+conflicts {
			t.Errorf("event %s: handler succeeded %d times, want 1 plus at most one per conflict (%d)", id, n, conflicts)
		}
	}
	t.Logf("SERIALIZABLE: %d batch conflicts re-ran the handlers of %d events", conflicts, len(over))
}

// sinkCallsOver returns the processed events whose handler succeeded more than once;
// the effects table already proves it, this double-checks from the handler's side.
func sinkCallsOver(fx *pt.Effects, db *testenv.DB, t *testing.T) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT s.id::TEXT, s.attempts FROM journal_state AS s JOIN journal AS j ON j.id = s.id
		WHERE s.status = 'PROCESSED' AND j.event_type = $1`, pt.EffectType)
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		id       string
		attempts int
	}
	recs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rec, error) {
		var x rec
		return x, r.Scan(&x.id, &x.attempts)
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range recs {
		// Failed attempts call the handler too; successes = calls - failed attempts.
		if ok := fx.Calls(r.id) - (r.attempts - 1); ok != 1 {
			out[r.id] = ok
		}
	}
	return out
}

// Two inboxd instances behind one feed, each with a sweeper racing the webhook
// (grace 0), events arriving while others are being processed.
func TestTwoInstances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	if err := registration.Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	fx := pt.NewEffects(t, db.Pool)
	sw := &process.SweeperConfig{Interval: 5 * time.Millisecond, Grace: 0, BatchSize: 25}
	a := startInstance(t, db, fx, sw)
	b := startInstance(t, db, fx, sw)
	sink := newSink(a, b)
	sc := buildScenario(600, 50, 60)
	clock := &sinktest.Clock{}
	start := time.Now()
	// Ingest in waves; the feed delivers each wave (twice) while the next arrives.
	var wg sync.WaitGroup
	for lo := 0; lo < len(sc.payloads); lo += 100 {
		ids := pt.Ingest(t, db.Pool, sc.payloads[lo:min(lo+100, len(sc.payloads))]...)
		rows, err := sinktest.FromJournal(ctx, db.Pool, ids, clock)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := sink.Send(ctx, shuffled(rows), 20); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	r := sc.verify(t, db)
	elapsed := time.Since(start)
	st := sink.Stats()
	t.Logf("events=%d deliveries=%d effects=%d customers=%d statuses=%v in %s (%.0f events/s, two instances)",
		r.Events, st.Rows, r.Effects, sc.customers, r.ByStatus, elapsed, float64(r.Events)/elapsed.Seconds())
	checkHandlerRuns(t, sinkCallsOver(fx, db, t), a.m, b.m)
}

// The database goes away mid-delivery: the webhook answers 5xx, the sink retries,
// and once the database is back the final state is exact.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	if err := registration.Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	fx := pt.NewEffects(t, db.Pool)
	inst := startInstance(t, db, fx, sweepRetriesOnly)
	sink := newSink(inst)
	sink.InFlight = 4
	sc := buildScenario(600, 40, 40)
	pt.Ingest(t, db.Pool, sc.payloads...)
	rows := journalRows(t, db, &sinktest.Clock{})

	admin, err := pgx.Connect(ctx, testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(ctx) })
	u, _ := url.Parse(db.URL)
	name := strings.TrimPrefix(u.Path, "/")
	setAllowed := func(allowed bool) {
		t.Helper()
		if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS %t", name, allowed)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { setAllowed(true) })

	sent := make(chan error, 1)
	go func() { sent <- sink.Send(ctx, rows, 10) }()
	// 60 s: in the CockroachDB-faithful profile, beside the rest of make test, PostgreSQL's
	// SSI restarts many of the first batches (see README), and 50 took over 20 s once.
	testenv.Eventually(t, 60*time.Second, "some events processed", func() bool {
		return pt.CountStatus(t, db.Pool, "PROCESSED") >= 50
	})
	setAllowed(false)
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the sink to see 5xx answers", func() bool {
		return sink.Stats().ByStatus[http.StatusServiceUnavailable] >= 10
	})
	setAllowed(true)
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(90 * time.Second): // as verify's
		t.Fatal("sink did not finish after the database came back")
	}
	// db.Pool's connections were terminated too; the pool replaces them on use.
	var r pt.Report
	testenv.Eventually(t, 30*time.Second, "test pool reconnected", func() bool {
		return db.Pool.Ping(ctx) == nil
	})
	r = sc.verify(t, db)
	st := sink.Stats()
	if st.Retries == 0 {
		t.Error("the sink never retried")
	}
	t.Logf("events=%d deliveries=%d posts=%d retries=%d answers=%v effects=%d statuses=%v",
		r.Events, st.Rows, st.Posts, st.Retries, st.ByStatus, r.Effects, r.ByStatus)
}

// Per-aggregate order holds whatever order the feed delivers in: every row in its
// own batch, newest first, many in flight, half of them in the bare envelope; no
// sweeper, so deferred events are picked up by their predecessor's completion.
func TestOrderingWithOutOfOrderDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	if err := registration.Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	fx := pt.NewEffects(t, db.Pool)
	inst := startInstance(t, db, fx, nil)
	sink := newSink(inst)
	var payloads [][]byte
	for i := 0; i < 200; i++ {
		payloads = append(payloads, pt.Payload(pt.Spec{Aggregate: fmt.Sprintf("agg-%d", i%5)}))
	}
	ids := pt.Ingest(t, db.Pool, payloads...)
	raw, err := journal.RowsAsJSON(ctx, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := &sinktest.Clock{}
	var rows []json.RawMessage
	for i := len(raw) - 1; i >= 0; i-- {
		var r struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(raw[i], &r)
		if i%2 == 0 {
			rows = append(rows, sinktest.Bare(raw[i], r.ID, "journal", clock.Now()))
		} else {
			rows = append(rows, sinktest.Wrapped(raw[i], r.ID, "journal", clock.Now()))
		}
	}
	if err := sink.Send(ctx, rows, 1); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "all processed", func() bool {
		return pt.CountStatus(t, db.Pool, "PROCESSED") == len(ids)
	})
	r := pt.Check(t, db.Pool)
	if r.Effects != len(ids) {
		t.Errorf("effects = %d, want %d", r.Effects, len(ids))
	}
	t.Logf("deferred rows: %v", gaugeLabel(t, inst.m, "inboxd_webhook_rows_total", "disposition", "deferred"))
}

func gaugeLabel(t *testing.T, m *metrics.Metrics, name, label, value string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return mt.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func dumpPending(t *testing.T, db *testenv.DB) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT id::TEXT, aggregate_id, sequence_no, status, attempts,
		coalesce(last_error, ''), next_attempt_at - now() FROM journal_state WHERE status IN ('RECEIVED', 'FAILED') ORDER BY aggregate_id, sequence_no LIMIT 20`)
	if err != nil {
		t.Log(err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, agg, st, le string
		var seq int64
		var att int
		var next time.Duration
		if err := rows.Scan(&id, &agg, &seq, &st, &att, &le, &next); err != nil {
			t.Log(err)
			return
		}
		t.Logf("pending: %s agg=%s seq=%d %s attempts=%d next in %s err=%q", id, agg, seq, st, att, next, le)
	}
	rows.Close()
	// The heads the sweeper claims from: a pending entry that is no head, or a head
	// not due, shows here.
	heads, err := db.Pool.Query(context.Background(), `SELECT aggregate_id, head_id::TEXT, head_seq, received, parked,
		due_at - now() FROM aggregate_head ORDER BY aggregate_id LIMIT 20`)
	if err != nil {
		t.Log(err)
		return
	}
	defer heads.Close()
	for heads.Next() {
		var agg, id string
		var seq int64
		var received, parked bool
		var due time.Duration
		if err := heads.Scan(&agg, &id, &seq, &received, &parked, &due); err != nil {
			t.Log(err)
			return
		}
		t.Logf("head: agg=%s %s seq=%d received=%v parked=%v due in %s", agg, id, seq, received, parked, due)
	}
}
