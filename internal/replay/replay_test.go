package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"

	"github.com/inboxd/inboxd/internal/bench"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/eventctx"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/replay"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/testenv/stomptest"
)

// The fixture's event kinds and the destination its handler emits to.
const (
	kindPlaced    = "order.placed"
	kindCancelled = "order.cancelled"
	outDest       = "/queue/shadow-orders"
)

// noise are the fixture's documented noise rules: the time the handler stamps.
var noise = []string{"body.$.createdAt", "headers.x-time"}

// orders is the fixture's handler, safe to run again as every handler must be (an
// upsert, as a projection writes), v1 when its fields are zero; each field is one
// changed behaviour.
type orders struct {
	rejectCancelled bool   // reject every cancellation
	placedDest      string // emit placements here instead
	dropCancelled   bool   // emit nothing for cancellations
	extraRow        bool   // write a second row for placements
	sleep           time.Duration
	dest            string // emit here instead of outDest
}

func (o orders) Handle(ctx context.Context, tx pgx.Tx, ev process.Event) error {
	if o.sleep > 0 {
		select {
		case <-time.After(o.sleep):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var p struct {
		Bad bool `json:"bad"`
	}
	_ = json.Unmarshal(ev.Payload, &p)
	if p.Bad || (o.rejectCancelled && ev.Type == kindCancelled) {
		return process.Rejectf("order %s refused", ev.ID)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO shadow_orders (event_id, aggregate_id, kind) VALUES ($1, $2, $3)
		ON CONFLICT (event_id) DO UPDATE SET kind = excluded.kind`,
		ev.ID, ev.AggregateID, ev.Type); err != nil {
		return err
	}
	if o.extraRow && ev.Type == kindPlaced {
		if _, err := tx.Exec(ctx, `INSERT INTO shadow_audit (event_id) VALUES ($1) ON CONFLICT DO NOTHING`, ev.ID); err != nil {
			return err
		}
	}
	if o.dropCancelled && ev.Type == kindCancelled {
		return nil
	}
	dest := outDest
	if o.dest != "" {
		dest = o.dest
	}
	if o.placedDest != "" && ev.Type == kindPlaced {
		dest = o.placedDest
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	body, _ := json.Marshal(map[string]string{"order": ev.AggregateID, "kind": ev.Type, "createdAt": now})
	_, err := outbox.Emit(ctx, tx, outbox.Outgoing{Destination: dest, Body: body,
		Headers: map[string]string{"x-time": now, "kind": ev.Type}, ID: outbox.DerivedID(ev.ID, "v1")})
	return err
}

// history is a processed fixture history: n events over 50 aggregates, two kinds,
// every 40th refused (REJECTED), all processed by the v1 handler.
type history struct {
	db       *testenv.DB
	ids      []string
	kind     map[string]string
	rejected map[string]bool
}

func newHistory(t *testing.T, n int) *history {
	t.Helper()
	return newHistoryWith(t, n, orders{})
}

func newHistoryWith(t *testing.T, n int, o orders) *history {
	t.Helper()
	db := testenv.NewDB(t)
	ctx := context.Background()
	for _, ddl := range []string{
		`CREATE TABLE shadow_orders (event_id UUID PRIMARY KEY, aggregate_id TEXT NOT NULL, kind TEXT NOT NULL)`,
		`CREATE TABLE shadow_audit (event_id UUID PRIMARY KEY)`,
	} {
		if _, err := db.Pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	h := &history{db: db, kind: map[string]string{}, rejected: map[string]bool{}}
	payloads := make([][]byte, n)
	for i := range n {
		kind := kindPlaced
		if i%3 == 2 {
			kind = kindCancelled
		}
		m := map[string]any{"id": pt.NewID(), "type": kind, "aggregateId": fmt.Sprintf("order-%02d", i%50)}
		if i%40 == 39 {
			m["bad"] = true
		}
		payloads[i], _ = json.Marshal(m)
	}
	h.ids = pt.Ingest(t, db.Pool, payloads...)
	for i, id := range h.ids {
		h.kind[id] = kindPlaced
		if i%3 == 2 {
			h.kind[id] = kindCancelled
		}
		h.rejected[id] = i%40 == 39
	}
	reg := h.registry(o)
	e := process.New(db.Pool, reg, process.Config{}, nil, nil)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- process.NewSweeper(e, process.SweeperConfig{Interval: time.Millisecond, Grace: 0, BatchSize: 100}).Run(sctx)
	}()
	testenv.Eventually(t, 2*time.Minute, "history processed", func() bool {
		return pt.CountStatus(t, db.Pool, "PROCESSED")+pt.CountStatus(t, db.Pool, "REJECTED") == n
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("sweeper: %v", err)
	}
	return h
}

func (h *history) registry(o orders) *process.Registry {
	reg := process.NewRegistry()
	reg.Register(kindPlaced, o)
	reg.Register(kindCancelled, o)
	return reg
}

func (h *history) shadow(t *testing.T, o orders, opts replay.Options) *replay.Report {
	t.Helper()
	rep, err := replay.Runner{Pool: h.db.Pool, Dialect: database.PostgreSQL, Registry: h.registry(o)}.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func mustPaths(t *testing.T, ss ...string) []replay.Path {
	t.Helper()
	p, err := replay.ParsePaths(ss)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checksums is an md5 of every row of every table of the test's schema, by table.
func checksums(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, tb := range tables {
		var sum *string
		q := fmt.Sprintf(`SELECT md5(string_agg(t::TEXT, E'\n' ORDER BY t::TEXT)) FROM %s AS t`, pgx.Identifier{tb}.Sanitize())
		if err := pool.QueryRow(ctx, q).Scan(&sum); err != nil {
			t.Fatalf("%s: %v", tb, err)
		}
		out[tb] = fmt.Sprint(sum)
		if sum != nil {
			out[tb] = *sum
		}
	}
	return out
}

// A shadow run over 2,000 processed events changes nothing: every table, inboxd's and
// the handler's, has the same checksum before and after (sequences are not tables, and
// a shadow run's nextval calls are not rolled back), and the outbox holds no row the
// run emitted, so the relay has nothing to publish. It logs the shadow rate with a CPU
// calibration (bench.Calibrate: seconds for one core to SHA-256 300 MiB).
func TestShadowRunChangesNothing(t *testing.T) {
	addr := testenv.Broker(t)
	dest := testenv.Queue(t)
	h := newHistoryWith(t, 2000, orders{dest: dest})
	ctx := context.Background()
	// The history's own messages count as published, so that what the relay finds after
	// the shadow run is what the run left.
	if _, err := h.db.Pool.Exec(ctx, `UPDATE outbox SET sent_at = now() WHERE sent_at IS NULL`); err != nil {
		t.Fatal(err)
	}
	before := checksums(t, h.db.Pool)
	var unsentBefore int64
	if err := h.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE sent_at IS NULL`).Scan(&unsentBefore); err != nil {
		t.Fatal(err)
	}
	calBefore := bench.Calibrate(30)
	rep := h.shadow(t, orders{dest: dest}, replay.Options{Ignore: mustPaths(t, noise...)})
	calAfter := bench.Calibrate(30)
	after := checksums(t, h.db.Pool)
	if len(before) < 5 {
		t.Fatalf("checksummed only %v", before)
	}
	for tb, sum := range before {
		if after[tb] != sum {
			t.Errorf("table %s changed: %s → %s", tb, sum, after[tb])
		}
	}
	if rep.Summary.Events != 2000 || rep.Summary.Same != 2000 {
		t.Fatalf("summary %+v, want 2000 events, all the same", rep.Summary)
	}
	var unsent int64
	if err := h.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE sent_at IS NULL`).Scan(&unsent); err != nil {
		t.Fatal(err)
	}
	if unsent != unsentBefore {
		t.Fatalf("unsent outbox rows %d → %d", unsentBefore, unsent)
	}
	// The broker receives nothing: a relay pass publishes nothing, and the first message
	// on the destination is a sentinel sent after it.
	pub := stompx.NewPublisher(stomptest.Config(addr), 1)
	t.Cleanup(func() { _ = pub.Close() })
	n, err := outbox.NewRelay(h.db.Pool, pub, outbox.Config{}, nil, nil).RelayOnce(ctx)
	if err != nil || n != 0 {
		t.Fatalf("the relay published %d messages (%v) after the shadow run", n, err)
	}
	if err := pub.Publish(ctx, dest, []byte("sentinel"), nil); err != nil {
		t.Fatal(err)
	}
	conn, err := stompx.Dial(ctx, stomptest.Config(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.MustDisconnect()
	sub, err := conn.Subscribe(dest, stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-sub.C:
		if m.Err != nil || string(m.Body) != "sentinel" {
			t.Fatalf("the broker got %q (%v) on %s before the sentinel", m.Body, m.Err, dest)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no sentinel within 30s")
	}
	t.Logf("shadow rate: %d events in %s, %.0f events/s (GOMAXPROCS %d, calibration %.2f s before, %.2f s after: "+
		"seconds for one core to SHA-256 300 MiB)", rep.Summary.Events, rep.Finished.Sub(rep.Started).Round(time.Millisecond),
		rep.Summary.Rate, runtime.GOMAXPROCS(0), calBefore, calAfter)
}

// The unchanged handler over its own history shows 0 differences with the documented
// noise rules; without them, the stamped time shows in every emitted message, which
// proves the rules, not a blind comparison, give the 0.
func TestShadowUnchangedHandlerNoDifferences(t *testing.T) {
	h := newHistory(t, 200)
	rep := h.shadow(t, orders{}, replay.Options{Ignore: mustPaths(t, noise...)})
	if rep.Summary.Differing != 0 || rep.Summary.Same != 200 || rep.Summary.MessagesUnknown != 5 {
		t.Fatalf("with noise rules: %+v; first differences %+v", rep.Summary, first(rep.Events))
	}
	raw := h.shadow(t, orders{}, replay.Options{})
	if raw.Summary.MessagesChanged != 195 {
		t.Fatalf("without noise rules: %+v, want the 195 emitted messages changed", raw.Summary)
	}
}

func first(evs []replay.EventResult) []replay.EventResult {
	return evs[:min(3, len(evs))]
}

// Each changed behaviour is reported for exactly the events it affects, under its
// category, and nothing else: rejecting one kind, emitting to another destination,
// dropping an emission, writing an extra row (against a baseline run's table writes),
// and a handler that overruns its timeout.
func TestShadowFindsEachChange(t *testing.T) {
	h := newHistory(t, 120)
	rules := mustPaths(t, noise...)
	baseline := h.shadow(t, orders{}, replay.Options{Ignore: rules})
	if baseline.Summary.Differing != 0 || len(baseline.TableWrites) != 120 {
		t.Fatalf("baseline: %+v, %d table writes", baseline.Summary, len(baseline.TableWrites))
	}
	settled := func(kind string) map[string]bool { // processed events of kind (rejected ones already were)
		out := map[string]bool{}
		for _, id := range h.ids {
			if h.kind[id] == kind && !h.rejected[id] {
				out[id] = true
			}
		}
		return out
	}
	all := map[string]bool{}
	for _, id := range h.ids {
		all[id] = true
	}
	for _, tt := range []struct {
		name    string
		h       orders
		timeout time.Duration
		want    map[string]bool
		cats    []replay.Category
	}{
		{"reject one kind", orders{rejectCancelled: true}, 0, settled(kindCancelled),
			[]replay.Category{replay.CategoryOutcome, replay.CategoryError, replay.CategoryRemoved, replay.CategoryTableWrites}},
		{"emit to another destination", orders{placedDest: "/queue/elsewhere"}, 0, settled(kindPlaced),
			[]replay.Category{replay.CategoryChanged}},
		{"drop an emission", orders{dropCancelled: true}, 0, settled(kindCancelled),
			[]replay.Category{replay.CategoryRemoved}},
		{"write an extra row", orders{extraRow: true}, 0, settled(kindPlaced),
			[]replay.Category{replay.CategoryTableWrites}},
		{"overrun the timeout", orders{sleep: time.Minute}, 100 * time.Millisecond, all,
			[]replay.Category{replay.CategoryTimedOut}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := replay.Options{Ignore: rules, Baseline: baseline, Timeout: tt.timeout}
			if tt.timeout > 0 {
				opts.Limit = 5
				want := map[string]bool{}
				for _, id := range h.ids[:5] {
					want[id] = true
				}
				tt.want = want
			}
			rep := h.shadow(t, tt.h, opts)
			got := map[string]bool{}
			for _, ev := range rep.Events {
				got[ev.ID] = true
				if fmt.Sprint(ev.Categories) != fmt.Sprint(tt.cats) {
					t.Errorf("event %s (%s): categories %v, want %v; %+v", ev.ID, h.kind[ev.ID], ev.Categories, tt.cats, ev)
				}
			}
			if len(got) != len(tt.want) {
				t.Errorf("%d events differ, want %d", len(got), len(tt.want))
			}
			for id := range tt.want {
				if !got[id] {
					t.Errorf("event %s (%s) not reported", id, h.kind[id])
				}
			}
			if rep.Summary.Differing != len(tt.want) || rep.Summary.Same != rep.Summary.Events-len(tt.want) {
				t.Errorf("summary %+v", rep.Summary)
			}
		})
	}
}

// The handler runs as a shadow run: Event.Mode and ReplayRun tell it, and Emit writes
// nothing to the outbox however the handler emits.
func TestShadowHandlerSeesShadowMode(t *testing.T) {
	h := newHistory(t, 3)
	var modes []string
	reg := process.NewRegistry()
	hf := process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
		modes = append(modes, string(ev.Mode)+"/"+fmt.Sprint(ev.ReplayRun != ""))
		if m, ok := eventctx.From(ctx); !ok || m.ID != ev.ID || m.Mode != eventctx.Shadow {
			return errors.New("the context does not carry the shadowed event")
		}
		_, err := outbox.EmitBatch(ctx, tx, []outbox.Outgoing{{Destination: outDest, Body: []byte(`{}`)}})
		return err
	})
	reg.Register(kindPlaced, hf)
	reg.Register(kindCancelled, hf)
	m := metrics.New()
	rep, err := replay.Runner{Pool: h.db.Pool, Registry: reg, Metrics: m}.Run(context.Background(), replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(modes, ",") != "shadow/true,shadow/true,shadow/true" || rep.Summary.OutcomeChanged != 0 {
		t.Fatalf("modes %v, summary %+v", modes, rep.Summary)
	}
	// The bodies differ from the recorded ones: 3 differing events, counted.
	var d dto.Metric
	if err := m.ShadowEvents.WithLabelValues("differing").Write(&d); err != nil || d.GetCounter().GetValue() != 3 {
		t.Fatalf("inboxd_shadow_events_total{result=differing} = %v (%v), want 3", d.GetCounter().GetValue(), err)
	}
}

// Every format renders, and the HTML escapes what handlers wrote (error texts, bodies).
func TestReportFormats(t *testing.T) {
	h := newHistory(t, 6)
	baseline := h.shadow(t, orders{}, replay.Options{Ignore: mustPaths(t, noise...)})
	rep := h.shadow(t, orders{placedDest: "/queue/elsewhere", rejectCancelled: true}, replay.Options{Ignore: mustPaths(t, noise...), Baseline: baseline})
	rep.Events[0].Shadow.Error = "<script>alert(1)</script>"
	for _, f := range []string{replay.FormatJSON, replay.FormatMarkdown, replay.FormatHTML} {
		var b bytes.Buffer
		if err := rep.Write(&b, f); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if strings.Contains(out, "<script>") {
			t.Errorf("%s: unescaped handler text", f)
		}
		for _, want := range []string{"messages changed", "outcome changed", rep.Events[0].ID, "shadow_orders"} {
			if !strings.Contains(out, want) && !(f == replay.FormatJSON && strings.Contains(want, " ")) {
				t.Errorf("%s: no %q in\n%s", f, want, out)
			}
		}
	}
	var b bytes.Buffer
	_ = rep.Write(&b, replay.FormatJSON)
	back, err := replay.ReadReport(&b)
	if err != nil || back.Summary != rep.Summary || len(back.TableWrites) != 6 {
		t.Fatalf("JSON round trip: %v, %+v", err, back)
	}
	if err := rep.Write(&b, "pdf"); err == nil {
		t.Fatal("unknown format accepted")
	}
}

// The selection takes exactly the events asked for: by aggregate, by ids, by status,
// by the time received and by type, and a limit.
func TestShadowSelection(t *testing.T) {
	h := newHistory(t, 100)
	ctx := context.Background()
	var mid time.Time
	if err := h.db.Pool.QueryRow(ctx, `SELECT received_at FROM journal WHERE id = $1`, h.ids[50]).Scan(&mid); err != nil {
		t.Fatal(err)
	}
	var rejected int
	for _, r := range h.rejected {
		if r {
			rejected++
		}
	}
	var cancelled int
	for _, k := range h.kind {
		if k == kindCancelled {
			cancelled++
		}
	}
	var received int
	if err := h.db.Pool.QueryRow(ctx, `SELECT count(*) FROM journal WHERE received_at >= $1`, mid).Scan(&received); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		sel  journal.Selection
		lim  int
		want int
	}{
		{"all settled", journal.Selection{}, 0, 100},
		{"one aggregate", journal.Selection{AggregateID: "order-07"}, 0, 2},
		{"ids", journal.Selection{IDs: []string{h.ids[3], h.ids[97]}}, 0, 2},
		{"rejected only", journal.Selection{Statuses: []journal.Status{journal.StatusRejected}}, 0, rejected},
		{"failed only: none", journal.Selection{Statuses: []journal.Status{journal.StatusFailed, journal.StatusDead}}, 0, 0},
		{"one type", journal.Selection{EventType: kindCancelled}, 0, cancelled},
		{"received since", journal.Selection{Since: mid}, 0, received},
		{"received until", journal.Selection{Until: mid}, 0, 100 - received},
		{"limit", journal.Selection{}, 7, 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep := h.shadow(t, orders{}, replay.Options{Selection: tt.sel, Limit: tt.lim, Ignore: mustPaths(t, noise...)})
			if rep.Summary.Events != tt.want || rep.Summary.Same != tt.want {
				t.Fatalf("summary %+v, want %d events, all the same", rep.Summary, tt.want)
			}
		})
	}
}

// Messages emitted by a release that did not record the emitting event (event_id NULL,
// as a v0.1.0 instance of a rolling upgrade writes them) are reported unknown, never
// as removed or changed.
func TestShadowUnrecordedMessagesAreUnknown(t *testing.T) {
	h := newHistory(t, 40)
	if _, err := h.db.Pool.Exec(context.Background(), `UPDATE outbox SET event_id = NULL`); err != nil {
		t.Fatal(err)
	}
	rep := h.shadow(t, orders{dropCancelled: true}, replay.Options{Ignore: mustPaths(t, noise...)})
	if rep.Summary.MessagesUnknown != 40 || rep.Summary.Differing != 0 {
		t.Fatalf("summary %+v, want 40 unknown and no difference", rep.Summary)
	}
}

// A row held by a live transaction makes the shadowed event that needs it time out
// after the lock timeout, instead of queueing behind it; the other events run; and the
// run is paced by its rate.
func TestShadowLockTimeoutAndRate(t *testing.T) {
	h := newHistory(t, 10)
	ctx := context.Background()
	live, err := h.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Rollback(ctx)
	if _, err := live.Exec(ctx, `UPDATE shadow_orders SET kind = kind WHERE event_id = $1`, h.ids[4]); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep := h.shadow(t, orders{}, replay.Options{Ignore: mustPaths(t, noise...), LockTimeout: 100 * time.Millisecond, Rate: 40})
	took := time.Since(start)
	if rep.Summary.TimedOut != 1 || rep.Summary.Same != 9 || len(rep.Events) != 1 || rep.Events[0].ID != h.ids[4] {
		t.Fatalf("summary %+v, events %+v; want %s timed out, the 9 others the same", rep.Summary, rep.Events, h.ids[4])
	}
	// 10 events at 40/s: the 10th starts 225 ms after the first at the earliest.
	if took < 200*time.Millisecond {
		t.Fatalf("10 events at 40/s took %s", took)
	}
}

// A replay plan holds the selected events and, by the tail rule, the later settled
// events of their aggregates, in journal order, with its counts; a plan over its limit
// is refused.
func TestBuildPlan(t *testing.T) {
	h := newHistory(t, 100) // aggregate order-NN has events NN and NN+50
	ctx := context.Background()
	p, err := replay.BuildPlan(ctx, h.db.Pool, journal.Selection{IDs: []string{h.ids[0]}}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Events != 2 || p.Selected != 1 || p.AddedByTail != 1 || p.Items[0].ID != h.ids[0] || p.Items[1].ID != h.ids[50] || p.Aggregates != 1 {
		t.Fatalf("plan %+v", p)
	}
	p, err = replay.BuildPlan(ctx, h.db.Pool, journal.Selection{IDs: []string{h.ids[0]}}, true, 0)
	if err != nil || p.Events != 1 || p.AddedByTail != 0 {
		t.Fatalf("without the tail rule: %+v, %v", p, err)
	}
	// The rejected events are 39 (order-39, followed by 89) and 79 (order-29, the last of it).
	p, err = replay.BuildPlan(ctx, h.db.Pool, journal.Selection{Statuses: []journal.Status{journal.StatusRejected}}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range p.Items {
		got = append(got, fmt.Sprintf("%s/%v", it.ID, it.Selected))
	}
	want := []string{h.ids[39] + "/true", h.ids[79] + "/true", h.ids[89] + "/false"}
	if fmt.Sprint(got) != fmt.Sprint(want) || p.Aggregates != 2 || p.Types[kindPlaced]+p.Types[kindCancelled] != 3 {
		t.Fatalf("plan %v %+v, want %v", got, p, want)
	}
	if _, err := replay.BuildPlan(ctx, h.db.Pool, journal.Selection{IDs: []string{h.ids[0]}}, false, 1); !errors.Is(err, journal.ErrPlanTooLarge) {
		t.Fatalf("a plan of 2 under a limit of 1: %v", err)
	}
}

// A shadow transaction that conflicts (SQLSTATE 40001: on CockroachDB the low-priority
// shadow transaction is the one aborted) runs again, as processing would, and after
// its last try is reported as timed out: it gave way to live traffic.
func TestShadowConflictRetriedThenTimedOut(t *testing.T) {
	h := newHistory(t, 4)
	conflict := `DO $$ BEGIN RAISE EXCEPTION 'restart transaction' USING ERRCODE = '40001'; END $$`
	calls := map[string]int{}
	flaky := func(times int) process.Handler {
		return process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
			calls[ev.ID]++
			if times < 0 || calls[ev.ID] <= times {
				_, err := tx.Exec(ctx, conflict)
				return err
			}
			return orders{}.Handle(ctx, tx, ev)
		})
	}
	run := func(hd process.Handler) *replay.Report {
		reg := process.NewRegistry()
		reg.Register(kindPlaced, hd)
		reg.Register(kindCancelled, hd)
		rep, err := replay.Runner{Pool: h.db.Pool, Registry: reg}.Run(context.Background(), replay.Options{Ignore: mustPaths(t, noise...)})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := run(flaky(2)); rep.Summary.Same != 4 {
		t.Fatalf("two conflicts, then success: %+v %+v", rep.Summary, rep.Events)
	}
	clear(calls)
	rep := run(flaky(-1))
	if rep.Summary.TimedOut != 4 {
		t.Fatalf("always conflicting: %+v", rep.Summary)
	}
	for id, n := range calls {
		if n != 3 {
			t.Errorf("event %s ran %d times, want 3", id, n)
		}
	}
}

// What a handler run emitted before it failed is rolled back with it, as its outbox
// rows would be: after an immediate retry only the messages of the run that succeeded
// are compared.
func TestShadowForgetsMessagesOfAFailedRun(t *testing.T) {
	h := newHistory(t, 6)
	calls := map[string]int{}
	hd := process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
		calls[ev.ID]++
		if err := (orders{}).Handle(ctx, tx, ev); err != nil || calls[ev.ID] > 1 {
			return err
		}
		return errors.New("flaky after emitting")
	})
	reg := process.NewRegistry()
	reg.Register(kindPlaced, hd)
	reg.Register(kindCancelled, hd)
	rep, err := replay.Runner{Pool: h.db.Pool, Registry: reg}.Run(context.Background(),
		replay.Options{Ignore: mustPaths(t, noise...), Engine: process.Config{ImmediateRetries: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Summary.Same != 6 {
		t.Fatalf("summary %+v, events %+v", rep.Summary, rep.Events)
	}
}
