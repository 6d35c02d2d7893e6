package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/lifecycle"
	"github.com/inboxd/inboxd/internal/logx"
)

// SweeperConfig tunes the sweeper. Zero values take the defaults, except Grace, where
// zero is meaningful (see Grace).
type SweeperConfig struct {
	// Interval between passes. Default defaults.SweepInterval.
	Interval time.Duration
	// Grace is how old a RECEIVED entry must be before the sweeper takes it from the
	// changefeed. With a feed, a few times the feed's flush frequency plus its resolved
	// interval (e.g. 30s); without one (PostgreSQL), 0. Negative means defaults.SweepGraceCockroachDB.
	Grace time.Duration
	// BatchSize bounds the entries of one batch (one transaction). Default
	// defaults.ProcessBatchSize.
	BatchSize int
	// StopTimeout bounds how long Run lets work under way finish once its context ends;
	// then that work is cancelled, and a handler that ignores cancellation is abandoned
	// within a second (its transaction rolled back). Default half of
	// defaults.ShutdownTimeout.
	StopTimeout time.Duration
}

func (c SweeperConfig) withDefaults() SweeperConfig {
	c.Interval = defaults.Or(c.Interval, defaults.SweepInterval)
	if c.Grace < 0 {
		c.Grace = defaults.SweepGraceCockroachDB
	}
	c.BatchSize = defaults.Or(c.BatchSize, defaults.ProcessBatchSize)
	// Half the shutdown: intake before it and the API after it need their share.
	c.StopTimeout = defaults.Or(c.StopTimeout, defaults.ShutdownTimeout/2)
	return c
}

// Sweeper runs the engine's workers: each processes batches of due aggregate heads
// (FAILED entries whose retry is due, RECEIVED entries older than Grace) for as long
// as it finds full batches, then waits for Interval or for Engine.Kick.
//
// It claims nothing ahead of time: each batch claims its entries with the row locks of
// the transaction that processes them (journal.ClaimHeads, SKIP LOCKED), so an entry
// held by another worker or instance is skipped, and the entries of an instance that
// dies or loses its connection are free again as soon as the database ends its
// transactions (at once on kill -9: the kernel closes the sockets), with no lease to
// wait out. Nothing is leased, so a graceful stop or a failed pass has nothing to give
// back either.
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

// Run runs Concurrency workers until ctx ends. Workers do not wait for one another, so
// a slow or hung handler holds only its own worker (and its batch, until
// HandlerTimeout). Errors are logged once per outage, with a count when it ends. Once
// ctx ends, Run starts nothing new, gives work under way StopTimeout to finish, then
// cancels it, and returns nil.
func (s *Sweeper) Run(ctx context.Context) error {
	// Work is not cancelled with ctx: it gets StopTimeout to finish first (and never
	// more than the shutdown budget, lifecycle.Detach).
	wctx, cancelWork := lifecycle.Detach(ctx)
	defer cancelWork()
	var (
		wg  sync.WaitGroup
		out = logx.Outage{Log: s.e.log, What: "processing", Level: slog.LevelWarn}
	)
	for range s.e.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.work(ctx, wctx, &out)
		}()
	}
	t := time.NewTicker(max(s.cfg.Interval, time.Second))
	defer t.Stop()
	repairOut := logx.Outage{Log: s.e.log, What: "head repair", Level: slog.LevelWarn}
	for ctx.Err() == nil {
		// With the schema contracted these read what is gone: the workers report it.
		if s.e.cfg.Contraction.Err() == nil {
			if dead, err := journal.CountByStatus(ctx, s.e.db, journal.StatusDead); err == nil {
				s.e.m.Dead.Set(float64(dead))
			}
			_ = s.refreshParked(ctx)
			s.repairHeads(ctx, &repairOut)
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	stop := time.NewTimer(s.cfg.StopTimeout)
	defer stop.Stop()
	select {
	case <-done:
		return nil
	case <-stop.C:
	}
	cancelWork()
	// Cancelled work returns within abandonGrace (handlers that ignore it are abandoned)
	// plus a rollback; do not wait for more than that.
	select {
	case <-done:
	case <-time.After(abandonGrace + 2*time.Second):
		s.e.log.Warn("sweeper stopped with processing still under way; its transactions will not commit")
	}
	return nil
}

// work is one worker: batch after batch while batches come back full, then a wait.
func (s *Sweeper) work(ctx, wctx context.Context, out *logx.Outage) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	contracted := backoff.Waiter{Policy: journal.ContractedBackoff}
	for ctx.Err() == nil {
		s.e.m.SweeperRuns.Inc()
		res, _, err := s.e.processDue(wctx, s.cfg.Grace, s.cfg.BatchSize, nil)
		heads := res.claimed
		s.count(heads)
		if err == nil {
			err = s.e.chain(wctx, completed(res), res.outs)
		}
		switch {
		case err != nil && journal.IsLicenseThrottled(err):
			// Not the tick or a kick: each try is one more open transaction on a node
			// that refuses because it counts them.
			out.Fail("processing refused by CockroachDB's license throttle (XXC02): more than 5 open transactions "+
				"on an unlicensed multi-node cluster; trying again every "+journal.ThrottledWait.String()+
				" (install a license key, or run a single node)", err)
			select {
			case <-ctx.Done():
			case <-time.After(journal.ThrottledWait):
			}
			continue
		case err != nil && s.e.cfg.Contraction.Report(err):
			// A newer release contracted the schema: the batch rolled back (no handler
			// commit), and nothing works again before this instance is replaced.
			// Reported once for the instance; tried seldom, neither at the tick nor on
			// kicks (every ingest commit kicks).
			if contracted.Wait(ctx) != nil {
				return
			}
			continue
		case err != nil:
			if ctx.Err() == nil {
				out.Fail("processing failed; retrying quietly until it works again", err)
			}
		default:
			contracted.Reset()
			out.Recovered("processing works again")
			if len(heads) == s.cfg.BatchSize {
				s.e.wake.kickNow() // more is waiting: another worker may join
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-s.e.wake.C():
		}
	}
}

func (s *Sweeper) count(heads []journal.Head) (p Pass) {
	for _, h := range heads {
		if h.Status == journal.StatusFailed {
			p.Retried++
		} else {
			p.Stranded++
		}
	}
	s.e.m.SweeperPicked.WithLabelValues("retry").Add(float64(p.Retried))
	s.e.m.SweeperPicked.WithLabelValues("stranded").Add(float64(p.Stranded))
	return p
}

// Sweep runs one batch and refreshes the DEAD gauge.
func (s *Sweeper) Sweep(ctx context.Context) (Pass, error) {
	s.e.m.SweeperRuns.Inc()
	res, _, err := s.e.processDue(ctx, s.cfg.Grace, s.cfg.BatchSize, nil)
	outs := res.outs
	p := s.count(res.claimed)
	if err == nil {
		err = s.e.chain(ctx, completed(res), outs)
	}
	p.Outcomes = map[Outcome]int{}
	for _, o := range outs {
		p.Outcomes[o]++
	}
	dead, derr := journal.CountByStatus(ctx, s.e.db, journal.StatusDead)
	if derr == nil {
		s.e.m.Dead.Set(float64(dead))
	}
	if err := errors.Join(err, derr, s.refreshParked(ctx)); err != nil {
		return p, fmt.Errorf("sweeping: %w", err)
	}
	return p, nil
}

// refreshParked sets the parking gauges (inboxd_parked_aggregates,
// inboxd_parked_waiting_events). Parking is by design, so it never makes inboxd unready.
func (s *Sweeper) refreshParked(ctx context.Context) error {
	aggs, waiting, err := journal.Parked(ctx, s.e.db)
	if err != nil {
		return err
	}
	s.e.m.ParkedAggregates.Set(float64(aggs))
	s.e.m.ParkedWaiting.Set(float64(waiting))
	return nil
}

// repairHeads recomputes stale aggregate heads at the front of the due ones (see
// journal.RepairStaleHeads): a safety net, logged when it finds any.
func (s *Sweeper) repairHeads(ctx context.Context, out *logx.Outage) {
	n, err := journal.RepairStaleHeads(ctx, s.e.cfg.Dialect.TxPool(s.e.db), 4*s.cfg.BatchSize)
	switch {
	case err != nil && s.e.cfg.Contraction.Report(err):
	case err != nil && ctx.Err() == nil:
		out.Fail("repairing aggregate heads failed; trying again at the next tick", err)
	case err == nil:
		out.Recovered("repairing aggregate heads works again")
		if n > 0 {
			s.e.log.Warn("repaired stale aggregate heads", "aggregates", n)
		}
	}
}
