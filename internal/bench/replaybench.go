package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/replay"
)

// The replay rows (shadow and replay-live) measure the two ways of running handlers
// again over processed history: a shadow replay, whose transactions are all rolled
// back, and a real replay run beside live traffic.

// runShadow is the shadow row's child: a shadow replay (replay.Runner, as
// Client.ShadowReplay runs it) of the first a.N processed events of the row's database,
// oldest first, with the demo's handler and no rate bound.
func runShadow(ctx context.Context, a rowArgs, log *slog.Logger) (rowResult, error) {
	pool, err := openPool(ctx, a.DBURL, a.Knobs.PoolSize)
	if err != nil {
		return rowResult{}, err
	}
	defer pool.Close()
	dialect, err := database.Detect(ctx, pool)
	if err != nil {
		return rowResult{}, err
	}
	tp, _ := a.Knobs.tracerProvider()
	rep, err := replay.Runner{Pool: pool, Dialect: dialect, Registry: newRegistry(), Log: log, Metrics: metrics.New()}.
		Run(ctx, replay.Options{Limit: a.N, Engine: process.Config{TracerProvider: tp}})
	if err != nil {
		return rowResult{}, fmt.Errorf("shadow replay: %w", err)
	}
	s := rep.Summary
	res := rowResult{Received: s.Events, DrainSeconds: rep.Finished.Sub(rep.Started).Seconds(), Differing: s.Differing}
	res.Note = fmt.Sprintf("shadowed %d events, each in its own transaction, rolled back: %d same, %d differing, %d timed out, %d with no recorded message to compare",
		s.Events, s.Same, s.Differing, s.TimedOut, s.MessagesUnknown)
	return res, nil
}

// shadowTables are the tables whose checksum the shadow row compares before and after
// its run: inboxd's and the demo handler's.
var shadowTables = []string{"journal", "journal_attempt", "journal_state", "aggregate_head", "quarantine", "outbox",
	"replay_run", "replay_item", "replay_hold", "customers"}

// tableChecksums returns an md5 of each table's rows, in text form and sorted.
func tableChecksums(ctx context.Context, db database.DB) (map[string]string, error) {
	out := make(map[string]string, len(shadowTables))
	for _, t := range shadowTables {
		var sum string
		q := `SELECT md5(coalesce(string_agg(r::TEXT, ',' ORDER BY r::TEXT), '')) FROM ` + t + ` AS r`
		if err := db.QueryRow(ctx, q).Scan(&sum); err != nil {
			return nil, fmt.Errorf("checksumming %s: %w", t, err)
		}
		out[t] = sum
	}
	return out, nil
}

// shadowRow measures the shadow row on the database the e2e-max row (base) has just
// processed c on: a child runs a shadow replay of every processed event, and the
// parent checks that every table's checksum is unchanged and that the unchanged
// handler differs nowhere. Its rate (events per second) is also given as a ratio to
// e2e-max's own, in processed events per second over its drain.
func (r *runner) shadowRow(ctx context.Context, db *freshDB, k Knobs, c Corpus, rep int, base Measurement, queue string) (Measurement, error) {
	processed, events := len(c.IDs), len(c.IDs)
	if r.o.ShadowLimit > 0 {
		events = min(events, r.o.ShadowLimit)
	}
	m := Measurement{Row: rowShadow, Config: k.label(rowShadow), Knobs: k, N: len(c.Bodies), Rep: rep}
	if r.o.ShadowLimit > 0 {
		m.Config += fmt.Sprintf(", the oldest %d at most", r.o.ShadowLimit)
	}
	ctx, cancel := context.WithTimeout(ctx, r.o.RowTimeout)
	defer cancel()
	pool, err := openPool(ctx, db.URL, 1)
	if err != nil {
		return m, err
	}
	defer pool.Close()
	before, err := tableChecksums(ctx, pool)
	if err != nil {
		return m, err
	}
	a := rowArgs{Row: rowShadow, Queue: queue, N: events, DBURL: db.URL, StompAddr: r.o.StompAddr, Broker: r.o.Broker, Knobs: k,
		CPUProfile: r.profilePath(rowShadow, k, m.N, rep)}
	m.Profile = a.CPUProfile
	r.logf("rep %d: shadow N=%d: shadowing %d of e2e-max's %d processed events", rep, m.N, events, processed)
	out, err := runChild(ctx, a, r.pids, nil)
	if err != nil {
		return m, err
	}
	m.fill(out, events)
	after, err := tableChecksums(ctx, pool)
	if err != nil {
		return m, err
	}
	var changed []string
	for _, t := range shadowTables {
		if before[t] != after[t] {
			changed = append(changed, t)
		}
	}
	switch {
	case out.Result.Received != events:
		m.Check = fmt.Sprintf("shadowed %d events, want %d", out.Result.Received, events)
	case len(changed) > 0:
		m.Check = "tables changed by a shadow run: " + strings.Join(changed, ", ")
	case out.Result.Differing != 0:
		m.Check = fmt.Sprintf("%d events differ from what was recorded, want 0 (the handler is unchanged)", out.Result.Differing)
	default:
		m.Check, m.OK = fmt.Sprintf("ok (events=%d, 0 differing, %d tables unchanged)", events, len(shadowTables)), true
	}
	if base.DrainSeconds > 0 && m.MsgPerSec > 0 {
		baseRate := float64(processed) / base.DrainSeconds
		m.VsBase, m.VsBaseWhat = m.MsgPerSec/baseRate, "e2e-max's"
		m.Note = fmt.Sprintf("%.2f× e2e-max's rate in this repetition, which processed its %d events at %.0f events/s (%.0f msg/s with duplicates and malformed); %s",
			m.VsBase, processed, baseRate, base.MsgPerSec, m.Note)
	}
	r.logf("rep %d: shadow N=%d: %.0f events/s (%.2f× e2e-max), %.2f CPU s/10k, peak RSS %.1f MiB (load %.2f, cal %.2f s), check %s",
		rep, m.N, m.MsgPerSec, m.VsBase, m.CPUPer10k, float64(m.PeakRSSBytes)/(1<<20), m.Load, m.Calibration, m.Check)
	return m, nil
}

// runReplays is the replay part of a running inboxd (parts.go), in the replay-live
// row's child: it runs the replay run the parent starts, beside ingest and processing,
// on their pool.
func runReplays(ctx context.Context, pool *pgxpool.Pool, a rowArgs, m *metrics.Metrics, log *slog.Logger) error {
	dialect, err := database.Detect(ctx, pool)
	if err != nil {
		return err
	}
	tp, _ := a.Knobs.tracerProvider()
	x := replay.Executor{Pool: pool, Dialect: dialect, Registry: newRegistry(), Log: log, Metrics: m,
		Engine: process.Config{Concurrency: a.Knobs.Concurrency, KickLinger: a.Knobs.KickLinger, TracerProvider: tp}}
	return replay.RunRunning(ctx, x, time.Second)
}

// newRegistry holds the demo's registration handler.
func newRegistry() *process.Registry {
	reg := process.NewRegistry()
	reg.Register(registration.EventType, registration.Handler)
	return reg
}

// replayHistory is what the replay-live row replays: events processed through the
// broker before the measured phase, of aggregates of their own.
type replayHistory struct {
	events, aggregates int
	rate               float64 // the run's rate limit
	run                string  // the run's id, once started
}

// replayEvents is how many events the replay-live row processes, then replays: set,
// or enough for the replay to run at its limit from before the warm-up to past the
// measured phase (and at least 1,000).
func (o *options) replayEvents() int {
	if o.ReplayEvents > 0 {
		return o.ReplayEvents
	}
	return max(1000, int(math.Ceil(o.ReplayRate*(o.E2EDuration.Seconds()+30))))
}

// historyBodies are h's registrations, spread over h.aggregates aggregates.
func historyBodies(h *replayHistory, rng *rand.Rand, registered, sentAt time.Time) [][]byte {
	bodies := make([][]byte, h.events)
	for i := range bodies {
		bodies[i] = registrationBodyOf(message.SeededID(rng), i, fmt.Sprintf("history-%d", i%h.aggregates),
			fmt.Sprintf("bench-history-%d@example.com", i), registered, sentAt)
	}
	return bodies
}

// startHistoryReplay publishes h's events, waits until they are processed, then plans a
// replay of every processed event (all of h's) and starts it at h.rate, with the
// messages its handlers emit suppressed; the child's replay part runs it. It returns
// once the run has replayed its first event.
func (r *runner) startHistoryReplay(ctx context.Context, h *replayHistory, queue string, pool *pgxpool.Pool, rng *rand.Rand, registered time.Time) error {
	if err := publish(ctx, r.o.StompAddr, queue, historyBodies(h, rng, registered, time.Now())); err != nil {
		return fmt.Errorf("publishing the history: %w", err)
	}
	if err := waitProcessed(ctx, pool, h.events, 2*time.Minute); err != nil {
		return fmt.Errorf("processing the history: %w", err)
	}
	run, _, err := replay.StorePlan(ctx, pool, journal.Selection{Statuses: []journal.Status{journal.StatusProcessed}}, false, 0)
	if err != nil {
		return err
	}
	if run.Events != int64(h.events) {
		return fmt.Errorf("the replay plan holds %d events, want %d", run.Events, h.events)
	}
	if err := journal.StartReplayRun(ctx, pool, run.ID, "benchmark: replay beside live traffic", "inboxd bench", h.rate, false); err != nil {
		return err
	}
	h.run = run.ID
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := journal.GetReplayRun(ctx, pool, run.ID, true)
		if err != nil {
			return err
		}
		if st.Done > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replay run %s (%s) replayed nothing in 30s", run.ID, st.State)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// replayProgress reads the run's done and pending items.
func replayProgress(ctx context.Context, db database.DB, run string) (done, pending int64, err error) {
	st, err := journal.GetReplayRun(ctx, db, run, true)
	return st.Done, st.Pending, err
}
