package process

import (
	"context"
	"errors"

	"github.com/cockroachdb/cockroach-go/v2/crdb/crdbpgxv5"
	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/journal"
)

// executeTx is journal.ExecuteTx: crdbpgx.ExecuteTx with a failed COMMIT reported.
func executeTx(ctx context.Context, db crdbpgx.Conn, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	return journal.ExecuteTx(ctx, db, opts, fn)
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
