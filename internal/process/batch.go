package process

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/journal"
)

// claimFunc locks the entries of one batch inside its transaction.
type claimFunc func(ctx context.Context, tx pgx.Tx) ([]journal.Head, error)

// batchResult is what one committed batch did.
type batchResult struct {
	claimed []journal.Head
	outs    map[string]Outcome
	// next holds the aggregates of the batch left with a head that is not parked
	// (journal.SettleHeads): the only ones chain has anything to look for in.
	next map[string]bool
}

// maxConflicts bounds the retries of a batch that keeps hitting 40001.
const maxConflicts = 10

// runBatch is one processing transaction: claim and lock the batch, run each runnable
// event's handler in its own savepoint in sequence order, record every outcome with one
// statement, commit once. Events of an aggregate whose earlier event did not complete
// (in this batch or outside it) are deferred; FAILED events not yet due are left. Any
// error means nothing of the batch was recorded.
func (e *Engine) runBatch(ctx context.Context, claim claimFunc, setBased bool) (batchResult, error) {
	res := batchResult{outs: map[string]Outcome{}}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return res, ctx.Err()
	}
	defer func() { <-e.sem }()
	start := time.Now()

	tx, err := e.db.BeginTx(ctx, e.txOptions())
	if err != nil {
		return res, fmt.Errorf("beginning transaction: %w", err)
	}
	defer func() {
		// A no-op after Commit. Not bound to ctx, which may be why we are here.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := e.setTimeouts(ctx, tx); err != nil {
		return res, err
	}
	heads, err := claim(ctx, tx)
	if err != nil {
		return res, err
	}
	if len(heads) == 0 {
		return res, nil
	}
	sort.SliceStable(heads, func(a, b int) bool { return heads[a].SequenceNo < heads[b].SequenceNo })

	held := map[string]bool{} // aggregates whose earlier event in this batch did not complete
	recs := make([]journal.Outcome, 0, len(heads))
	herrs := map[string]error{}
	applied, err := e.runSetBased(ctx, tx, heads, setBased)
	if err != nil {
		return res, err
	}
	for _, h := range heads {
		ev := Event{ID: h.ID, Type: h.EventType, AggregateID: h.AggregateID, SequenceNo: h.SequenceNo,
			Tag: h.Tag, Payload: h.Payload, Attempt: h.Attempts + 1}
		var out Outcome
		switch {
		case applied[h.ID].ok:
			out = OutcomeProcessed
			a := applied[h.ID]
			recs = append(recs, journal.Outcome{ID: ev.ID, Status: out.Status(), StartedAt: a.started, Took: a.took, Runs: 1})
		case h.Blocked || held[h.AggregateID]:
			out = OutcomeDeferred
		case h.Status == journal.StatusFailed && !h.Due:
			out = OutcomeNotDue
		default:
			pol := e.policy(ev.Type)
			started, runs := time.Now(), 1
			sctx, span := e.startEventSpan(ctx, h, ev.Attempt)
			herr, err := e.runHandler(sctx, tx, ev)
			// Immediate retries: the same attempt, at once, for flukes. A rejection is
			// final and a missing handler will not appear in the meantime.
			for i := 0; err == nil && herr != nil && i < pol.immediate() && ctx.Err() == nil &&
				!errors.Is(herr, ErrRejected) && !errors.Is(herr, ErrNoHandler); i++ {
				e.log.Debug("handler failed, retrying at once", "id", ev.ID, "type", e.reg.MetricLabel(ev.Type),
					"attempt", ev.Attempt, "retry", i+1, "error", herr)
				herr, err = e.runHandler(sctx, tx, ev)
				runs++
			}
			if err != nil {
				endEventSpan(span, "", herr, err)
				var to *timeoutError
				if errors.As(err, &to) {
					to.ev = ev
				}
				return res, err
			}
			out = e.outcome(ev, herr)
			endEventSpan(span, out, herr, nil)
			r := journal.Outcome{ID: ev.ID, Status: out.Status(), StartedAt: started, Took: time.Since(started), Runs: runs}
			if herr != nil {
				r.Error = herr.Error()
				herrs[ev.ID] = herr
			}
			if out == OutcomeFailed {
				r.Backoff = pol.Backoff(ev.Attempt)
			}
			recs = append(recs, r)
		}
		res.outs[h.ID] = out
		if !out.completes() {
			held[h.AggregateID] = true
		}
	}
	if err := e.recordOutcomes(ctx, tx, recs); err != nil {
		return res, err
	}
	next, err := e.settleHeads(ctx, tx, heads, recs)
	if err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("committing a processing batch: %w", err)
	}
	res.claimed, res.next = heads, next
	took := time.Since(start).Seconds()
	for _, h := range heads {
		out := res.outs[h.ID]
		typ := e.reg.MetricLabel(h.EventType) // bounded: logs and metrics never carry a payload's made-up type
		e.m.ProcessSeconds.WithLabelValues(typ).Observe(took)
		e.m.Processed.WithLabelValues(typ, string(out)).Inc()
		e.logOutcome(h.ID, typ, h.Attempts+1, out, herrs[h.ID])
	}
	return res, nil
}

// recordOutcomes records a batch's outcomes in tx with one statement. When the database
// refuses them for a deterministic reason (not availability), it records them one by
// one instead, and an outcome refused alone is recorded with a fixed message in place
// of the handler's text: the batch commits, every attempt counts, no handler runs
// again. (Rolling the batch back instead would re-run all its handlers, and the same
// refusal would do it again at every sweep: issue 18, 1,023 handler calls for 200
// events.) Only an outcome that carries no text, PROCESSED, can still be refused; that
// is the schema's fault, and the batch fails as a whole.
func (e *Engine) recordOutcomes(ctx context.Context, tx pgx.Tx, recs []journal.Outcome) error {
	err := journal.RecordOutcomesGuarded(ctx, tx, recs)
	if err == nil || len(recs) == 0 || journal.IsUnavailable(err) || ctx.Err() != nil {
		return err
	}
	e.log.Warn("the database refused a batch's outcomes; recording them one by one", "events", len(recs), "error", err)
	for _, r := range recs {
		err := journal.RecordOutcomesGuarded(ctx, tx, []journal.Outcome{r})
		if err == nil {
			continue
		}
		if journal.IsUnavailable(err) || ctx.Err() != nil || r.Status == journal.StatusProcessed {
			return err
		}
		e.log.Error("the database refused an event's outcome; recording it with a fixed message instead",
			"id", r.ID, "status", r.Status, "error", err, "handler_error", r.Error)
		r.Error = unstorableMessage(err)
		if err := journal.RecordOutcomesGuarded(ctx, tx, []journal.Outcome{r}); err != nil {
			return fmt.Errorf("recording event %s with a fixed message: %w", r.ID, err)
		}
	}
	return nil
}

// settleHeads moves the aggregates of the recorded outcomes on to their next head
// (journal.SettleHeads), in the batch's transaction, and returns those left with a
// head that is not parked. A DEAD event of a type that runs on (Registry.RunOnDead) is
// skipped first, so that it does not park its aggregate.
func (e *Engine) settleHeads(ctx context.Context, tx pgx.Tx, heads []journal.Head, recs []journal.Outcome) (map[string]bool, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	// recs follow heads' order (runBatch records in sequence order), so one pass
	// usually pairs them, without a map (this runs for every batch).
	var runOn []string
	aggs := make([]string, 0, len(recs))
	i := 0
	for _, r := range recs {
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
		if r.Status == journal.StatusDead && e.reg.runsOnDead(h.EventType) {
			runOn = append(runOn, r.ID)
		}
	}
	if err := journal.SkipDead(ctx, tx, runOn, journal.RunOnSkipper); err != nil {
		return nil, err
	}
	return journal.SettleHeads(ctx, tx, aggs)
}

func (e *Engine) logOutcome(id, typ string, attempt int, out Outcome, err error) {
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

// batch runs a batch until it commits. A 40001 (from the database or a handler) retries
// it whole, and once it keeps conflicting, with half as many events each time. A
// handler past its deadline is recorded FAILED in a transaction of its own and the
// batch runs again without it (it is no longer due). claim gets the current size limit;
// batch returns the limit it ended with.
func (e *Engine) batch(ctx context.Context, limit int, claim func(limit int) claimFunc) (batchResult, int, error) {
	conflicts := 0
	timedOut := map[string]Outcome{}
	setBased := true
	for {
		res, err := e.runBatch(ctx, claim(limit), setBased)
		if err == nil {
			for id, o := range timedOut {
				res.outs[id] = o
			}
			return res, limit, nil
		}
		var to *timeoutError
		switch {
		case errors.As(err, &to) && to.ev.ID == "" && setBased && ctx.Err() == nil:
			// A set-based call overran: run the batch again event by event, which finds
			// the culprit and records its timeout.
			setBased = false
			continue
		case errors.As(err, &to) && to.ev.ID != "" && ctx.Err() == nil:
			out, rerr := e.recordTimeout(ctx, to.ev, to)
			if rerr != nil {
				return res, limit, fmt.Errorf("processing event %s: %w", to.ev.ID, rerr)
			}
			timedOut[to.ev.ID] = out
			typ := e.reg.MetricLabel(to.ev.Type)
			e.m.Processed.WithLabelValues(typ, string(out)).Inc()
			e.logOutcome(to.ev.ID, typ, to.ev.Attempt, out, to)
			continue
		case isRetryable(err) && ctx.Err() == nil:
			conflicts++
			if conflicts > maxConflicts {
				return res, limit, fmt.Errorf("processing batch: still conflicting after %d tries: %w", maxConflicts, err)
			}
			if conflicts >= 2 && limit > 1 {
				limit /= 2
			}
			e.m.Processed.WithLabelValues(OtherType, "conflict").Inc()
			t := time.NewTimer(time.Duration(rand.N(conflicts*10+1)) * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return res, limit, ctx.Err()
			case <-t.C:
			}
			continue
		}
		return res, limit, fmt.Errorf("processing batch: %w", err)
	}
}

// ProcessDue processes one batch of due aggregate heads (see journal.ClaimHeads): up
// to limit of them, skipping entries other workers hold. aggregates, when not nil,
// restricts it to the first limit of those aggregates (fewer if the batch conflicts),
// and then it waits for rows other transactions hold. It returns the outcomes by id
// and the entries it claimed.
func (e *Engine) ProcessDue(ctx context.Context, grace time.Duration, limit int, aggregates []string) (map[string]Outcome, []journal.Head, error) {
	res, _, err := e.processDue(ctx, grace, limit, aggregates)
	return res.outs, res.claimed, err
}

// processDue is ProcessDue, and when aggregates is not nil, how many of them, from the
// front, the batch that committed tried: no more than its size limit, which is limit
// unless conflicts halved it (batch). The others were not looked at; chain gives them
// to its next batch.
func (e *Engine) processDue(ctx context.Context, grace time.Duration, limit int, aggregates []string) (batchResult, int, error) {
	res, l, err := e.batch(ctx, limit, func(l int) claimFunc {
		aggs := aggregates
		if aggs != nil {
			aggs = aggs[:min(l, len(aggs))]
		}
		// Picked here, on the pool, before the batch's transaction begins (see
		// journal.PickHeads); batch calls this again before every try.
		picked, err := journal.PickHeads(ctx, e.db, grace, l, aggs)
		return func(ctx context.Context, tx pgx.Tx) ([]journal.Head, error) {
			if err != nil {
				return nil, err
			}
			return journal.LockPicked(ctx, tx, picked, grace, l, aggregates == nil)
		}
	})
	return res, min(l, len(aggregates)), err
}

// Process processes one event, then the successors of its aggregate it unblocked.
func (e *Engine) Process(ctx context.Context, id string) (Outcome, error) {
	outs, err := e.ProcessBatch(ctx, []Item{{ID: id}})
	if err != nil {
		return "", err
	}
	return outs[0], nil
}

// ProcessBatch processes items and returns their outcomes in the same order. Items are
// split by aggregate into at most Concurrency parts that run in parallel, each in
// transactions of up to BatchSize events; within a part, each aggregate's events run in
// sequence order. Then the aggregates move on: their next pending events, unblocked by
// this batch or by an earlier delivery, are processed at once too.
// The error is non-nil when some outcome could not be recorded (database unavailable):
// the caller must have the batch redelivered; everything already recorded stays, and
// redelivery turns it into no-ops.
func (e *Engine) ProcessBatch(ctx context.Context, items []Item) ([]Outcome, error) {
	outcomes := make([]Outcome, len(items))
	if len(items) == 0 {
		return outcomes, nil
	}
	parts := Parts(len(items), e.cfg.Concurrency)
	byPart := make([][]string, parts)
	seen := map[string]bool{}
	for _, it := range items {
		if seen[it.ID] {
			continue
		}
		seen[it.ID] = true
		key := it.AggregateID
		if key == "" {
			key = it.ID
		}
		h := fnv.New32a()
		_, _ = h.Write([]byte(key))
		p := int(h.Sum32() % uint32(parts))
		byPart[p] = append(byPart[p], it.ID)
	}
	var (
		mu    sync.Mutex
		outs  = map[string]Outcome{}
		aggOf = map[string]string{}
		next  = map[string]bool{} // aggregates a batch left with a head not parked
		errs  []error
		wg    sync.WaitGroup
	)
	merge := func(res batchResult) {
		mu.Lock()
		defer mu.Unlock()
		for id, out := range res.outs {
			outs[id] = out
		}
		for agg := range res.next {
			next[agg] = true
		}
		for _, h := range res.claimed {
			aggOf[h.ID] = h.AggregateID
		}
	}
	for _, ids := range byPart {
		if len(ids) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			limit := e.cfg.BatchSize
			for len(ids) > 0 {
				var n int
				res, l, err := e.batch(ctx, limit, func(l int) claimFunc {
					n = min(l, len(ids))
					chunk := ids[:n]
					return func(ctx context.Context, tx pgx.Tx) ([]journal.Head, error) {
						return journal.LockBatch(ctx, tx, chunk)
					}
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				merge(res)
				limit, ids = l, ids[n:]
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return outcomes, err
	}
	// Move on the aggregates whose delivered events completed. A no-op counts too: the
	// event was completed elsewhere, but whoever did may have failed to go on to its
	// successors (database lost right after the commit). Any delivery thus drives its
	// aggregate forward.
	moving := map[string]bool{}
	for _, it := range items {
		if _, pending := outs[it.ID]; !pending && it.AggregateID != "" {
			moving[it.AggregateID] = true
		}
	}
	for id, o := range outs {
		if o.completes() && next[aggOf[id]] {
			moving[aggOf[id]] = true
		}
	}
	for id, o := range outs {
		if o == OutcomeFailed || o == OutcomeNotDue {
			delete(moving, aggOf[id]) // its retry is the sweeper's, after the backoff
		}
	}
	if err := e.chain(ctx, moving, outs); err != nil {
		return outcomes, err
	}
	for i, it := range items {
		if o, ok := outs[it.ID]; ok {
			outcomes[i] = o
		} else {
			outcomes[i] = OutcomeNoop // not pending: a duplicate delivery, or unknown
			e.m.Processed.WithLabelValues(OtherType, string(OutcomeNoop)).Inc()
		}
	}
	return outcomes, nil
}

// chain processes the due heads of aggregates, batch after batch, for as long as
// batches complete events, up to maxChain events. A batch takes up to its size limit
// of the aggregates (BatchSize, less after conflicts); those it did not take go to the
// next batch, ahead of the ones it moved on. Nothing else would move them: their
// delivery was answered once this returns, and the sweeper takes a RECEIVED head only
// after its grace.
func (e *Engine) chain(ctx context.Context, aggs map[string]bool, outs map[string]Outcome) error {
	list := make([]string, 0, len(aggs))
	for a := range aggs {
		list = append(list, a)
	}
	sort.Strings(list)
	for n := 0; n < maxChain && len(list) > 0; {
		res, took, err := e.processDue(ctx, 0, e.cfg.BatchSize, list)
		if err != nil {
			return err
		}
		o, heads := res.outs, res.claimed
		next := slices.Clone(list[took:])
		for _, h := range heads {
			outs[h.ID] = o[h.ID]
			if o[h.ID].completes() && res.next[h.AggregateID] {
				next = append(next, h.AggregateID)
			}
		}
		n += len(heads)
		list = next
	}
	return nil
}

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

// Kick tells the engine's workers (Sweeper.Run) that new entries were journaled, so
// that they process them soon (Config.KickLinger) instead of at their next interval:
// the push that replaces a changefeed on PostgreSQL. It never blocks.
func (e *Engine) Kick() { e.wake.kick() }

// runSetBased applies, through BatchHandler.HandleBatch, the events of the batch that
// are ready to run at once (due, no pending predecessor, the first of their aggregate in
// the batch), one call per event type with at least two of them. It returns the events
// it applied; the others (and every event of a call that did not apply all of them
// cleanly, which is rolled back) are left to the per-event path.
// setRun is an event applied by a set-based call, and when and how long the call ran.
type setRun struct {
	ok      bool
	started time.Time
	took    time.Duration
}

func (e *Engine) runSetBased(ctx context.Context, tx pgx.Tx, heads []journal.Head, enabled bool) (map[string]setRun, error) {
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
			SequenceNo: h.SequenceNo, Tag: h.Tag, Payload: h.Payload, Attempt: h.Attempts + 1})
	}
	for _, typ := range types {
		evs := byType[typ]
		if len(evs) < 2 {
			continue
		}
		bh, _ := e.reg.batchHandler(typ)
		if _, err := tx.Exec(ctx, "SAVEPOINT inboxd_set"); err != nil {
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
		if clean {
			if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT inboxd_set"); err == nil {
				for _, ev := range evs {
					applied[ev.ID] = setRun{ok: true, started: started, took: time.Since(started)}
				}
				continue
			} else if isRetryable(err) {
				return nil, err
			}
		}
		if notTheHandlers(herr) && txAborted(tx) {
			return nil, herr
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT inboxd_set"); err != nil {
			return nil, fmt.Errorf("rolling back a set-based call: %w", err)
		}
	}
	return applied, nil
}
