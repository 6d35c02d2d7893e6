package process

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/cockroach-go/v2/crdb"
	"github.com/cockroachdb/cockroach-go/v2/crdb/crdbpgxv5"
	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/journal"
)

// executeTx is crdbpgx.ExecuteTx with one difference: a failed COMMIT is reported.
//
// crdb.ExecuteInTx commits with RELEASE SAVEPOINT cockroach_restart and ignores the
// error of the COMMIT that follows, which is right on CockroachDB (RELEASE of that
// savepoint is the commit) but not on PostgreSQL, where RELEASE is an ordinary
// savepoint release and COMMIT is the commit: a connection lost at that moment would be
// reported as success, and the webhook would answer 2xx for an outcome never recorded.
// Reporting it costs CockroachDB nothing worse than a redelivery, which is a no-op.
func executeTx(ctx context.Context, db crdbpgx.Conn, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	a := &commitCheckingTx{tx: tx}
	if err := crdb.ExecuteInTx(ctx, a, func() error { return fn(tx) }); err != nil {
		return err
	}
	if a.commitErr != nil {
		return fmt.Errorf("committing: %w", a.commitErr)
	}
	return nil
}

type commitCheckingTx struct {
	tx        pgx.Tx
	commitErr error
}

func (t *commitCheckingTx) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := t.tx.Exec(ctx, sql, args...)
	return err
}

func (t *commitCheckingTx) Commit(ctx context.Context) error {
	t.commitErr = t.tx.Commit(ctx)
	return t.commitErr
}

func (t *commitCheckingTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

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
