// Package retention deletes expired journal entries (with their state and attempt
// history) and replay runs that ended, on PostgreSQL and CockroachDB alike, and expired
// quarantine rows on PostgreSQL. On CockroachDB, row-level TTL deletes the quarantine's
// (inboxd migrate sets it up, see internal/feed); a row's own TTL cannot tell a settled
// journal entry (its status is in journal_state) nor an ended replay run from those
// still in use.
//
// Deleting a journal entry ends its deduplication: a redelivery of an event older than
// the retention is journaled, and processed, again.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/logx"
)

// The pause between two full batches (defaults.RetentionPause) bounds the rate at which
// a large backlog is deleted (under RetentionBatch per pause, 5,000 rows/s) so that it
// does not compete with ingest for the database. Rows expire at the rate events finish
// processing, far below that, so the pruner keeps up.

// Config says what to keep. A zero retention keeps everything of that table.
type Config struct {
	Journal    time.Duration // PROCESSED and REJECTED entries, by journal_state.updated_at
	Quarantine time.Duration // quarantine rows, by received_at
	// Replay: replay runs that ended (done or cancelled), by finished_at, with their
	// items and holds. inboxd passes the journal's retention: a run older than the
	// horizon replayed events that retention may already have deleted.
	Replay   time.Duration
	Interval time.Duration // between passes; defaults.RetentionInterval when zero
	Batch    int           // rows per DELETE; defaults.RetentionBatch when zero
	Pause    time.Duration // between full batches; defaults.RetentionPause when zero
	// Contraction, when set, is where a pass that finds the schema contracted by a newer
	// release reports it (logged once per instance) instead of logging it here.
	Contraction *journal.Contraction
}

// Pruner deletes expired rows, one bounded batch per statement.
type Pruner struct {
	db  database.DB
	cfg Config
	log *slog.Logger
	// passDone, when set, is called after each pass (tests wait on it).
	passDone func(Stats)
}

// Stats counts what one pass deleted.
type Stats struct {
	Journal, Quarantine int64
	Replay              int64 // replay runs and their items
}

// New returns a pruner; a nil logger discards.
func New(db database.DB, cfg Config, log *slog.Logger) *Pruner {
	cfg.Interval = defaults.Or(cfg.Interval, defaults.RetentionInterval)
	cfg.Batch = defaults.Or(cfg.Batch, defaults.RetentionBatch)
	cfg.Pause = defaults.Or(cfg.Pause, defaults.RetentionPause)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pruner{db: db, cfg: cfg, log: log}
}

// Enabled reports whether anything expires.
func (p *Pruner) Enabled() bool { return p.cfg.Journal > 0 || p.cfg.Quarantine > 0 || p.cfg.Replay > 0 }

// Run prunes every Interval until ctx ends. A failed pass is logged and retried at the
// next interval: retention is housekeeping, never a reason to stop inboxd.
func (p *Pruner) Run(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	out := logx.Outage{Log: p.log, What: "retention", Level: slog.LevelWarn} // once per outage, not per pass
	for {
		st, err := p.Pass(ctx)
		switch {
		case errors.Is(err, context.Canceled) && ctx.Err() != nil:
			return ctx.Err()
		case err != nil && p.cfg.Contraction != nil && p.cfg.Contraction.Report(err):
		case err != nil:
			out.Fail("retention pass failed; retrying at the next interval", err)
		default:
			out.Recovered("retention works again")
			if st.Journal > 0 || st.Quarantine > 0 || st.Replay > 0 {
				p.log.InfoContext(ctx, "retention deleted expired rows", "journal", st.Journal, "quarantine", st.Quarantine, "replay", st.Replay)
			}
		}
		if p.passDone != nil {
			p.passDone(st)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Pass deletes every expired row, in batches of Batch with Pause between full ones.
func (p *Pruner) Pass(ctx context.Context) (Stats, error) {
	var st Stats
	for _, job := range []struct {
		keep  time.Duration
		prune func(context.Context, database.DB, time.Duration, int) (int64, error)
		n     *int64
	}{
		{p.cfg.Journal, journal.PruneJournal, &st.Journal},
		{p.cfg.Quarantine, journal.PruneQuarantine, &st.Quarantine},
		{p.cfg.Replay, journal.PruneReplayRuns, &st.Replay},
	} {
		if job.keep <= 0 {
			continue
		}
		for {
			n, err := job.prune(ctx, p.db, job.keep, p.cfg.Batch)
			*job.n += n
			if err != nil {
				return st, fmt.Errorf("retention: %w", err)
			}
			if n < int64(p.cfg.Batch) {
				break
			}
			select {
			case <-ctx.Done():
				return st, ctx.Err()
			case <-time.After(p.cfg.Pause):
			}
		}
	}
	return st, nil
}
