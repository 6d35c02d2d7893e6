package process

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/cockroach-go/v2/crdb/crdbpgxv5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/journal"
)

// record settles a batch in its transaction: its outcomes, the attempts worth a
// history row and its aggregates' next heads, in one statement after the head rows'
// lock (journal.Settle). When the database refuses them for a deterministic reason (not
// availability), it records the outcomes one by one instead, and an outcome refused
// alone is recorded with a fixed message in place of the handler's text, then moves
// the aggregates on: the batch commits, every attempt counts, no handler runs again.
// (Rolling the batch back instead would re-run all its handlers, and the same refusal
// would do it again at every sweep: issue 18, 1,023 handler calls for 200 events.) Only
// an outcome that carries no text, PROCESSED, can still be refused; that is the
// schema's fault, and the batch fails as a whole. It returns the aggregates left with a
// head that is not parked.
func (e *Engine) record(ctx context.Context, tx pgx.Tx, heads []journal.Head, recs []journal.Outcome) (map[string]bool, error) {
	aggs, err := e.settling(heads, recs)
	if err != nil {
		return nil, err
	}
	next, err := journal.Settle(ctx, tx, recs, aggs)
	if err == nil || len(recs) == 0 || journal.IsUnavailable(err) || ctx.Err() != nil {
		return next, err
	}
	e.log.Warn("the database refused a batch's outcomes; recording them one by one", "events", len(recs), "error", err)
	for _, r := range recs {
		_, err := journal.Settle(ctx, tx, []journal.Outcome{r}, nil)
		if err == nil {
			continue
		}
		if journal.IsUnavailable(err) || ctx.Err() != nil || r.Status == journal.StatusProcessed {
			return nil, err
		}
		e.log.Error("the database refused an event's outcome; recording it with a fixed message instead",
			"id", r.ID, "status", r.Status, "error", err, "handler_error", r.Error)
		r.Error = unstorableMessage(err)
		if _, err := journal.Settle(ctx, tx, []journal.Outcome{r}, nil); err != nil {
			return nil, fmt.Errorf("recording event %s with a fixed message: %w", r.ID, err)
		}
	}
	return journal.SettleHeads(ctx, tx, aggs)
}

// settling returns the aggregates of the recorded outcomes, and marks the DEAD outcomes
// of types that run on (Registry.RunOnDead) to be skipped, so that they do not park
// their aggregates.
func (e *Engine) settling(heads []journal.Head, recs []journal.Outcome) ([]string, error) {
	// recs follow heads' order (runBatch records in sequence order), so one pass
	// usually pairs them, without a map (this runs for every batch).
	aggs := make([]string, 0, len(recs))
	i := 0
	for k := range recs {
		r := &recs[k]
		for i < len(heads) && heads[i].ID != r.ID {
			i++
		}
		if i == len(heads) {
			i = slices.IndexFunc(heads, func(h journal.Head) bool { return h.ID == r.ID })
			if i < 0 {
				return nil, fmt.Errorf("recorded outcome of %s, which the batch did not claim", r.ID)
			}
		}
		h := &heads[i]
		if n := len(aggs); n == 0 || aggs[n-1] != h.AggregateID {
			aggs = append(aggs, h.AggregateID)
		}
		r.SkipDead = r.Status == journal.StatusDead && e.reg.runsOnDead(h.EventType)
	}
	return aggs, nil
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
		rec.Backoff = e.backoff(e.policy(ev.Type), ev.Attempt, herr)
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
		recs := []journal.Outcome{rec}
		aggs, err := e.settling([]journal.Head{p}, recs)
		if err != nil {
			return err
		}
		_, err = journal.Settle(ctx, tx, recs, aggs)
		return err
	})
	return got, err
}

// executeTx is journal.ExecuteTx: crdbpgx.ExecuteTx with a failed COMMIT reported.
func executeTx(ctx context.Context, db crdbpgx.Conn, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	return journal.ExecuteTx(ctx, db, opts, fn)
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

// maxLoggedType bounds the event type a log line carries: it comes from the payload.
const maxLoggedType = 200

// observe counts and logs the outcomes of a batch that committed after took.
func (e *Engine) observe(heads []journal.Head, took time.Duration, r ran) {
	for _, h := range heads {
		out := r.outs[h.ID]
		typ := e.reg.MetricLabel(h.EventType) // bounded: metrics never carry a payload's made-up type
		e.m.ProcessSeconds.WithLabelValues(typ).Observe(took.Seconds())
		e.m.Processed.WithLabelValues(typ, string(out)).Inc()
		e.logOutcome(h.ID, h.EventType, h.Attempts+1, out, r.herrs[h.ID])
	}
}

// logOutcome logs an outcome with the event's own type, registered or not (a typo in a
// type name must be visible), cut to maxLoggedType bytes.
func (e *Engine) logOutcome(id, typ string, attempt int, out Outcome, err error) {
	if len(typ) > maxLoggedType {
		typ = strings.ToValidUTF8(typ[:maxLoggedType], "") + "…"
	}
	if out == OutcomeFailed && errors.Is(err, ErrNoHandler) && e.cfg.NoHandler == NoHandlerPark {
		e.log.Warn("event parked: no handler for its type; attempted again when an instance starts with one",
			"id", id, "type", typ, "attempt", attempt)
		return
	}
	switch out {
	case OutcomeFailed:
		e.log.Warn("event failed, will retry", "id", id, "type", typ, "attempt", attempt, "error", err)
	case OutcomeDead:
		e.log.Error("event failed for the last time, now DEAD", "id", id, "type", typ, "attempt", attempt, "error", err)
	case OutcomeRejected:
		// The reason can quote the payload (personal data): not at INFO.
		e.log.Info("event rejected", "id", id, "type", typ)
		e.log.Debug("event rejected", "id", id, "type", typ, "reason", err)
	}
}
