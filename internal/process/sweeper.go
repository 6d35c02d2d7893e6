package process

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/journal"
)

// SweeperConfig tunes the sweeper. Zero values take the defaults, except Grace, where
// zero is meaningful (see Grace).
type SweeperConfig struct {
	// Interval between passes. Default 1s.
	Interval time.Duration
	// Grace is how old a RECEIVED entry must be before the sweeper takes it from the
	// changefeed. With a feed, a few times the feed's flush frequency plus its resolved
	// interval (e.g. 30s); without one (PostgreSQL), 0. Negative means the default, 30s.
	Grace time.Duration
	// BatchSize bounds the entries claimed per pass. Default 100.
	BatchSize int
	// Lease is how long a claimed entry stays invisible to other sweepers; it must
	// exceed the time to process a batch. Default 1m.
	Lease time.Duration
}

func (c SweeperConfig) withDefaults() SweeperConfig {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.Grace < 0 {
		c.Grace = 30 * time.Second
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 100
	}
	if c.Lease <= 0 {
		c.Lease = time.Minute
	}
	return c
}

// Sweeper retries due FAILED entries and processes RECEIVED entries the feed left
// behind, through the engine.
type Sweeper struct {
	e   *Engine
	cfg SweeperConfig
}

// NewSweeper builds a sweeper on an engine.
func NewSweeper(e *Engine, cfg SweeperConfig) *Sweeper {
	return &Sweeper{e: e, cfg: cfg.withDefaults()}
}

// Pass counts what one sweep did.
type Pass struct {
	Retried  int // FAILED entries claimed
	Stranded int // RECEIVED entries claimed
	Outcomes map[Outcome]int
}

// Run sweeps every Interval until ctx ends, then returns nil. A pass that claims a
// full batch is followed at once by another. Errors are logged and the next pass
// tries again. A pass under way when ctx ends may finish within one more lease:
// cancelling it at once would leave its claimed entries leased, and so idle, for a lease.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		for ctx.Err() == nil {
			// Not cancelled with ctx: once ctx ends the pass gets one lease more to finish.
			pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			stop := context.AfterFunc(ctx, func() { time.AfterFunc(s.cfg.Lease, cancel) })
			p, err := s.Sweep(pctx)
			stop()
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.e.log.Error("sweeper pass failed", "error", err)
				break
			}
			if p.Retried+p.Stranded < s.cfg.BatchSize {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep runs one pass: claim, process, refresh the DEAD gauge.
func (s *Sweeper) Sweep(ctx context.Context) (Pass, error) {
	s.e.m.SweeperRuns.Inc()
	p := Pass{Outcomes: map[Outcome]int{}}
	claimed, err := journal.ClaimDue(ctx, s.e.db, s.cfg.Grace, s.cfg.Lease, s.cfg.BatchSize)
	if err != nil {
		return p, err
	}
	items := make([]Item, len(claimed))
	for i, c := range claimed {
		items[i] = Item{ID: c.ID, AggregateID: c.AggregateID, SequenceNo: c.SequenceNo}
		if c.Status == journal.StatusFailed {
			p.Retried++
		} else {
			p.Stranded++
		}
	}
	s.e.m.SweeperPicked.WithLabelValues("retry").Add(float64(p.Retried))
	s.e.m.SweeperPicked.WithLabelValues("stranded").Add(float64(p.Stranded))
	outcomes, perr := s.e.processItems(ctx, items, true)
	for _, o := range outcomes {
		if o != "" {
			p.Outcomes[o]++
		}
	}
	dead, derr := journal.CountByStatus(ctx, s.e.db, journal.StatusDead)
	if derr == nil {
		s.e.m.Dead.Set(float64(dead))
	}
	if err := errors.Join(perr, derr); err != nil {
		return p, fmt.Errorf("sweeping: %w", err)
	}
	return p, nil
}
