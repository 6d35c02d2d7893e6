package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/eventctx"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/logx"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
)

// StorePlan plans a replay of sel (BuildPlan) and stores it, frozen, as a run in state
// planned: the run's id and counts are in the returned run.
func StorePlan(ctx context.Context, pool *pgxpool.Pool, sel journal.Selection, noTail bool, limit int) (journal.ReplayRun, *Plan, error) {
	p, err := BuildPlan(ctx, pool, sel, noTail, limit)
	if err != nil {
		return journal.ReplayRun{}, nil, err
	}
	selJSON, err := json.Marshal(sel)
	if err != nil {
		return journal.ReplayRun{}, nil, fmt.Errorf("encoding a replay selection: %w", err)
	}
	run := journal.ReplayRun{ID: message.NewID(), State: journal.RunPlanned, Selection: selJSON, Tail: !noTail,
		Events: int64(p.Events), Selected: int64(p.Selected), AddedByTail: int64(p.AddedByTail),
		Aggregates: int64(p.Aggregates), Types: map[string]int64{}}
	for t, n := range p.Types {
		run.Types[t] = int64(n)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return run, nil, fmt.Errorf("storing a replay plan: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := journal.InsertReplayRun(ctx, tx, run, p.Items); err != nil {
		return run, nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return run, nil, fmt.Errorf("storing a replay plan: %w", err)
	}
	return run, p, nil
}

// Executor runs stored replay runs for real with the handlers of a registry.
//
// Each item runs in its own transaction, which locks the item, runs the event's handler
// (Event.Mode replay, Event.ReplayRun the run), records the attempt in the journal's
// history with the run's id and marks the item done, all in one commit: a crash before
// the commit leaves the item pending and its effects rolled back, so it runs again;
// after, the item is done and never runs again in this run. Items run one at a time in
// journal order, an aggregate's only after its earlier ones are done. The run's state
// is read between items: a pause or a cancel takes effect before the next one.
type Executor struct {
	Pool     *pgxpool.Pool
	Dialect  database.Dialect
	Registry *process.Registry
	Log      *slog.Logger
	// Metrics counts the attempts (ReplayItems); nil: none.
	Metrics *metrics.Metrics
	// Engine configures the handlers' runs as processing's (retry policy, timeouts).
	Engine process.Config
	// Idle is the wait when no item is due (one backing off); default 200ms.
	Idle time.Duration
	// LeaseTTL is how long the run's lease outlives its runner; default 30s.
	LeaseTTL time.Duration
}

// maxItemTries bounds the runs of an item whose transaction conflicts (40001).
const maxItemTries = 5

// Execute runs the run until it is done, paused or cancelled (it returns then, with
// the run's state), or ctx ends. It resumes a run a crashed runner left: items done
// stay done. One runner per run: a second one would replay nothing twice (the item's lock
// and state): the run's lease (LeaseTTL, renewed between events) keeps a second
// runner out, with journal.ErrRunLeased, until the first one's lease expires.
func (x Executor) Execute(ctx context.Context, runID string) (string, error) {
	log := x.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := x.Engine
	cfg.Dialect = x.Dialect
	eng := process.New(x.Pool, x.Registry, cfg, nil, log)
	idle := x.Idle
	if idle <= 0 {
		idle = 200 * time.Millisecond
	}
	ttl := x.LeaseTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	owner := message.NewID()
	defer func() {
		// Leaving the run (paused, parked, done, ctx's end): another runner, or this
		// instance's next look, may take it at once. Bounded, as ctx may be over.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := journal.ReleaseReplayLease(rctx, x.Pool, runID, owner); err != nil {
			log.Warn("releasing a replay run's lease", "run", runID, "error", err)
		}
	}()
	// lease renews the run's lease (between events: a pause or cancel is seen there).
	lease := func() (string, error) {
		st, err := journal.LeaseReplayRun(ctx, x.Pool, runID, owner, ttl)
		if err != nil {
			return st, err
		}
		return st, nil
	}
	started := time.Now()
	ran := 0
	for {
		if st, err := lease(); err != nil || st != journal.RunRunning {
			return st, err
		}
		run, err := journal.GetReplayRun(ctx, x.Pool, runID, false)
		if err != nil {
			return "", err
		}
		items, err := journal.NextReplayItems(ctx, x.Pool, runID, 100)
		if err != nil {
			return "", err
		}
		if len(items) == 0 {
			done, err := journal.FinishReplayRun(ctx, x.Pool, runID)
			if err != nil {
				return "", err
			}
			if done {
				log.Info("replay run done", "run", runID, "events", run.Events)
				return journal.RunDone, nil
			}
			// Only dead items (and those behind them) left: the run is parked until an
			// operator cancels it; its runner leaves it.
			if runnable, err := journal.ReplayRunnable(ctx, x.Pool, runID); err != nil {
				return "", err
			} else if !runnable {
				c, err := journal.GetReplayRun(ctx, x.Pool, runID, true)
				if err != nil {
					return "", err
				}
				log.Warn("replay run parked by dead events: cancel it to release their aggregates", "run", runID, "dead", c.Dead)
				return journal.RunRunning, nil
			}
			if err := sleep(ctx, idle); err != nil {
				return "", err
			}
			continue
		}
		for i, it := range items {
			if i > 0 { // between events: the run's state, as an operator may have changed it
				if st, err := lease(); err != nil || st != journal.RunRunning {
					return st, err
				}
			}
			if run.Rate > 0 {
				due := started.Add(time.Duration(float64(ran) / run.Rate * float64(time.Second)))
				if err := sleep(ctx, time.Until(due)); err != nil {
					return "", err
				}
			}
			var res journal.ReplayResult
			var ok bool
			for try := 1; ; try++ {
				res, ok, err = x.one(ctx, eng, run, it)
				if err == nil || !isConflict(err) || try == maxItemTries {
					break
				}
			}
			if err != nil {
				return "", err
			}
			ran++
			if ok && x.Metrics != nil {
				x.Metrics.ReplayItems.WithLabelValues(strings.ToLower(string(res.Outcome))).Inc()
			}
			if res.Outcome != journal.StatusProcessed && res.Outcome != journal.StatusRejected {
				// The aggregate's later items wait for it; the next page leaves them out.
				break
			}
		}
	}
}

// one replays one item in its own transaction; ok is false when it was no longer
// pending (a runner before a crash committed it).
func (x Executor) one(ctx context.Context, eng *process.Engine, run journal.ReplayRun, it journal.ReplayItem) (journal.ReplayResult, bool, error) {
	var res journal.ReplayResult
	tx, err := x.Pool.Begin(ctx)
	if err != nil {
		return res, false, fmt.Errorf("beginning the replay of %s: %w", it.EventID, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	state, attempts, err := journal.LockReplayItem(ctx, tx, it)
	if err != nil {
		return res, false, err
	}
	if state != journal.ItemPending {
		return res, false, nil
	}
	if err := journal.LockAggregatePending(ctx, tx, it.AggregateID); err != nil {
		return res, false, err
	}
	rec, err := journal.Get(ctx, tx, it.EventID)
	if err != nil {
		return res, false, fmt.Errorf("reading event %s to replay: %w", it.EventID, err)
	}
	hctx := ctx
	if !run.Publish {
		// Suppressed: Emit writes the run's messages to a sink that is dropped.
		hctx = eventctx.WithSink(ctx, &eventctx.Sink{})
	}
	ev := process.Event{ID: rec.ID, Type: rec.EventType, AggregateID: rec.AggregateID, SequenceNo: rec.SequenceNo,
		Tag: rec.Tag, Payload: rec.Payload, Attempt: attempts + 1, Mode: eventctx.Replay, ReplayRun: run.ID}
	res.StartedAt = time.Now()
	out, herr, err := eng.Shadow(hctx, tx, ev)
	res.Took = time.Since(res.StartedAt)
	res.Runs = 1
	switch {
	case err != nil && ctx.Err() != nil:
		return res, false, fmt.Errorf("replaying %s: %w", it.EventID, ctx.Err())
	case err != nil && (process.IsTimeout(err) || isTimeoutCode(err)):
		// The transaction is gone with its effects: record the timeout as a failed attempt
		// in a fresh one.
		_ = tx.Rollback(ctx)
		herr, out = err, process.OutcomeFailed
		if attempts+1 >= eng.MaxAttempts(rec.EventType) {
			out = process.OutcomeDead
		}
		if tx, err = x.Pool.Begin(ctx); err != nil {
			return res, false, fmt.Errorf("recording the replay of %s: %w", it.EventID, err)
		}
		if state, attempts, err = journal.LockReplayItem(ctx, tx, it); err != nil || state != journal.ItemPending {
			return res, false, err
		}
	case err != nil:
		return res, false, fmt.Errorf("replaying %s: %w", it.EventID, err)
	}
	res.Outcome = out.Status()
	if herr != nil {
		res.Error = herr.Error()
	}
	if out == process.OutcomeFailed {
		res.Backoff = eng.Backoff(rec.EventType, attempts+1, herr)
	}
	if err := journal.FinishReplayItem(ctx, tx, it, attempts+1, res); err != nil {
		return res, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, false, fmt.Errorf("committing the replay of %s: %w", it.EventID, err)
	}
	return res, true, nil
}

// sleep waits d, or until ctx ends and returns its error; a d of 0 or less waits nothing.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// RunRunning runs the running replay runs, one at a time, checking for them every
// interval, until ctx ends: the part of a running inboxd that executes StartReplay's
// runs and takes over those of an instance that died. A run another instance's runner
// holds is left to it.
func RunRunning(ctx context.Context, x Executor, interval time.Duration) error {
	log := x.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// A database away fails every poll: logged once per outage, as the other parts do.
	out := logx.Outage{Log: log, What: "database", Level: slog.LevelWarn}
	runOut := logx.Outage{Log: log, What: "database", Level: slog.LevelWarn}
	for {
		ids, err := journal.RunningReplayRuns(ctx, x.Pool)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			out.Fail("listing replay runs failed; retrying every poll, logged once per outage", err)
		default:
			out.Recovered("listing replay runs works again")
		}
		for _, id := range ids {
			st, err := x.Execute(ctx, id)
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, journal.ErrRunLeased):
			case err != nil:
				runOut.Fail("replay run stopped; trying again at the next poll, logged once per outage", fmt.Errorf("run %s: %w", id, err))
			default:
				runOut.Recovered("replay runs work again")
				log.Info("replay run left", "run", id, "state", st)
			}
		}
		if sleep(ctx, interval) != nil {
			return nil
		}
	}
}
