package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
)

// The rows that show how cost grows (issue 20): with the work blocked behind failed
// heads, and with the journal's history.
const (
	// rowBacklog drains fresh events while a backlog waits behind FAILED heads due in an
	// hour, at each -backlog level, and times ClaimHeads on that backlog.
	rowBacklog = "backlog"
	// rowJournalSize runs the ingest and e2e-max rows on a journal pre-filled with
	// -journal-size settled entries.
	rowJournalSize = "journal-size"
)

// claimSamples is how many ClaimHeads calls the backlog row times per level.
const claimSamples = 20

// backlogRows measures the backlog row at every level of one repetition; each level's
// drain time is also given as a ratio to the first level's (normally 0 blocked).
func (r *runner) backlogRows(ctx context.Context, k Knobs, rep int) ([]Measurement, error) {
	var out []Measurement
	for _, level := range r.o.Backlog {
		m, err := r.backlogRow(ctx, k, rep, level)
		if err != nil {
			return out, err
		}
		if len(out) > 0 && out[0].DrainSeconds > 0 {
			m.Slowdown, m.SlowdownVs = m.DrainSeconds/out[0].DrainSeconds, fmt.Sprintf("with %d blocked", r.o.Backlog[0])
			m.Note = fmt.Sprintf("drain %.2f× that %s; %s", m.Slowdown, m.SlowdownVs, m.Note)
		}
		r.logf("rep %d: backlog %d: %d fresh events drained in %.2fs, claim p50/p99 %.1f/%.1f ms; %s",
			rep, level, m.N, m.DrainSeconds, m.ClaimLatency.P50, m.ClaimLatency.P99, m.Check)
		out = append(out, m)
	}
	return out, nil
}

// backlogRow is one level: a database holding -backlog-heads aggregates whose head is
// FAILED and due in an hour with level RECEIVED events behind them (one INSERT, not
// through the broker), ClaimHeads timed on it, then -backlog-fresh events of other
// aggregates published and drained by ingest and the engine, as in e2e-max.
func (r *runner) backlogRow(ctx context.Context, k Knobs, rep, level int) (Measurement, error) {
	fresh := r.o.BacklogFresh
	m := Measurement{Row: rowBacklog, Config: fmt.Sprintf("%d blocked behind %d FAILED heads; batch=%d conc=%d push", level, r.o.BacklogHeads, k.BatchSize, k.Concurrency),
		Knobs: k, N: fresh, Rep: rep}
	ctx, cancel := context.WithTimeout(ctx, r.o.RowTimeout)
	defer cancel()
	db, pool, done, err := r.scratchDB(ctx, rowBacklog)
	if err != nil {
		return m, err
	}
	defer done()
	t := time.Now()
	if err := journal.SeedBlocked(ctx, pool, r.o.BacklogHeads, level); err != nil {
		return m, err
	}
	r.logf("rep %d: backlog %d: seeded in %.1fs", rep, level, time.Since(t).Seconds())
	lat, err := claimLatency(ctx, pool, claimSamples)
	if err != nil {
		return m, err
	}
	m.ClaimLatency = &lat

	c := Generate(Mix{N: fresh, Seed: uint64(rep)})
	queue := fmt.Sprintf("/queue/inboxd-bench.%s.%s", rowBacklog, suffix())
	if err := publish(ctx, r.o.StompAddr, queue, c.Bodies); err != nil {
		return m, err
	}
	a := rowArgs{Row: rowBacklog, Queue: queue, N: fresh, DBURL: db.URL, StompAddr: r.o.StompAddr, Broker: r.o.Broker, Knobs: k,
		CPUProfile: r.profilePath(rowBacklog, k, level, rep)}
	m.Profile = a.CPUProfile
	out, err := runChild(ctx, a, r.pids, nil)
	if err != nil {
		r.purge(ctx, queue)
		return m, err
	}
	m.fill(out, fresh)
	m.Check, m.OK = r.checkBacklog(ctx, queue, pool, c, level)
	return m, nil
}

// claimLatency times n ClaimHeads calls (limit 100, grace 0, as the engine's workers
// claim), each in its own transaction, rolled back.
func claimLatency(ctx context.Context, db database.DB, n int) (Latency, error) {
	ds := make([]time.Duration, 0, n)
	for range n {
		tx, err := db.Begin(ctx)
		if err != nil {
			return Latency{}, fmt.Errorf("timing claims: %w", err)
		}
		t := time.Now()
		_, err = journal.ClaimHeads(ctx, tx, tx, 0, 100, nil) // the engine picks on its pool: the same reads
		ds = append(ds, time.Since(t))
		_ = tx.Rollback(ctx)
		if err != nil {
			return Latency{}, fmt.Errorf("timing claims: %w", err)
		}
	}
	return summarize(ds), nil
}

// checkBacklog: the queue is empty, every fresh event PROCESSED, the backlog untouched.
func (r *runner) checkBacklog(ctx context.Context, queue string, db database.DB, c Corpus, level int) (string, bool) {
	left, _, err := drain(ctx, r.o.StompAddr, queue, 1000, 0, 500*time.Millisecond)
	if err != nil {
		return "draining leftovers: " + err.Error(), false
	}
	if left != 0 {
		return fmt.Sprintf("%d messages left unacked on the queue", left), false
	}
	got, err := journal.CountRowsTagged(ctx, db, queue)
	if err != nil {
		return err.Error(), false
	}
	if got.Journal != len(c.IDs) || got.ByStatus[journal.StatusProcessed] != len(c.IDs) {
		return fmt.Sprintf("fresh events by status %v, want %d PROCESSED", got.ByStatus, len(c.IDs)), false
	}
	blocked, err := journal.CountRowsTagged(ctx, db, journal.SeedBlockedTag)
	if err != nil {
		return err.Error(), false
	}
	if blocked.ByStatus[journal.StatusReceived] != level || blocked.ByStatus[journal.StatusFailed] != r.o.BacklogHeads {
		return fmt.Sprintf("backlog by status %v, want %d RECEIVED behind %d FAILED", blocked.ByStatus, level, r.o.BacklogHeads), false
	}
	return fmt.Sprintf("ok (fresh=%d, backlog untouched)", got.Journal), true
}

// settledTemplate returns a database pre-filled with -journal-size settled entries,
// made once per run: each journal-size measurement copies it (CREATE DATABASE …
// TEMPLATE), which is much faster than filling it again. dropTemplate removes it.
func (r *runner) settledTemplate(ctx context.Context) (string, error) {
	if r.template != nil {
		return r.template.Name, nil
	}
	db, err := createDB(ctx, r.o.AdminURL, "settled")
	if err != nil {
		return "", err
	}
	pool, err := openPool(ctx, db.URL, 1)
	if err != nil {
		_ = db.drop(ctx)
		return "", err
	}
	t := time.Now()
	err = journal.SeedSettled(ctx, pool, r.o.JournalSize)
	pool.Close()
	if err != nil {
		_ = db.drop(ctx)
		return "", err
	}
	r.logf("journal-size: %d settled entries written in %.1fs", r.o.JournalSize, time.Since(t).Seconds())
	r.template = db
	return db.Name, nil
}

func (r *runner) dropTemplate(ctx context.Context) {
	if r.template == nil {
		return
	}
	if err := r.template.drop(ctx); err != nil {
		r.logf("%v", err)
	}
	r.template = nil
}

// journalSizeRow runs base (the ingest or e2e-max row) on a copy of the settled
// template, and compares its drain time with base's own measurement of the same
// repetition, on an empty journal.
func (r *runner) journalSizeRow(ctx context.Context, base string, k Knobs, c Corpus, rep int, empty *Measurement) (Measurement, error) {
	tmpl, err := r.settledTemplate(ctx)
	if err != nil {
		return Measurement{}, err
	}
	m, err := r.drain(ctx, drainSpec{row: rowJournalSize, child: base, template: tmpl,
		config: fmt.Sprintf("%s on %d settled entries; %s", base, r.o.JournalSize, k.label(base))}, k, c, rep)
	if err != nil {
		return m, err
	}
	if empty != nil && m.MsgPerSec > 0 && empty.MsgPerSec > 0 {
		m.Slowdown, m.SlowdownVs = empty.MsgPerSec/m.MsgPerSec, "on an empty journal"
		m.Note = fmt.Sprintf("drain %.2f× that %s (%.0f msg/s); %s", m.Slowdown, m.SlowdownVs, empty.MsgPerSec, m.Note)
		r.logf("rep %d: journal-size %s: %.2f× the drain time on an empty journal", rep, base, m.Slowdown)
	}
	return m, nil
}
