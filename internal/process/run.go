package process

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/eventctx"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/tracing"
	"github.com/inboxd/inboxd/internal/txstats"
)

// ran is what the run stage did with a batch: each head's outcome, and for each event
// that ran, what to record and its handler's error.
type ran struct {
	outs  map[string]Outcome // by event id
	recs  []journal.Outcome  // in sequence order
	herrs map[string]error   // by event id
}

// run runs the claimed heads, in sequence order, in tx: first the set-based calls
// (runSetBased), then each other runnable event's handler in its own savepoint, with
// its immediate retries. Events of an aggregate whose earlier event did not complete
// (in this batch or outside it) are deferred; FAILED events not yet due are left. An
// error means tx can record nothing; r.outs then holds the outcomes so far.
func (e *Engine) run(ctx context.Context, tx pgx.Tx, heads []journal.Head, setBased bool) (ran, error) {
	r := ran{outs: map[string]Outcome{}, recs: make([]journal.Outcome, 0, len(heads)), herrs: map[string]error{}}
	held := map[string]bool{}             // aggregates whose earlier event in this batch did not complete
	sp := &savepoint{tx: tx, fresh: true} // the claim opened it
	applied, err := e.runSetBased(ctx, sp, heads, setBased)
	if err != nil {
		return r, err
	}
	for _, h := range heads {
		ev := Event{ID: h.ID, Type: h.EventType, AggregateID: h.AggregateID, SequenceNo: h.SequenceNo,
			Tag: h.Tag, Payload: h.Payload, Attempt: h.Attempts + 1, Mode: modeOf(h)}
		var out Outcome
		switch {
		case applied[h.ID].ok:
			out = OutcomeProcessed
			a := applied[h.ID]
			r.recs = append(r.recs, journal.Outcome{ID: ev.ID, Status: out.Status(), StartedAt: a.started, Took: a.took, Runs: 1})
		case h.Blocked || held[h.AggregateID]:
			out = OutcomeDeferred
		case h.Status == journal.StatusFailed && !h.Due:
			out = OutcomeNotDue
		default:
			pol := e.policy(ev.Type)
			started := time.Now()
			sctx, span := e.startEventSpan(ctx, h, ev.Attempt)
			herr, runs, err := e.attempt(sctx, sp, ev)
			if err != nil {
				endEventSpan(span, "", herr, err)
				var to *timeoutError
				if errors.As(err, &to) {
					to.ev = ev
				}
				return r, err
			}
			out = e.outcome(ev, herr)
			endEventSpan(span, out, herr, nil)
			rec := journal.Outcome{ID: ev.ID, Status: out.Status(), StartedAt: started, Took: time.Since(started), Runs: runs}
			if herr != nil {
				rec.Error = herr.Error()
				r.herrs[ev.ID] = herr
			}
			if out == OutcomeFailed {
				rec.Backoff = e.backoff(pol, ev.Attempt, herr)
			}
			r.recs = append(r.recs, rec)
		}
		r.outs[h.ID] = out
		if !out.completes() {
			held[h.AggregateID] = true
		}
	}
	return r, nil
}

// attempt runs ev's handler with its immediate retries (the same attempt, at once, for
// flukes; a rejection is final and a missing handler will not appear in the meantime),
// returning the last run's error, how many runs it took, and err as runHandler does.
func (e *Engine) attempt(ctx context.Context, sp *savepoint, ev Event) (herr error, runs int, err error) {
	pol := e.policy(ev.Type)
	runs = 1
	herr, err = e.runHandler(ctx, sp, ev)
	for i := 0; err == nil && herr != nil && i < pol.immediate() && ctx.Err() == nil &&
		!errors.Is(herr, ErrRejected) && !errors.Is(herr, ErrNoHandler); i++ {
		e.log.Debug("handler failed, retrying at once", "id", ev.ID, "type", e.reg.MetricLabel(ev.Type),
			"attempt", ev.Attempt, "retry", i+1, "error", herr)
		herr, err = e.runHandler(ctx, sp, ev)
		runs++
	}
	return herr, runs, err
}

// Shadow runs ev's handler in tx exactly as processing does (savepoint, immediate
// retries, HandlerTimeout, panics caught) and returns the outcome processing would
// record (processed, rejected, failed or dead) and the handler's error. It records
// nothing: the caller owns tx and rolls it back. err is a broken transaction, ctx's
// end, or a timeout (IsTimeout).
func (e *Engine) Shadow(ctx context.Context, tx pgx.Tx, ev Event) (Outcome, error, error) {
	herr, _, err := e.attempt(ctx, &savepoint{tx: tx}, ev)
	if err != nil {
		return "", nil, err
	}
	return e.outcome(ev, herr), herr, nil
}

// Backoff is the delay before the next attempt of a failed event of eventType whose
// attempt-th attempt failed with herr, by its retry policy.
func (e *Engine) Backoff(eventType string, attempt int, herr error) time.Duration {
	return e.backoff(e.policy(eventType), attempt, herr)
}

// MaxAttempts is the attempts eventType's retry policy allows before DEAD.
func (e *Engine) MaxAttempts(eventType string) int { return e.policy(eventType).MaxAttempts }

// IsTimeout reports a handler that overran HandlerTimeout (Shadow's err).
func IsTimeout(err error) bool {
	var to *timeoutError
	return errors.As(err, &to)
}

// setRun is an event applied by a set-based call, and when and how long the call ran.
type setRun struct {
	ok      bool
	started time.Time
	took    time.Duration
}

// runSetBased applies, through BatchHandler.HandleBatch, the events of the batch that
// are ready to run at once (due, no pending predecessor, the first of their aggregate in
// the batch), one call per event type with at least two of them. It returns the events
// it applied; the others (and every event of a call that did not apply all of them
// cleanly, which is rolled back) are left to the per-event path.
func (e *Engine) runSetBased(ctx context.Context, sp *savepoint, heads []journal.Head, enabled bool) (map[string]setRun, error) {
	tx := sp.tx
	applied := map[string]setRun{}
	if !enabled {
		return applied, nil
	}
	seen := map[string]bool{}
	traces := map[string]string{} // event id: stored trace context, for the call's span links
	byType := map[string][]Event{}
	var types []string
	for _, h := range heads {
		first := !seen[h.AggregateID]
		seen[h.AggregateID] = true
		if !first || h.Blocked || (h.Status == journal.StatusFailed && !h.Due) {
			continue
		}
		if _, ok := e.reg.batchHandler(h.EventType); !ok {
			continue
		}
		if byType[h.EventType] == nil {
			types = append(types, h.EventType)
		}
		if h.TraceContext != "" {
			traces[h.ID] = h.TraceContext
		}
		byType[h.EventType] = append(byType[h.EventType], Event{ID: h.ID, Type: h.EventType, AggregateID: h.AggregateID,
			SequenceNo: h.SequenceNo, Tag: h.Tag, Payload: h.Payload, Attempt: h.Attempts + 1, Mode: modeOf(h)})
	}
	for _, typ := range types {
		evs := byType[typ]
		if len(evs) < 2 {
			continue
		}
		bh, _ := e.reg.batchHandler(typ)
		if err := sp.open(ctx); err != nil {
			return nil, fmt.Errorf("opening set-based savepoint: %w", err)
		}
		var errs []error
		started := time.Now()
		sctx, span := e.startSetSpan(ctx, typ, traces, evs)
		herr, err := e.callWithDeadline(sctx, tx, typ, func(hctx context.Context) (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("batch handler panicked: %v", r)
				}
			}()
			errs, err = bh.HandleBatch(hctx, handlerTx{tx}, evs)
			return err
		})
		if err != nil {
			endEventSpan(span, "", herr, err)
			return nil, err // timeout (retried event by event) or ctx
		}
		clean := herr == nil && len(errs) == len(evs)
		for _, x := range errs {
			clean = clean && x == nil
		}
		if clean {
			endEventSpan(span, OutcomeProcessed, nil, nil)
		} else {
			endEventSpan(span, "", herr, nil) // left to the per-event path, which has spans of its own
		}
		// A clean call's savepoint is left open, not released: COMMIT commits it with the
		// rest (see runHandler).
		if clean && !txAborted(tx) {
			for _, ev := range evs {
				applied[ev.ID] = setRun{ok: true, started: started, took: time.Since(started)}
			}
			continue
		}
		if notTheHandlers(herr) && txAborted(tx) {
			return nil, herr
		}
		if err := sp.rollback(ctx); err != nil {
			return nil, fmt.Errorf("rolling back a set-based call: %w", err)
		}
	}
	return applied, nil
}

// policy is the recoverability policy of an event type: its own fields, the engine's
// for the rest.
func (e *Engine) policy(eventType string) RetryPolicy {
	p, _ := e.reg.retryPolicy(eventType)
	return p.Or(e.cfg.retryPolicy())
}

// backoff is the delay before the next attempt of a failed event: the policy's, or, for
// an event parked for want of a handler, in effect never (a start with its handler
// wakes it).
func (e *Engine) backoff(pol RetryPolicy, attempt int, herr error) time.Duration {
	if errors.Is(herr, ErrNoHandler) && e.cfg.NoHandler == NoHandlerPark {
		return parkFor
	}
	return pol.Backoff(attempt)
}

// outcome maps a handler's result to the event's outcome.
func (e *Engine) outcome(ev Event, herr error) Outcome {
	switch {
	case herr == nil:
		return OutcomeProcessed
	case errors.Is(herr, ErrRejected):
		return OutcomeRejected
	case errors.Is(herr, ErrNoHandler) && e.cfg.NoHandler == NoHandlerReject:
		return OutcomeRejected
	case errors.Is(herr, ErrNoHandler) && e.cfg.NoHandler == NoHandlerPark:
		return OutcomeFailed // held, never DEAD: see backoff
	case ev.Attempt >= e.policy(ev.Type).MaxAttempts:
		return OutcomeDead
	default:
		return OutcomeFailed
	}
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

// runHandler runs the event's handler inside a savepoint, left open when it succeeds. handlerErr is the handler's
// failure, its effects rolled back; err means the transaction itself is broken (or
// must be retried as a whole) and nothing can be recorded in it. A handler that
// overruns HandlerTimeout gives a *timeoutError as err: its transaction is rolled back
// whole, and if it ignores its context even then, the transaction's connection is
// closed under it, so that it holds no worker, no lock and no connection.
func (e *Engine) runHandler(ctx context.Context, sp *savepoint, ev Event) (handlerErr, err error) {
	h, ok := e.reg.Lookup(ev.Type)
	if !ok {
		return fmt.Errorf("%w %q (register one and retry the event)", ErrNoHandler, ev.Type), nil
	}
	tx := sp.tx
	if err := sp.open(ctx); err != nil {
		return nil, fmt.Errorf("opening handler savepoint: %w", err)
	}
	// The event and mode, for Emit (the outbox row's event) and for a shadow run's sink,
	// whose messages of a rolled-back run are forgotten as their rows would be.
	ctx = eventctx.With(ctx, eventctx.Event{ID: ev.ID, Mode: ev.Mode, Run: ev.ReplayRun})
	if sink := eventctx.SinkFrom(ctx); sink != nil {
		mark := sink.Len()
		defer func() {
			if handlerErr != nil || err != nil {
				sink.Truncate(mark)
			}
		}()
	}
	herr, err := e.callWithDeadline(ctx, tx, ev.Type, func(hctx context.Context) error {
		return callHandler(hctx, h, handlerTx{tx}, ev)
	})
	if err != nil {
		return nil, err
	}
	if herr == nil {
		// The savepoint of a handler that succeeded is left open, not released: COMMIT
		// commits it with the rest of the transaction, on PostgreSQL and CockroachDB alike
		// (https://www.cockroachlabs.com/docs/stable/savepoint,
		// https://www.cockroachlabs.com/docs/stable/release-savepoint), and a RELEASE would
		// be one more round trip per event. Whether the handler's statements left the
		// transaction usable is in the server's last ReadyForQuery (txAborted).
		if !txAborted(tx) {
			return nil, nil
		}
		// The handler swallowed an error that aborted the transaction.
		herr = errors.New("handler left the transaction unusable: one of its statements failed, and it returned no error")
	}
	if notTheHandlers(herr) && txAborted(tx) {
		return nil, herr // restart or abort the whole transaction, do not count an attempt
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("running handler: %w", ctx.Err())
	}
	if err := sp.rollback(ctx); err != nil {
		return nil, fmt.Errorf("rolling back handler savepoint after %v: %w", herr, err)
	}
	return herr, nil
}

// handlerSavepoint is the savepoint every handler call (Handle, HandleBatch) runs in.
const handlerSavepoint = "inboxd_handler"

// savepoint is the handlers' savepoint in a batch's transaction. A call's savepoint is
// left open when it succeeds, and the next call opens another inside it; COMMIT commits
// them all. One is opened only when none is fresh: the claim opens the first in its
// own round trip, and ROLLBACK TO SAVEPOINT leaves the savepoint in place, as it was
// when opened, ready for the next call
// (https://www.postgresql.org/docs/15/sql-rollback-to.html,
// https://www.cockroachlabs.com/docs/stable/savepoint#error-recovery-in-nested-transactions-with-rollback-to-savepoint).
type savepoint struct {
	tx    pgx.Tx
	fresh bool // opened, and nothing ran in it yet
}

// open makes a fresh savepoint current and marks it used by the call about to run.
func (s *savepoint) open(ctx context.Context) error {
	if !s.fresh {
		if _, err := s.tx.Exec(ctx, "SAVEPOINT "+handlerSavepoint); err != nil {
			return err
		}
	}
	s.fresh = false
	return nil
}

// rollback undoes the call that ran in the current savepoint, which is fresh again.
func (s *savepoint) rollback(ctx context.Context) error {
	if _, err := s.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+handlerSavepoint); err != nil {
		return err
	}
	s.fresh = true
	return nil
}

// callWithDeadline runs fn (handlers working in tx) under HandlerTimeout. When the
// deadline or ctx ends and fn does not return within abandonGrace, tx's connection is
// closed: the database rolls the transaction back and frees its locks, and fn, when it
// wakes up, finds a closed connection. err is then a *timeoutError (deadline) or ctx's
// error; both mean nothing may be recorded in tx.
func (e *Engine) callWithDeadline(ctx context.Context, tx pgx.Tx, typ string, fn func(context.Context) error) (handlerErr, err error) {
	hctx, cancel := context.WithTimeout(txstats.Handler(ctx), e.cfg.HandlerTimeout)
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

func (handlerTx) Commit(context.Context) error { return errHandlerTxEnd }

func (handlerTx) Rollback(context.Context) error { return errHandlerTxEnd }

// Span attributes of processing (inboxd's own names; the event type is the registry's
// bounded label, never a payload's made-up type).
const (
	attrEventID = attribute.Key("inboxd.event.id")
	attrType    = attribute.Key("inboxd.event.type")
	attrAttempt = attribute.Key("inboxd.attempt")
	attrOutcome = attribute.Key("inboxd.outcome")
	attrEvents  = attribute.Key("inboxd.events")
)

// startEventSpan starts the processing span of one event: a child of the trace of the
// message it came in (its stored traceparent), else of whatever span ctx holds. The
// handler gets its context, so that the handler's own spans, and the traceparent of
// what it emits to the outbox, nest under it.
func (e *Engine) startEventSpan(ctx context.Context, h journal.Head, attempt int) (context.Context, trace.Span) {
	ctx = tracing.WithStored(ctx, h.TraceContext)
	typ := e.reg.MetricLabel(h.EventType)
	return e.tracer.Start(ctx, "process "+typ, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrEventID.String(h.ID), attrType.String(typ), attrAttempt.Int(attempt)))
}

// endEventSpan records the outcome (and a handler's error) and ends the span.
func endEventSpan(span trace.Span, out Outcome, herr, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if err == nil && out != "" {
		span.SetAttributes(attrOutcome.String(string(out)))
	}
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, "processing transaction failed")
	case herr != nil && !errors.Is(herr, ErrRejected):
		span.RecordError(herr)
		span.SetStatus(codes.Error, "handler failed")
	}
	span.End()
}

// startSetSpan starts the span of one BatchHandler call, linked to the trace of each
// event it applies (one call has many parents, which a span cannot have).
func (e *Engine) startSetSpan(ctx context.Context, typ string, heads map[string]string, evs []Event) (context.Context, trace.Span) {
	links := make([]trace.Link, 0, len(evs))
	for _, ev := range evs {
		if sc := tracing.SpanContext(heads[ev.ID]); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attrEventID.String(ev.ID)}})
		}
	}
	label := e.reg.MetricLabel(typ)
	return e.tracer.Start(ctx, "process batch "+label, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
		trace.WithAttributes(attrType.String(label), attrEvents.Int(len(evs))))
}
