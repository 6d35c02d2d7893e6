// Package replay runs a shadow replay: the handlers of the binary at hand run again
// over selected journal history, each event in its own transaction that is always
// rolled back, and what each run did (outcome, error, emitted messages and, on
// PostgreSQL, rows written per table) is compared with what was recorded when the
// event was processed. Nothing is committed and nothing is published: Emit writes to
// the run's sink (eventctx.Sink), not the outbox.
package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/eventctx"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/process"
)

// Defaults of Options.
const (
	DefaultLockTimeout = time.Second
	pageSize           = 200
)

// Options configure a shadow run.
type Options struct {
	Selection journal.Selection
	// Limit bounds the events run; 0: every selected event.
	Limit int
	// Ignore are the noise rules (ParsePath).
	Ignore []Path
	// Rate bounds the events run per second; 0: no bound.
	Rate float64
	// Timeout bounds each handler run (its HandlerTimeout, also the statement timeout);
	// an event that overruns it is reported as timed out. Default defaults.HandlerTimeout.
	Timeout time.Duration
	// LockTimeout bounds each wait for a row lock a live transaction holds. Default
	// DefaultLockTimeout.
	LockTimeout time.Duration
	// Baseline is an earlier report whose table writes the run compares with its own
	// (processing does not record them); nil: table writes are reported, not compared.
	Baseline *Report
	// Progress, when set, is called after each event.
	Progress func(Progress)
	// Engine configures the handlers' runs as processing's (retry policy, tracer).
	Engine process.Config
}

// Progress is how far a run has come.
type Progress struct {
	Done, Differing int
	Elapsed         time.Duration
}

// Runner runs shadow replays with the handlers of a registry.
type Runner struct {
	Pool     *pgxpool.Pool
	Dialect  database.Dialect
	Registry *process.Registry
	Log      *slog.Logger
	// Metrics counts the events run (ShadowEvents); nil: none.
	Metrics *metrics.Metrics
}

// Run shadows the selected events in journal order and returns the report. It stops at
// ctx's end with ctx's error; an event whose run fails otherwise is reported, not fatal.
func (r Runner) Run(ctx context.Context, o Options) (*Report, error) {
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o.Timeout = defaults.Or(o.Timeout, defaults.HandlerTimeout)
	o.LockTimeout = defaults.Or(o.LockTimeout, DefaultLockTimeout)
	cfg := o.Engine
	cfg.HandlerTimeout, cfg.Dialect = o.Timeout, r.Dialect
	// Its own metrics: a shadow run's handler outcomes are not processing's.
	eng := process.New(r.Pool, r.Registry, cfg, nil, log)
	run := message.NewID()
	rep := &Report{Run: run, Database: r.Dialect.String(), Started: time.Now().UTC(),
		Ignore: pathStrings(o.Ignore), TableWrites: map[string]map[string]Writes{}}
	var baseline map[string]map[string]Writes
	if o.Baseline != nil {
		baseline = o.Baseline.TableWrites
	}
	begin := r.Dialect.ShadowBeginSQL(o.LockTimeout, max(o.Timeout, defaults.MinStatementTimeout))
	last := time.Now()
	var after int64
	for {
		n := pageSize
		if o.Limit > 0 {
			n = min(n, o.Limit-rep.Summary.Events)
		}
		if n <= 0 {
			break
		}
		page, err := journal.SelectSettled(ctx, r.Pool, o.Selection, after, n)
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].SequenceNo
		ids := make([]string, len(page))
		for i, rec := range page {
			ids[i] = rec.ID
		}
		recorded, err := outbox.EmittedBy(ctx, r.Pool, ids)
		if err != nil {
			return nil, err
		}
		for _, rec := range page {
			if err := r.pace(ctx, o.Rate, rep); err != nil {
				return nil, err
			}
			res, writes, err := r.shadowOne(ctx, eng, begin, run, rec)
			// A conflict the whole transaction must retry: on CockroachDB the low-priority
			// shadow transaction is the one aborted when it meets a live one. Run it again a
			// few times, as processing would, then report it as timed out: it gave way.
			for try := 1; err == nil && res.conflict && try < maxConflictTries; try++ {
				res, writes, err = r.shadowOne(ctx, eng, begin, run, rec)
			}
			if err != nil {
				return nil, err
			}
			if res.conflict {
				res.TimedOut = true
				res.Shadow.Outcome = "timed out"
			}
			if writes != nil {
				rep.TableWrites[rec.ID] = writes
			}
			var base map[string]Writes
			baseKnown := false
			if baseline != nil {
				base, baseKnown = baseline[rec.ID]
			}
			compare(&res, recorded[rec.ID], writes, base, baseKnown, o.Ignore)
			rep.add(res)
			if r.Metrics != nil {
				r.Metrics.ShadowEvents.WithLabelValues(res.result()).Inc()
			}
			if o.Progress != nil {
				o.Progress(Progress{Done: rep.Summary.Events, Differing: rep.Summary.Differing, Elapsed: time.Since(rep.Started)})
			}
			if time.Since(last) >= 5*time.Second {
				last = time.Now()
				log.Info("shadow replay", "run", run, "events", rep.Summary.Events, "differing", rep.Summary.Differing)
			}
		}
	}
	rep.Finished = time.Now().UTC()
	if s := rep.Finished.Sub(rep.Started).Seconds(); s > 0 {
		rep.Summary.Rate = float64(rep.Summary.Events) / s
	}
	sort.SliceStable(rep.Events, func(i, j int) bool { return rep.Events[i].SequenceNo < rep.Events[j].SequenceNo })
	return rep, nil
}

// pace waits until the next event may start under rate (events per second).
func (r Runner) pace(ctx context.Context, rate float64, rep *Report) error {
	if rate <= 0 {
		return ctx.Err()
	}
	due := rep.Started.Add(time.Duration(float64(rep.Summary.Events) / rate * float64(time.Second)))
	return sleep(ctx, time.Until(due))
}

// shadowOne runs one event's handler in a transaction it always rolls back.
func (r Runner) shadowOne(ctx context.Context, eng *process.Engine, begin, run string, rec journal.Record) (EventResult, map[string]Writes, error) {
	res := EventResult{ID: rec.ID, Type: rec.EventType, AggregateID: rec.AggregateID, SequenceNo: rec.SequenceNo,
		Recorded: recordedOutcome(rec)}
	tx, err := r.Pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: begin})
	if err != nil {
		return res, nil, fmt.Errorf("beginning the shadow transaction of %s: %w", rec.ID, err)
	}
	defer func() {
		// Always: the shadow run's whole point. Not bound to ctx, which may be why we are here.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	// pg_stat_xact_user_tables also holds counts of this connection's earlier
	// transactions that were not yet flushed to the shared statistics (PostgreSQL 15
	// flushes them at most once a second or so, not at each commit): the handler's
	// writes are the difference between a reading before it runs and one after.
	var before map[string]Writes
	if r.Dialect == database.PostgreSQL {
		if before, err = tableWrites(ctx, tx); err != nil {
			return res, nil, err
		}
	}
	sink := &eventctx.Sink{}
	ev := process.Event{ID: rec.ID, Type: rec.EventType, AggregateID: rec.AggregateID, SequenceNo: rec.SequenceNo,
		Tag: rec.Tag, Payload: rec.Payload, Attempt: max(rec.Attempts, 1), Mode: eventctx.Shadow, ReplayRun: run}
	out, herr, err := eng.Shadow(eventctx.WithSink(ctx, sink), tx, ev)
	switch {
	case err != nil && ctx.Err() != nil:
		return res, nil, fmt.Errorf("shadowing %s: %w", rec.ID, ctx.Err())
	case err != nil && (process.IsTimeout(err) || isTimeoutCode(err)):
		res.TimedOut = true
		res.Shadow = Outcome{Outcome: "timed out", Error: err.Error()}
		return res, nil, nil
	case err != nil:
		res.Shadow = Outcome{Outcome: OutcomeFailed, Error: err.Error()}
		res.conflict = isConflict(err)
		return res, nil, nil
	case herr != nil && isTimeoutCode(herr):
		res.TimedOut = true
		res.Shadow = Outcome{Outcome: "timed out", Error: herr.Error()}
		return res, nil, nil
	}
	res.Shadow = Outcome{Outcome: outcomeName(out)}
	if herr != nil {
		res.Shadow.Error = herr.Error()
	}
	for _, m := range sink.Messages() {
		res.shadowMsgs = append(res.shadowMsgs, Message{ID: m.ID, Destination: m.Destination, Headers: m.Headers, Body: string(m.Body)})
	}
	var writes map[string]Writes
	if r.Dialect == database.PostgreSQL {
		after, err := tableWrites(ctx, tx)
		if err != nil {
			return res, nil, err
		}
		if after != nil {
			writes = map[string]Writes{}
			for t, w := range after {
				b := before[t]
				d := Writes{Inserted: w.Inserted - b.Inserted, Updated: w.Updated - b.Updated, Deleted: w.Deleted - b.Deleted}
				if d != (Writes{}) {
					writes[t] = d
				}
			}
		}
	}
	return res, writes, nil
}

// pgOnlyTableWrites reads the rows this transaction inserted, updated and deleted per
// table, before it ends: PostgreSQL counts them in pg_stat_xact_user_tables while the
// transaction runs (https://www.postgresql.org/docs/15/monitoring-stats.html#MONITORING-PG-STAT-ALL-TABLES-VIEW,
// "pg_stat_xact_all_tables"). CockroachDB has no such view; it is never sent there.
// It may include counts of earlier transactions not yet flushed (see shadowOne).
// Rows a rolled-back savepoint wrote are counted too.
const pgOnlyTableWrites = `SELECT schemaname || '.' || relname, n_tup_ins, n_tup_upd, n_tup_del
	FROM pg_stat_xact_user_tables
	WHERE n_tup_ins + n_tup_upd + n_tup_del > 0`

func tableWrites(ctx context.Context, tx pgx.Tx) (map[string]Writes, error) {
	rows, err := tx.Query(ctx, pgOnlyTableWrites)
	if err != nil {
		return nil, fmt.Errorf("reading the shadow transaction's table writes: %w", err)
	}
	defer rows.Close()
	out := map[string]Writes{}
	for rows.Next() {
		var name string
		var w Writes
		if err := rows.Scan(&name, &w.Inserted, &w.Updated, &w.Deleted); err != nil {
			return nil, fmt.Errorf("reading the shadow transaction's table writes: %w", err)
		}
		out[name] = w
	}
	if err := rows.Err(); err != nil {
		// A handler that aborted the transaction and returned nil leaves nothing to read.
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "25P02" {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the shadow transaction's table writes: %w", err)
	}
	return out, nil
}

// isTimeoutCode reports a lock or statement timeout (PostgreSQL's 55P03 lock_not_available
// and 57014 query_canceled; CockroachDB reports its lock timeout as 55P03 too).
func isTimeoutCode(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "57014")
}

// maxConflictTries bounds the runs of an event whose transaction conflicts.
const maxConflictTries = 3

// isConflict reports a transaction conflict to retry whole (SQLSTATE 40001, and
// CockroachDB's CR000), as processing retries it.
func isConflict(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "CR000")
}

// The outcomes a report shows.
const (
	OutcomeProcessed = "processed"
	OutcomeRejected  = "rejected"
	OutcomeFailed    = "failed"
)

func outcomeName(o process.Outcome) string {
	switch o {
	case process.OutcomeProcessed:
		return OutcomeProcessed
	case process.OutcomeRejected:
		return OutcomeRejected
	default:
		return OutcomeFailed
	}
}

// recordedOutcome is what processing recorded: a FAILED or DEAD event failed.
func recordedOutcome(rec journal.Record) Outcome {
	o := Outcome{Outcome: OutcomeFailed}
	switch rec.Status {
	case journal.StatusProcessed:
		return Outcome{Outcome: OutcomeProcessed}
	case journal.StatusRejected:
		o.Outcome = OutcomeRejected
	}
	if rec.LastError != nil {
		o.Error = *rec.LastError
	}
	return o
}

func pathStrings(ps []Path) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
