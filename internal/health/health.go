// Package health finds a stuck pipeline from the outside, for /readyz and the
// inboxd_stalled metric.
package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/metrics"
)

// Monitor finds a stuck pipeline from the outside: it needs no hooks in the engine.
// Every second it reads this instance's processing outcomes (from the metrics) and
// the journal's oldest waiting event (from the database), and, when a changefeed
// delivers, how far its resolved timestamp trails. /readyz reports what it finds, and
// so does the inboxd_stalled metric.
type Monitor struct {
	db         database.DB
	m          *metrics.Metrics
	ingest     func(stallAfter time.Duration) error
	stallAfter time.Duration
	grace      time.Duration // a RECEIVED event's wait for the feed, before the sweeper takes it
	feed       bool          // a changefeed delivers (CockroachDB): its watermark must advance
	contracted *journal.Contraction
	log        *slog.Logger

	mu           sync.Mutex
	errs         map[string]error
	outcomes     float64   // completed outcomes seen so far
	lastProgress time.Time // when they last grew
}

// Config is what a Monitor watches, and how patiently.
type Config struct {
	DB      database.DB
	Metrics *metrics.Metrics
	// Ingest reports whether intake is stuck, given how long counts as stuck.
	Ingest func(stallAfter time.Duration) error
	// StallAfter: a component without progress this long while work waits is stuck.
	StallAfter time.Duration
	// Grace is a RECEIVED event's wait for the feed, before the sweeper takes it.
	Grace time.Duration
	// Feed: a changefeed delivers (CockroachDB), so its watermark must advance.
	Feed bool
	// Contraction, once reported, is why processing is not ready: a newer release
	// contracted the schema under this one. Logged where it was reported, not here.
	Contraction *journal.Contraction
	Log         *slog.Logger
}

// New returns a monitor; Run it.
func New(c Config) *Monitor {
	return &Monitor{db: c.DB, m: c.Metrics, ingest: c.Ingest, stallAfter: c.StallAfter, grace: c.Grace, feed: c.Feed,
		contracted: c.Contraction, log: c.Log, errs: map[string]error{}, lastProgress: time.Now()}
}

// Run checks every second until ctx ends.
func (mo *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		mo.check(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// check is one look at every component.
func (mo *Monitor) check(ctx context.Context) {
	now := time.Now()
	if n := completedOutcomes(mo.m.Processed); n != mo.outcomes {
		mo.outcomes, mo.lastProgress = n, now
		mo.m.MarkProcessed()
	}
	found := map[string]error{"ingest": mo.ingest(mo.stallAfter)}

	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// Work the sweeper should have taken stallAfter ago, and nothing processed here since.
	waited, err := journal.OldestWaiting(qctx, mo.db, mo.grace+mo.stallAfter)
	switch {
	case mo.contracted.Err() != nil:
		found["processing"] = mo.contracted.Err()
	case err != nil:
		found["processing"] = err
	case waited > 0 && now.Sub(mo.lastProgress) > mo.stallAfter:
		found["processing"] = fmt.Errorf("an event has waited %s, and this instance has processed nothing for %s",
			waited.Round(time.Second), now.Sub(mo.lastProgress).Round(time.Second))
	}
	if mo.feed {
		wms, err := journal.FeedWatermarks(qctx, mo.db)
		if err != nil {
			found["feed"] = err
		}
		var late []error
		for _, w := range wms {
			if w.Lag > mo.stallAfter+mo.grace {
				late = append(late, fmt.Errorf("changefeed %s resolved timestamp is %s behind", w.Sink, w.Lag.Round(time.Second)))
			}
		}
		if len(late) > 0 {
			found["feed"] = errors.Join(late...)
		}
	}
	if ctx.Err() != nil {
		return // shutting down: a cancelled query says nothing about health
	}

	mo.mu.Lock()
	defer mo.mu.Unlock()
	for _, name := range []string{"ingest", "processing", "feed"} {
		was, is := mo.errs[name], found[name]
		switch {
		case was == nil && is != nil && journal.IsSchemaContracted(is):
			// Logged once, at ERROR, where it was found (journal.Contraction).
		case was == nil && is != nil:
			mo.log.Warn("stuck: no progress while work waits, or failing", "component", name, "err", is)
		case was != nil && is == nil:
			mo.log.Info("progressing again", "component", name)
		}
		v := 0.0
		if is != nil {
			v = 1
		}
		mo.m.Stalled.WithLabelValues(name).Set(v)
	}
	mo.errs = found
}

// ReadyCheck is the /readyz check of one component: "ingest", "processing" or "feed".
func (mo *Monitor) ReadyCheck(name string) func(context.Context) error {
	return func(context.Context) error {
		mo.mu.Lock()
		defer mo.mu.Unlock()
		return mo.errs[name]
	}
}

// completedOutcomes sums the engine's outcomes that move an event on: processed,
// rejected and dead (not failed, noop or deferred).
func completedOutcomes(c *prometheus.CounterVec) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "outcome" && (l.GetValue() == "processed" || l.GetValue() == "rejected" || l.GetValue() == "dead") {
				sum += d.GetCounter().GetValue()
			}
		}
	}
	return sum
}
