// Package process turns journal entries into business effects, exactly once.
//
// # Handlers
//
// Business logic plugs in as a Handler registered by event type on a Registry:
//
//	reg := process.NewRegistry()
//	reg.Register("registration", registration.Handler)
//	reg.Register("payout", process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
//		if invalid(ev.Payload) {
//			return process.Reject(errors.New("amount must be positive")) // REJECTED, never retried
//		}
//		_, err := tx.Exec(ctx, `INSERT INTO payouts (id, ...) VALUES ($1, ...) ON CONFLICT (id) DO NOTHING`, ev.ID)
//		return err // non-nil: FAILED, retried with backoff, DEAD after MaxAttempts
//	}))
//
// A handler writes its effects through tx only; they commit in the same transaction
// that marks the entry PROCESSED, so an effect and its status can never disagree. A
// handler that touches anything outside the database must use Event.ID as the
// idempotency key there: a transaction can be retried, and a crash between the
// external call and the commit leads to a second attempt.
//
// # Batches
//
// Events are processed many per transaction. A batch claims and locks its events in
// one statement (journal.ClaimHeads: due aggregate heads, SKIP LOCKED; or, for a
// changefeed delivery, journal.LockBatch: the delivered ids), opening the handlers'
// first savepoint in the same round trip; runs each handler in its own savepoint in
// sequence order; settles the batch, every outcome, the attempts worth a history row
// and the aggregates' next heads, with one statement after the head rows' lock, in one
// more round trip (journal.Settle); and commits once. A handler error (or panic) rolls
// back to its savepoint, so its partial effects vanish while the failure itself
// (attempts, last_error, next_attempt_at) is recorded with the others. A handler that
// succeeded leaves its savepoint open: the COMMIT commits it (txstats counts what a
// processing transaction sends; TestProcessingStatementsPerTransaction bounds it). A conflict of the batch's
// own transaction (40001 that left it aborted) is not a handler failure: the whole
// batch runs again, and with half as many events once it keeps conflicting. A 40001 a
// handler returns while the transaction is fine came from elsewhere (another database
// it called) and is its failure, like any error.
//
// Text from handlers (errors, panic values) is made storable before it reaches SQL:
// valid UTF-8, no NUL, at most 4,000 bytes cut on a rune boundary. Should the database
// still refuse a batch's outcomes, they are recorded one by one, and the refused one
// with a fixed message: every attempt is recorded and no handler runs twice for it.
//
// On CockroachDB every batch is one serializable transaction over up to BatchSize
// rows: the larger the batch, the more likely two batches (or a batch and an operator
// action) touch the same rows and one of them restarts, redoing all its handlers.
// Heads of distinct aggregates claimed with SKIP LOCKED rarely collide, so the default
// of 100 keeps the commit cost per event low; lower INBOXD_PROCESS_BATCH_SIZE when
// inboxd_process_outcomes_total{outcome="conflict"} grows, or when handlers are slow
// (a batch holds its rows' locks until its last handler ends).
//
// The code reads in the order of a batch's stages: batch.go has the entry points
// (ProcessBatch, ProcessDue) and the transaction around a batch, which claims its
// events (claim.go), runs their handlers (run.go), records the outcomes (record.go),
// and commits; then the aggregates move on to their next events (chain.go).
//
// # Recoverability
//
// A failing handler is retried at once, in the same transaction, up to
// RetryPolicy.ImmediateRetries times: flukes never show. Then the attempt is recorded
// (FAILED, with its error) and retried after BaseBackoff·2^(n−1), at most MaxBackoff,
// ±10%, until MaxAttempts attempts failed and the event is DEAD. The defaults
// (DefaultRetryPolicy: 2 immediate retries, 1 s doubling to 10 min, 40 attempts) keep
// an event alive for about 5 hours of failures. Config sets the policy for every type,
// Registry.SetRetryPolicy for one. Every recorded attempt is also kept in the attempt
// history (journal_attempt), written in the same round trip as the outcome, but for a
// PROCESSED attempt whose handler ran once: the journal row holds that one.
//
// # Tracing
//
// Each event a handler runs for gets an OpenTelemetry span ("process <type>", kind
// consumer, from Config.TracerProvider, else otel's global provider): a child of the
// W3C trace context its message carried (journal.trace_context), else of whatever span
// ctx holds. The handler's ctx holds that span, so a handler's own spans nest under it
// and outbox.Emit gives the messages it emits its traceparent. Immediate retries share
// the span; every recorded attempt has its own. A BatchHandler call has one span linked
// to the traces of its events (a span has one parent).
//
// # Ordering
//
// Events of one aggregate (journal.aggregate_id) are applied in journal.sequence_no
// order, which is ingest order, which is broker order. An event is deferred (left
// untouched) while an earlier event of its aggregate is RECEIVED or FAILED; when an
// event completes, the engine at once tries the next pending event of its aggregate,
// so a deferred event does not wait for the sweeper. DEAD and REJECTED predecessors do
// not block: they are terminal until an operator acts, and blocking on them would
// stall the aggregate indefinitely on one bad event. Handlers of later events must
// therefore cope with a predecessor whose effect never happened (typically by
// rejecting), and an operator retry of a DEAD event applies it after its successors.
//
// Events of different aggregates run in parallel on a bounded pool (Config.Concurrency).
//
// # Sweeper
//
// Sweeper.Run retries due FAILED entries and picks up RECEIVED entries the changefeed
// has not delivered within a grace period (PostgreSQL has no changefeed at all; with
// grace 0 the sweeper alone drives the pipeline). An entry is claimed by the row lock
// of the transaction that processes it (FOR UPDATE SKIP LOCKED), so several inboxd
// instances can sweep one database, and a dead instance's entries are free as soon as
// the database ends its transactions: there is no lease to wait out.
//
// # Deadlines
//
// Each handler runs under Config.HandlerTimeout, which is also the transaction's
// statement_timeout. An overrun is a failed attempt, recorded in a transaction of its
// own. A handler that ignores its context is abandoned a second later: its
// transaction's connection is closed, so the database rolls it back and frees the row,
// and the worker moves on. Nothing of an abandoned transaction is ever recorded.
package process
