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
// # One transaction per event
//
// Engine.Process runs each event in one transaction (crdb.ExecuteInTx, which retries
// SQLSTATE 40001): lock the journal row, return if it is no longer RECEIVED/FAILED
// (a duplicate delivery), check ordering, run the handler inside a savepoint, record
// the outcome. A handler error rolls back to the savepoint, so its partial effects
// vanish while the failure itself (attempts, last_error, next_attempt_at) is recorded.
// A retryable error (40001) is not a handler failure: it restarts the whole transaction.
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
