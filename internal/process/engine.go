package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	// BatchSize bounds the events of one processing transaction. Default
	// defaults.ProcessBatchSize; see
	// package doc (Batches) for CockroachDB.
	BatchSize int
	// HandlerTimeout bounds one handler run; it is also the statement_timeout of the
	// processing transaction. A handler that overruns it fails (the attempt counts).
	// Default defaults.HandlerTimeout.
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
}

func (c Config) withDefaults() Config {
	c.Concurrency = defaults.Or(c.Concurrency, defaults.Concurrency())
	c.BatchSize = defaults.Or(c.BatchSize, defaults.ProcessBatchSize)
	c.HandlerTimeout = defaults.Or(c.HandlerTimeout, defaults.HandlerTimeout)
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
	// tracer makes one span per event processed (trace.go).
	tracer trace.Tracer

	wake *waker // Kick: work was journaled
}

// maxChain bounds how many successors one delivery processes inline; anything left
// is found by later deliveries or by the sweeper.
const maxChain = 1000

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
	return &Engine{db: db, reg: reg, cfg: cfg, m: m, log: log, sem: make(chan struct{}, cfg.Concurrency),
		tracer: tracing.Tracer(cfg.TracerProvider),
		wake:   newWaker(cfg.KickLinger)}
}

// Registry returns the engine's handler registry.
func (e *Engine) Registry() *Registry { return e.reg }

// policy is the recoverability policy of an event type: its own fields, the engine's
// for the rest.
func (e *Engine) policy(eventType string) RetryPolicy {
	p, _ := e.reg.retryPolicy(eventType)
	return p.Or(e.cfg.retryPolicy())
}

// outcome maps a handler's result to the event's outcome.
func (e *Engine) outcome(ev Event, herr error) Outcome {
	switch {
	case herr == nil:
		return OutcomeProcessed
	case errors.Is(herr, ErrRejected):
		return OutcomeRejected
	case ev.Attempt >= e.policy(ev.Type).MaxAttempts:
		return OutcomeDead
	default:
		return OutcomeFailed
	}
}

// recordTimeout records the failed attempt of a handler that overran its deadline, in
// a transaction of its own (the handler's was abandoned).
func (e *Engine) recordTimeout(ctx context.Context, ev Event, herr error) (Outcome, error) {
	out, err := e.recordAlone(ctx, ev, e.outcome(ev, herr), herr)
	if err != nil {
		return "", fmt.Errorf("recording the timeout: %w", err)
	}
	return out, nil
}

// recordAlone records the outcome of one attempt (not PROCESSED: its effects were in a
// transaction that is gone) in a transaction of its own. When the database refuses the
// outcome for a deterministic reason, the attempt is recorded again with a fixed
// message instead of the handler's text, so that it is recorded at all: otherwise the
// event would stay pending with 0 attempts and its batch would re-run forever. The
// status stays (a REJECTED or DEAD event does not turn into a retry loop). The attempts
// check makes it a no-op when the entry moved on meanwhile.
func (e *Engine) recordAlone(ctx context.Context, ev Event, out Outcome, herr error) (Outcome, error) {
	rec := journal.Outcome{ID: ev.ID, Status: out.Status(), Error: herr.Error(), Runs: 1}
	if to := (*timeoutError)(nil); errors.As(herr, &to) {
		rec.StartedAt, rec.Took = time.Now().Add(-to.after), to.after
	}
	if out == OutcomeFailed {
		rec.Backoff = e.policy(ev.Type).Backoff(ev.Attempt)
	}
	got, err := e.recordInOwnTx(ctx, ev, out, rec)
	if err == nil || journal.IsUnavailable(err) || ctx.Err() != nil {
		return got, err
	}
	e.log.Error("the database refused an event's outcome; recording it with a fixed message instead",
		"id", ev.ID, "type", e.reg.MetricLabel(ev.Type), "attempt", ev.Attempt, "error", err, "handler_error", herr)
	rec.Error = unstorableMessage(err)
	return e.recordInOwnTx(ctx, ev, out, rec)
}

func (e *Engine) recordInOwnTx(ctx context.Context, ev Event, out Outcome, rec journal.Outcome) (Outcome, error) {
	got := OutcomeNoop
	err := executeTx(ctx, e.db, e.txOptions(), func(tx pgx.Tx) error {
		got = OutcomeNoop
		if err := e.setTimeouts(ctx, tx); err != nil {
			return err
		}
		p, found, err := journal.LockPending(ctx, tx, ev.ID)
		if err != nil || !found || p.Attempts != ev.Attempt-1 {
			return err
		}
		got = out
		if err := journal.RecordOutcomes(ctx, tx, []journal.Outcome{rec}); err != nil {
			return err
		}
		_, err = e.settleHeads(ctx, tx, []journal.Head{p}, []journal.Outcome{rec})
		return err
	})
	return got, err
}

// unstorableMessage is what last_error says when the handler's text was refused: fixed
// text and the SQLSTATE, nothing that came from the handler.
func unstorableMessage(err error) string {
	code := "unknown"
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 && strings.Trim(pgErr.Code, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ") == "" {
		code = pgErr.Code
	}
	return "inboxd: the outcome of this attempt could not be stored (SQLSTATE " + code + "); the handler's error is in inboxd's log"
}

// txAborted reports whether tx's own statements failed: the server said the
// transaction block is failed ('E' in ReadyForQuery), which on CockroachDB is also the
// state a retry error leaves a transaction in (pkg/sql/conn_executor.go, stateAborted).
// A 40001 a handler returns while its transaction is fine came from somewhere else
// (another database it called): that is the handler's failure, not this batch's conflict.
// https://www.postgresql.org/docs/15/protocol-message-formats.html (ReadyForQuery)
func txAborted(tx pgx.Tx) bool { return tx.Conn().PgConn().TxStatus() == 'E' }

// setTimeouts bounds every statement of the processing transaction on the server too,
// so that a statement stuck on a lock or a runaway query ends even if the client is
// gone. SET LOCAL lasts until the transaction ends and is accepted by PostgreSQL and
// CockroachDB alike (https://www.cockroachlabs.com/docs/stable/set-vars#set-local);
// it runs after crdb's restart savepoint, whose rollback would undo it, on every try.
func (e *Engine) setTimeouts(ctx context.Context, tx pgx.Tx) error {
	ms := max(e.cfg.HandlerTimeout.Milliseconds(), 1)
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = "+strconv.FormatInt(ms, 10)); err != nil {
		return fmt.Errorf("setting statement_timeout: %w", err)
	}
	if e.cfg.Dialect == database.CockroachDB {
		// Under SERIALIZABLE, CockroachDB's FOR UPDATE locks are best-effort by default:
		// a lease transfer, split or merge can drop them before the commit, and a second
		// worker could then claim an entry this one holds (serializability still lets only
		// one of them commit, so database effects stay exactly once, but the handler runs
		// twice). This makes them durable (v23.2+; SKIP LOCKED over replicated locks
		// needs v24.1+, cockroach PR #116776, and database.MinVersion is v24.1).
		// https://www.cockroachlabs.com/docs/stable/known-limitations#select-for-update-limitations
		// https://github.com/cockroachdb/cockroach/pull/107749 (the session variable)
		if _, err := tx.Exec(ctx, "SET LOCAL enable_durable_locking_for_serializable = on"); err != nil {
			return fmt.Errorf("setting enable_durable_locking_for_serializable: %w", err)
		}
	}
	return nil
}

// txOptions are the options every processing transaction begins with: explicit
// SERIALIZABLE on CockroachDB (Config.Dialect); the session's default on PostgreSQL,
// where processing relies on row locks under READ COMMITTED.
func (e *Engine) txOptions() pgx.TxOptions {
	if e.cfg.Dialect == database.CockroachDB {
		return pgx.TxOptions{IsoLevel: pgx.Serializable}
	}
	return pgx.TxOptions{}
}

// timeoutError is a handler that overran Config.HandlerTimeout.
type timeoutError struct {
	ev        Event
	after     time.Duration
	abandoned bool // it ignored its context: its transaction's connection was closed
	err       error
}

func (t *timeoutError) Error() string {
	if t.abandoned {
		return fmt.Sprintf("handler timed out after %s and ignored its context; its transaction was abandoned", t.after)
	}
	return fmt.Sprintf("handler timed out after %s: %v", t.after, t.err)
}

func (t *timeoutError) Unwrap() error { return t.err }

// abandonGrace is how long a handler whose context ended may take to return before its
// transaction is abandoned.
const abandonGrace = time.Second

// runHandler runs the event's handler inside a savepoint. handlerErr is the handler's
// failure, its effects rolled back; err means the transaction itself is broken (or
// must be retried as a whole) and nothing can be recorded in it. A handler that
// overruns HandlerTimeout gives a *timeoutError as err: its transaction is rolled back
// whole, and if it ignores its context even then, the transaction's connection is
// closed under it, so that it holds no worker, no lock and no connection.
func (e *Engine) runHandler(ctx context.Context, tx pgx.Tx, ev Event) (handlerErr, err error) {
	h, ok := e.reg.Lookup(ev.Type)
	if !ok {
		return fmt.Errorf("%w %q (register one and retry the event)", ErrNoHandler, ev.Type), nil
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT inboxd_handler"); err != nil {
		return nil, fmt.Errorf("opening handler savepoint: %w", err)
	}
	herr, err := e.callWithDeadline(ctx, tx, ev.Type, func(hctx context.Context) error {
		return callHandler(hctx, h, handlerTx{tx}, ev)
	})
	if err != nil {
		return nil, err
	}
	if herr == nil {
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT inboxd_handler"); err != nil {
			if isRetryable(err) {
				return nil, err
			}
			// The handler swallowed an error that aborted the transaction.
			herr = fmt.Errorf("handler left the transaction unusable: %w", err)
		} else {
			return nil, nil
		}
	}
	if notTheHandlers(herr) && txAborted(tx) {
		return nil, herr // restart or abort the whole transaction, do not count an attempt
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("running handler: %w", ctx.Err())
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT inboxd_handler"); err != nil {
		return nil, fmt.Errorf("rolling back handler savepoint after %v: %w", herr, err)
	}
	return herr, nil
}

// callWithDeadline runs fn (handlers working in tx) under HandlerTimeout. When the
// deadline or ctx ends and fn does not return within abandonGrace, tx's connection is
// closed: the database rolls the transaction back and frees its locks, and fn, when it
// wakes up, finds a closed connection. err is then a *timeoutError (deadline) or ctx's
// error; both mean nothing may be recorded in tx.
func (e *Engine) callWithDeadline(ctx context.Context, tx pgx.Tx, typ string, fn func(context.Context) error) (handlerErr, err error) {
	hctx, cancel := context.WithTimeout(ctx, e.cfg.HandlerTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(hctx) }()
	select {
	case herr := <-done:
		if ctx.Err() == nil && errors.Is(hctx.Err(), context.DeadlineExceeded) {
			return nil, &timeoutError{after: e.cfg.HandlerTimeout, err: herr}
		}
		return herr, nil
	case <-hctx.Done():
	}
	grace := time.NewTimer(min(abandonGrace, e.cfg.HandlerTimeout))
	defer grace.Stop()
	select {
	case herr := <-done:
		if ctx.Err() != nil {
			return nil, fmt.Errorf("running handler: %w", ctx.Err())
		}
		return nil, &timeoutError{after: e.cfg.HandlerTimeout, err: herr}
	case <-grace.C:
	}
	e.m.Processed.WithLabelValues(e.reg.MetricLabel(typ), "abandoned").Inc()
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	defer ccancel()
	_ = tx.Conn().PgConn().Close(cctx)
	if ctx.Err() != nil {
		e.log.Warn("handler ignored cancellation; its transaction was abandoned", "type", typ, "error", ctx.Err())
		return nil, fmt.Errorf("running handler (abandoned): %w", ctx.Err())
	}
	e.log.Error("handler ignored its deadline; its transaction was abandoned", "type", typ, "timeout", e.cfg.HandlerTimeout)
	return nil, &timeoutError{after: e.cfg.HandlerTimeout, abandoned: true}
}

func callHandler(ctx context.Context, h Handler, tx pgx.Tx, ev Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return h.Handle(ctx, tx, ev)
}

// errHandlerTxEnd is what a handler gets for trying to end the processing transaction.
var errHandlerTxEnd = errors.New("handlers must not commit or roll back the processing transaction; return an error instead")

// handlerTx is the transaction handed to handlers: everything but ending it. Begin
// (a nested savepoint) stays available.
type handlerTx struct{ pgx.Tx }

func (handlerTx) Commit(context.Context) error   { return errHandlerTxEnd }
func (handlerTx) Rollback(context.Context) error { return errHandlerTxEnd }
