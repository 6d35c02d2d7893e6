package process

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/tracing"
)

// Config tunes the engine. Zero values take the defaults.
type Config struct {
	// Concurrency bounds the event transactions running at once, across all batches.
	// Keep it at or below the pool's MaxConns. Default defaults.Concurrency().
	Concurrency int
	// The recoverability policy of every event type without one of its own
	// (Registry.SetRetryPolicy); see RetryPolicy. Defaults DefaultImmediateRetries (a
	// negative value means none), DefaultMaxAttempts, DefaultBaseBackoff and
	// DefaultMaxBackoff.
	ImmediateRetries int
	MaxAttempts      int
	BaseBackoff      time.Duration
	MaxBackoff       time.Duration
	// NoHandler is what becomes of an event whose type has no handler: NoHandlerRetry
	// (the default), NoHandlerReject or NoHandlerPark.
	NoHandler string
	// BatchSize bounds the events of one processing transaction. Default
	// defaults.ProcessBatchSize; see
	// package doc (Batches) for CockroachDB.
	BatchSize int
	// HandlerTimeout bounds one handler run; it is also the statement_timeout of the
	// processing transaction, at least defaults.MinStatementTimeout. A handler that
	// overruns it fails (the attempt counts). Default defaults.HandlerTimeout.
	HandlerTimeout time.Duration
	// KickLinger is how long the workers let Kicks gather before one of them claims
	// (see waker): fewer, larger processing transactions at a moderate rate, for that
	// much latency. Default defaults.KickLinger; negative: none.
	KickLinger time.Duration
	// TracerProvider makes the processing spans; nil means otel's global provider.
	TracerProvider trace.TracerProvider
	// Dialect is the database's (database.Detect). On CockroachDB every processing
	// transaction begins with explicit SERIALIZABLE isolation, whatever the session's
	// default (an operator's READ COMMITTED default would silently change the guarantees),
	// and with durable locks (see setTimeouts).
	Dialect database.Dialect
	// Contraction is where the workers report a schema a newer release contracted under
	// this one (journal.IsSchemaContracted), logged once per instance; nil: one of the
	// engine's own, on its logger.
	Contraction *journal.Contraction
}

func (c Config) withDefaults() Config {
	c.Concurrency = defaults.Or(c.Concurrency, defaults.Concurrency())
	c.BatchSize = defaults.Or(c.BatchSize, defaults.ProcessBatchSize)
	c.HandlerTimeout = defaults.Or(c.HandlerTimeout, defaults.HandlerTimeout)
	if c.NoHandler == "" {
		c.NoHandler = defaults.NoHandler
	}
	if c.KickLinger == 0 { // negative: none
		c.KickLinger = defaults.KickLinger
	}
	p := c.retryPolicy().Or(DefaultRetryPolicy())
	c.ImmediateRetries, c.MaxAttempts, c.BaseBackoff, c.MaxBackoff = p.ImmediateRetries, p.MaxAttempts, p.BaseBackoff, p.MaxBackoff
	return c
}

func (c Config) retryPolicy() RetryPolicy {
	return RetryPolicy{ImmediateRetries: c.ImmediateRetries, MaxAttempts: c.MaxAttempts, BaseBackoff: c.BaseBackoff, MaxBackoff: c.MaxBackoff}
}

// Backoff returns the delay before the retry that follows failed attempt number
// attempt (1-based), jitter included, under the engine's policy.
func (c Config) Backoff(attempt int) time.Duration {
	return c.withDefaults().retryPolicy().Backoff(attempt)
}

// Outcome is what one processing transaction did with an event.
type Outcome string

const (
	OutcomeProcessed Outcome = "processed" // handler succeeded, status PROCESSED
	OutcomeRejected  Outcome = "rejected"  // business rejection, status REJECTED
	OutcomeFailed    Outcome = "failed"    // handler failed, status FAILED, retried later
	OutcomeDead      Outcome = "dead"      // handler failed for the last time, status DEAD
	OutcomeNoop      Outcome = "noop"      // no longer pending (duplicate delivery) or unknown id
	OutcomeDeferred  Outcome = "deferred"  // an earlier event of the aggregate is pending
	OutcomeNotDue    Outcome = "not_due"   // FAILED and its next attempt is in the future
)

// Status is the journal status an outcome records: PROCESSED, REJECTED, DEAD, or
// FAILED. The outcomes that record nothing (noop, deferred, not due) are never asked;
// they fall under FAILED, the status that changes least.
func (o Outcome) Status() journal.Status {
	switch o {
	case OutcomeProcessed:
		return journal.StatusProcessed
	case OutcomeRejected:
		return journal.StatusRejected
	case OutcomeDead:
		return journal.StatusDead
	default:
		return journal.StatusFailed
	}
}

// completes reports whether the event left RECEIVED/FAILED, unblocking its successors.
func (o Outcome) completes() bool {
	return o == OutcomeProcessed || o == OutcomeRejected || o == OutcomeDead
}

// Item is an event to process. AggregateID and SequenceNo, when known, let a batch
// run each aggregate's events in order without waiting for one another; when unknown
// the item is its own group and the database-side ordering check still applies.
type Item struct {
	ID          string
	AggregateID string
	SequenceNo  int64
}

// Engine processes journal entries. It is safe for concurrent use.
type Engine struct {
	// db is a pool, not a database.DB: the engine runs Concurrency transactions at
	// once, each begun with the options of txOptions.
	db  *pgxpool.Pool
	reg *Registry
	cfg Config
	m   *metrics.Metrics
	log *slog.Logger
	sem chan struct{}
	// tracer makes one span per event processed (run.go).
	tracer trace.Tracer

	wake *waker // Kick: work was journaled

	// isolation caches readCommitted's answer (isoReadCommitted, isoOther).
	isolation atomic.Int32
}

// New builds an engine. m and log may be nil.
func New(db *pgxpool.Pool, reg *Registry, cfg Config, m *metrics.Metrics, log *slog.Logger) *Engine {
	cfg = cfg.withDefaults()
	if m == nil {
		m = metrics.New()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = NewRegistry()
	}
	if cfg.Contraction == nil {
		cfg.Contraction = &journal.Contraction{Log: log}
	}
	return &Engine{db: db, reg: reg, cfg: cfg, m: m, log: log, sem: make(chan struct{}, cfg.Concurrency),
		tracer: tracing.Tracer(cfg.TracerProvider),
		wake:   newWaker(cfg.KickLinger)}
}

// Registry returns the engine's handler registry.
func (e *Engine) Registry() *Registry { return e.reg }

// Kick tells the engine's workers (Sweeper.Run) that new entries were journaled, so
// that they process them soon (Config.KickLinger) instead of at their next interval:
// the push that replaces a changefeed on PostgreSQL. It never blocks.
func (e *Engine) Kick() { e.wake.kick() }

// waker lets workers wait for new work. A kick wakes one waiting worker (kicks
// coalesce while none is waiting); a worker that finds a full batch kicks the next, so
// the number of busy workers follows the backlog instead of every ingest commit waking
// them all for a handful of events.
//
// A kick from outside (Engine.Kick: an ingest commit, a NOTIFY) wakes a worker only
// linger after it, and the kicks of that time join it: at a moderate rate each ingest
// commit carries a few events, and a processing transaction per commit cost several
// times the database and CPU per event of a saturated run (issue 29). A worker handing
// on to the next (kickNow) does not wait.
type waker struct {
	ch     chan struct{}
	linger time.Duration
	mu     sync.Mutex
	timer  *time.Timer // pending: a kick waits for linger to end
}

func newWaker(linger time.Duration) *waker {
	return &waker{ch: make(chan struct{}, 1), linger: linger}
}

func (w *waker) C() <-chan struct{} { return w.ch }

// kickNow wakes a waiting worker now.
func (w *waker) kickNow() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// kick wakes a waiting worker once linger has passed since the first kick not yet
// delivered.
func (w *waker) kick() {
	if w.linger <= 0 {
		w.kickNow()
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		return // joins the kick under way
	}
	w.timer = time.AfterFunc(w.linger, func() {
		w.mu.Lock()
		w.timer = nil
		w.mu.Unlock()
		w.kickNow()
	})
}
