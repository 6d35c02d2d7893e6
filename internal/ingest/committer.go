package ingest

import (
	"context"
	"sync"
	"time"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/lifecycle"
	"github.com/inboxd/inboxd/internal/message"
)

// committer writes the batcher's batches to the journal, each with one Ingest call, up
// to CommitsInFlight at once, and queues them for the acker (admit, in order.go, says
// which are written).
type committer struct {
	*session
	running []*flight // writes that may still be under way, oldest first
	// writeFailed is closed by the first write that fails, before its written: unlike
	// failed, which the acker closes only once it has drained every earlier batch.
	writeFailed chan struct{}
	failOnce    sync.Once
}

func (c *committer) run(ctx context.Context) {
	defer close(c.flights) // the acker then settles what was dispatched, and ends
	for b := range c.batches {
		f, write := c.admit(b)
		switch {
		case f == nil: // not dispatched
		case !write:
			if h := c.hooks.skipped; h != nil {
				h(c.dest, b)
			}
			c.wrote(f, errSkipped)
		default:
			go func() { c.wrote(f, c.write(ctx, b)) }()
		}
	}
}

// write stores the batch with one Ingest call. It runs detached from ctx, so that a
// shutdown lets the batch in flight finish.
func (c *committer) write(ctx context.Context, b *batch) error {
	if h := c.hooks.beforeIngest; h != nil {
		h(ctx, c.dest, len(b.msgs))
	}
	// Detached from ctx: a shutdown lets the batch in flight finish (commit then ack),
	// within the shutdown budget: a database that does not answer is abandoned when the
	// budget runs out (lifecycle.Detach), and the broker redelivers the batch.
	dctx, detached := lifecycle.Detach(ctx)
	defer detached()
	cctx, cancel := context.WithTimeout(dctx, c.cfg.CommitTimeout)
	cctx, span := c.batchSpan(cctx, c.dest, b)
	start := time.Now()
	res, err := journal.Ingest(cctx, c.db, b.jb)
	cancel()
	endBatchSpan(span, res, err)
	if err != nil {
		return &CommitError{Err: err}
	}
	if res.Inserted > 0 && c.cfg.OnCommit != nil {
		c.cfg.OnCommit(res.Inserted)
	}
	c.observe(b, res, time.Since(start))
	if h := c.hooks.afterIngest; h != nil {
		h(ctx, c.dest, res)
	}
	return nil
}

// observe counts and logs a committed batch.
func (c *committer) observe(b *batch, res journal.Result, took time.Duration) {
	if m := c.cfg.Metrics; m != nil {
		m.CommitSeconds.Observe(took.Seconds())
		m.BatchSize.Observe(float64(len(b.msgs)))
		m.Committed.WithLabelValues(c.dest).Add(float64(res.Inserted))
		m.Duplicates.WithLabelValues(c.dest).Add(float64(res.Duplicates))
		for reason, n := range b.quarantined {
			m.Quarantined.WithLabelValues(string(reason)).Add(float64(n))
		}
		if res.Conflicts > 0 {
			m.Quarantined.WithLabelValues(string(message.ReasonIDConflict)).Add(float64(res.Conflicts))
		}
		if res.Refused > 0 {
			m.Quarantined.WithLabelValues(string(message.ReasonDBRefused)).Add(float64(res.Refused))
		}
	}
	log := c.log.With("batch_id", b.id)
	log.Debug("batch committed", "messages", len(b.msgs), "inserted", res.Inserted, "duplicates", res.Duplicates,
		"conflicts", res.Conflicts, "quarantined", res.Quarantined, "commit_ms", took.Milliseconds())
	// One line per batch with counts, not one per message (a flood of bad messages
	// must not become a flood of log lines), and at most one a minute per destination.
	// Reasons, ids and bodies are in the quarantine table.
	if n := len(b.jb.Bad) + res.Conflicts + res.Refused; n > 0 {
		if ok, dropped := c.warn.Allow(c.dest); ok {
			byReason := make(map[string]int, len(b.quarantined)+2)
			for reason, k := range b.quarantined {
				byReason[string(reason)] += k
			}
			if res.Conflicts > 0 {
				byReason[string(message.ReasonIDConflict)] += res.Conflicts
			}
			if res.Refused > 0 {
				byReason[string(message.ReasonDBRefused)] += res.Refused
			}
			log.Warn("messages quarantined", "messages", len(b.msgs), "quarantined", n, "by_reason", byReason,
				"batches_not_logged", dropped)
		}
	}
}
