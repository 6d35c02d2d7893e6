package process

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/txstats"
)

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
	d, err := e.runParts(ctx, split(items, Parts(len(items), e.cfg.Concurrency)))
	if err != nil {
		return outcomes, err
	}
	outs := d.outs
	if err := e.chain(ctx, d.moving(items), outs); err != nil {
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

// delivered is what the batches of a delivery did.
type delivered struct {
	outs  map[string]Outcome // by event id
	aggOf map[string]string  // the aggregate of each claimed event
	next  map[string]bool    // aggregates a batch left with a head not parked
}

// runParts runs the parts of a delivery in parallel, each in transactions of up to
// BatchSize events (batch), and merges what they did. The error joins those of the
// parts that failed.
func (e *Engine) runParts(ctx context.Context, byPart [][]string) (delivered, error) {
	d := delivered{outs: map[string]Outcome{}, aggOf: map[string]string{}, next: map[string]bool{}}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	merge := func(res batchResult) {
		mu.Lock()
		defer mu.Unlock()
		for id, out := range res.outs {
			d.outs[id] = out
		}
		for agg := range res.next {
			d.next[agg] = true
		}
		for _, h := range res.claimed {
			d.aggOf[h.ID] = h.AggregateID
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
				res, l, err := e.batch(ctx, limit, func(_ context.Context, l int) claimFunc {
					n = min(l, len(ids))
					return claimDelivered(ids[:n])
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
	return d, errors.Join(errs...)
}

// Process processes one event, then the successors of its aggregate it unblocked.
func (e *Engine) Process(ctx context.Context, id string) (Outcome, error) {
	outs, err := e.ProcessBatch(ctx, []Item{{ID: id}})
	if err != nil {
		return "", err
	}
	return outs[0], nil
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
	res, l, err := e.batch(ctx, limit, func(ctx context.Context, l int) claimFunc {
		return e.claimDue(ctx, grace, l, aggregates)
	})
	return res, min(l, len(aggregates)), err
}

// batchResult is what one committed batch did.
type batchResult struct {
	claimed []journal.Head
	outs    map[string]Outcome
	// next holds the aggregates of the batch left with a head that is not parked
	// (journal.SettleHeads): the only ones chain has anything to look for in.
	next map[string]bool
	// tried is how many entries the try claimed, committed or not (0: it failed before
	// its claim returned).
	tried int
}

// maxConflicts bounds the retries of a batch that keeps hitting 40001, paced by
// backoff.Conflict (about 2.5 s in all). A pause of at most 10 ms per conflict so far
// gave up within about 300 ms under make test's load (TestMetricLabelsAndLogsAreBounded
// in the profile: "still conflicting after 10 tries").
const maxConflicts = 10

// batch runs a batch until it commits. A 40001 (from the database or a handler) retries
// it whole, and once it keeps conflicting, with half as many events as the try that
// conflicted claimed, each time (not half its size limit: a batch of 23 events under a
// limit of 100 ran whole four times, some 11 s each on a loaded machine, before halving
// reached it, and was cancelled by SSI each time a short batch committed beside it). A
// handler past its deadline is recorded FAILED in a transaction of its own and the
// batch runs again without it (it is no longer due). claim gets the current size limit;
// batch returns the limit it ended with. claim gets the try's context.
func (e *Engine) batch(ctx context.Context, limit int, claim func(ctx context.Context, limit int) claimFunc) (batchResult, int, error) {
	conflicts := 0
	pause := backoff.Waiter{Policy: backoff.Conflict}
	timedOut := map[string]Outcome{}
	setBased := true
	for {
		// Each try is one processing transaction, its pick included, for txstats.
		tctx := txstats.Start(ctx)
		res, err := e.runBatch(tctx, claim(tctx, limit), setBased)
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
			e.logOutcome(to.ev.ID, to.ev.Type, to.ev.Attempt, out, to)
			continue
		case isRetryable(err) && ctx.Err() == nil:
			conflicts++
			if conflicts > maxConflicts {
				return res, limit, fmt.Errorf("processing batch: still conflicting after %d tries: %w", maxConflicts, err)
			}
			if conflicts >= 2 && limit > 1 {
				if res.tried > 0 {
					limit = min(limit, res.tried)
				}
				limit = max(1, limit/2)
			}
			e.m.Processed.WithLabelValues(OtherType, "conflict").Inc()
			if err := pause.Wait(ctx); err != nil {
				return res, limit, err
			}
			continue
		}
		return res, limit, fmt.Errorf("processing batch: %w", err)
	}
}

// runBatch is one processing transaction, its stages in order: claim and lock the
// batch (claim), run each runnable event's handler in its own savepoint in sequence
// order (run), record every outcome with one statement (record), commit once. Any
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

	// The statement timeouts are sent with BEGIN, in one round trip (beginBatchSQL).
	opts := e.txOptions()
	opts.BeginQuery = e.beginBatchSQL()
	tx, err := e.db.BeginTx(ctx, opts)
	if err != nil {
		return res, fmt.Errorf("beginning transaction: %w", err)
	}
	defer func() {
		// A no-op after Commit. Not bound to ctx, which may be why we are here.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	heads, err := claim(ctx, tx)
	if err != nil {
		return res, err
	}
	if len(heads) == 0 {
		return res, nil
	}
	res.tried = len(heads)
	sort.SliceStable(heads, func(a, b int) bool { return heads[a].SequenceNo < heads[b].SequenceNo })

	r, err := e.run(ctx, tx, heads, setBased)
	res.outs = r.outs
	if err != nil {
		return res, err
	}
	next, err := e.record(ctx, tx, heads, r.recs)
	if err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("committing a processing batch: %w", err)
	}
	res.claimed, res.next = heads, next
	e.observe(heads, time.Since(start), r)
	return res, nil
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

// timeoutStatements bound every statement of a processing transaction on the server
// too, so that a statement stuck on a lock or a runaway query ends even if the client
// is gone: by HandlerTimeout, but never below defaults.MinStatementTimeout, since the
// engine's own statements run under it too (a handler's own deadline is its context's).
// SET LOCAL lasts until the transaction ends and is accepted by PostgreSQL and
// CockroachDB alike (https://www.cockroachlabs.com/docs/stable/set-vars#set-local).
func (e *Engine) timeoutStatements() []string {
	ms := max(e.cfg.HandlerTimeout, defaults.MinStatementTimeout).Milliseconds()
	out := []string{"SET LOCAL statement_timeout = " + strconv.FormatInt(ms, 10)}
	if e.cfg.Dialect == database.CockroachDB {
		// Under SERIALIZABLE, CockroachDB's FOR UPDATE locks are best-effort by default:
		// a lease transfer, split or merge can drop them before the commit, and a second
		// worker could then claim an entry this one holds (serializability still lets only
		// one of them commit, so database effects stay exactly once, but the handler runs
		// twice). This makes them durable (v23.2+; SKIP LOCKED over replicated locks
		// needs v24.1+, cockroach PR #116776, and database.MinVersion is v24.1).
		// https://www.cockroachlabs.com/docs/stable/known-limitations#select-for-update-limitations
		// https://github.com/cockroachdb/cockroach/pull/107749 (the session variable)
		out = append(out, "SET LOCAL enable_durable_locking_for_serializable = on")
	}
	return out
}

// beginBatchSQL begins a processing batch's transaction and sets its timeouts
// (timeoutStatements) in one simple query, one round trip: a batch at a moderate rate
// holds a few events, and its round trips are much of its cost. The statements after
// BEGIN run inside the transaction it opens, on both databases
// (https://www.postgresql.org/docs/15/protocol-flow.html#PROTOCOL-FLOW-MULTI-STATEMENT).
func (e *Engine) beginBatchSQL() string {
	begin := "BEGIN"
	if e.txOptions().IsoLevel == pgx.Serializable {
		begin = "BEGIN ISOLATION LEVEL SERIALIZABLE"
	}
	stmts := append([]string{begin}, e.timeoutStatements()...)
	if e.cfg.Dialect != database.CockroachDB && e.isolation.Load() != isoReadCommitted {
		// Not when the engine knows its transactions run READ COMMITTED
		// (readCommitted): then it would only cost a statement.
		stmts = append(stmts, serializableIndexScansSQL)
	}
	return strings.Join(stmts, "; ")
}

// serializableIndexScansSQL turns sequential scans off for the rest of a processing
// transaction on PostgreSQL when it runs SERIALIZABLE (a database whose
// default_transaction_isolation says so), and does nothing under READ COMMITTED. A
// sequential scan takes a predicate lock on the whole table
// (https://www.postgresql.org/docs/15/transaction-iso.html#XACT-SERIALIZABLE), and the
// planner chooses one for the claim's key lookups while the journal is small: every
// processing transaction then read all of the journal for SSI, any other batch's settle
// conflicted with it, and a long batch was cancelled at its own settle, as a pivot, each
// time a short one committed beside it.
const serializableIndexScansSQL = `SELECT set_config('enable_seqscan', 'off', true) WHERE current_setting('transaction_isolation') = 'serializable'`

// setTimeouts runs timeoutStatements in tx: for a transaction crdb's ExecuteTx begins,
// after its restart savepoint, whose rollback would undo them, on every try.
func (e *Engine) setTimeouts(ctx context.Context, tx pgx.Tx) error {
	for _, stmt := range e.timeoutStatements() {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("setting the transaction's timeouts (%s): %w", stmt, err)
		}
	}
	return nil
}

// isRetryable reports a transaction conflict the whole transaction must be retried on
// (the codes crdb.ExecuteInTx retries). Such an error from a handler is not the
// handler's failure and must not be recorded as FAILED.
func isRetryable(err error) bool {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState() == "40001" || e.SQLState() == "CR000"
	}
	return false
}

// notTheHandlers reports an error a handler returned that says nothing about the event
// when its statement in the batch's transaction failed with it (callers check txAborted):
// a conflict the whole transaction must retry (isRetryable), or CockroachDB's license
// throttle (journal.IsLicenseThrottled), which refuses any statement while too many
// transactions are open. Either aborts the batch and counts no attempt, so that a
// throttled cluster never turns events DEAD.
func notTheHandlers(err error) bool {
	return isRetryable(err) || journal.IsLicenseThrottled(err)
}

// txAborted reports whether tx's own statements failed: the server said the
// transaction block is failed ('E' in ReadyForQuery), which on CockroachDB is also the
// state a retry error leaves a transaction in (pkg/sql/conn_executor.go, stateAborted).
// A 40001 a handler returns while its transaction is fine came from somewhere else
// (another database it called): that is the handler's failure, not this batch's conflict.
// https://www.postgresql.org/docs/15/protocol-message-formats.html (ReadyForQuery)
func txAborted(tx pgx.Tx) bool { return tx.Conn().PgConn().TxStatus() == 'E' }
