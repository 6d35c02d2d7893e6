package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
	// BatchSize bounds the entries under way at once (and so claimed per pass). Default 100.
	BatchSize int
	// StopTimeout bounds how long Run lets work under way finish once its context ends;
	// then that work is cancelled, and a handler that ignores cancellation is abandoned
	// within a second (its transaction rolled back). Default 10s.
	StopTimeout time.Duration
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
	if c.StopTimeout <= 0 {
		c.StopTimeout = 10 * time.Second
	}
	return c
}

// Sweeper retries due FAILED entries and processes RECEIVED entries the feed left
// behind, through the engine.
//
// It claims nothing ahead of time: each entry is claimed by the row lock of the
// transaction that processes it (journal.TryLockPending), so an entry held by another
// worker or instance is skipped, and the entries of an instance that dies or loses its
// connection are free again as soon as the database ends its transactions (at once on
// kill -9: the kernel closes the sockets), with no lease to wait out. Nothing is
// leased, so a graceful stop or a failed pass has nothing to give back either.
type Sweeper struct {
	e   *Engine
	cfg SweeperConfig

	mu       sync.Mutex
	inflight map[string]bool // entry ids under way in this sweeper
}

// NewSweeper builds a sweeper on an engine.
func NewSweeper(e *Engine, cfg SweeperConfig) *Sweeper {
	return &Sweeper{e: e, cfg: cfg.withDefaults(), inflight: map[string]bool{}}
}

// Pass counts what one sweep did.
type Pass struct {
	Retried  int // FAILED entries claimed
	Stranded int // RECEIVED entries claimed
	Outcomes map[Outcome]int
}

// Run sweeps until ctx ends. A pass does not wait for the entries it started: each runs
// on its own (the engine bounds how many run at once), and the next pass starts when
// Interval has passed, or at once when a full pass's entry finishes, so a slow or hung
// handler holds only its own entry. Errors are logged once per outage, with a count
// when it ends. Once ctx ends, Run starts nothing new, gives work under way
// StopTimeout to finish, then cancels it, and returns nil.
func (s *Sweeper) Run(ctx context.Context) error {
	// Work is not cancelled with ctx: it gets StopTimeout to finish first.
	wctx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	var (
		wg    sync.WaitGroup
		freed = make(chan struct{}, 1)
		out   = outage{log: s.e.log, what: "sweeper pass"}
	)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for ctx.Err() == nil {
		full, err := s.dispatch(ctx, wctx, &wg, freed, &out)
		if err != nil && ctx.Err() == nil {
			out.fail(err)
		} else if err == nil {
			out.ok()
		}
		if !full {
			// Drain a stale wake-up: only a full pass is followed at once.
			select {
			case <-freed:
			default:
			}
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-freed:
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

// dispatch runs one pass: it finds due heads and starts each in its own goroutine.
// full reports that the pass was limited by BatchSize (more may be due).
func (s *Sweeper) dispatch(ctx, wctx context.Context, wg *sync.WaitGroup, freed chan struct{}, out *outage) (full bool, err error) {
	s.mu.Lock()
	busy := len(s.inflight)
	s.mu.Unlock()
	free := s.cfg.BatchSize - busy
	if free <= 0 {
		return true, nil
	}
	s.e.m.SweeperRuns.Inc()
	// Entries under way may come back; ask for enough to fill every free slot anyway.
	due, err := journal.DueHeads(ctx, s.e.db, s.cfg.Grace, free+busy)
	if err != nil {
		return false, fmt.Errorf("sweeping: %w", err)
	}
	started := 0
	for _, d := range due {
		if started == free {
			break
		}
		s.mu.Lock()
		if s.inflight[d.ID] {
			s.mu.Unlock()
			continue
		}
		s.inflight[d.ID] = true
		s.mu.Unlock()
		started++
		kind := "stranded"
		if d.Status == journal.StatusFailed {
			kind = "retry"
		}
		s.e.m.SweeperPicked.WithLabelValues(kind).Inc()
		wg.Add(1)
		go func(item Item) {
			defer wg.Done()
			_, err := s.e.processItems(wctx, []Item{item}, true)
			if err != nil && wctx.Err() == nil {
				out.fail(err)
			}
			s.mu.Lock()
			delete(s.inflight, item.ID)
			s.mu.Unlock()
			select {
			case freed <- struct{}{}:
			default:
			}
		}(Item{ID: d.ID, AggregateID: d.AggregateID, SequenceNo: d.SequenceNo})
	}
	if dead, err := journal.CountByStatus(ctx, s.e.db, journal.StatusDead); err == nil {
		s.e.m.Dead.Set(float64(dead))
	}
	return started == free, nil
}

// Sweep runs one pass and waits for it: find due heads, process them, refresh the DEAD
// gauge.
func (s *Sweeper) Sweep(ctx context.Context) (Pass, error) {
	s.e.m.SweeperRuns.Inc()
	p := Pass{Outcomes: map[Outcome]int{}}
	due, err := journal.DueHeads(ctx, s.e.db, s.cfg.Grace, s.cfg.BatchSize)
	if err != nil {
		return p, fmt.Errorf("sweeping: %w", err)
	}
	items := make([]Item, len(due))
	for i, c := range due {
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

// outage logs a repeated failure once when it starts and once, with a count, when it
// ends, instead of on every try.
type outage struct {
	log   *slog.Logger
	what  string
	mu    sync.Mutex
	n     int
	since time.Time
}

func (o *outage) fail(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == 0 {
		o.since = time.Now()
		o.log.Error(o.what+" failed; retrying quietly until it works again", "error", err)
	}
	o.n++
}

func (o *outage) ok() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n > 0 {
		o.log.Info(o.what+" works again", "failures", o.n, "after", time.Since(o.since).Round(time.Millisecond))
		o.n = 0
	}
}
