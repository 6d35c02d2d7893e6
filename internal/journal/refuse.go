package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/sqlbound"
)

// IsUnavailable reports whether err says the database could not do the work right now
// (or is set up wrong), as opposed to refusing the rows themselves. Such errors are
// retried as they are, with the batch unacknowledged; every other database error is
// deterministic and makes Ingest isolate and quarantine the rows it refuses.
//
// Unavailable: any error that is not a PostgreSQL error (connection loss, timeouts,
// a cancelled context: the row was never judged), and these SQLSTATE classes:
//
//	08 connection exception        25 invalid transaction state (e.g. a read-only standby)
//	28 invalid authorization       3D invalid catalog name (no such database)
//	40 transaction rollback        42 syntax error or access rule violation (schema, privileges)
//	53 insufficient resources      55 object not in prerequisite state (e.g. lock not available)
//	57 operator intervention       58 system error
//	XX internal error (CockroachDB's ambiguous result XXUUU included)
//
// Classes 42, 28 and 3D are about the database's setup, not the message: quarantining
// every message because a migration is missing would be worse than waiting for the fix.
//
// One class-08 error is deterministic: CockroachDB's 08P01 for a client message over
// sql.conn.max_read_buffer_message_size (sqlbound.IsMessageTooLarge). The same statement
// is refused again however often it is retried, so it is split, never waited out.
// https://www.postgresql.org/docs/15/errcodes-appendix.html
// https://www.cockroachlabs.com/docs/stable/transaction-retry-error-reference
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return true
	}
	if sqlbound.IsMessageTooLarge(err) {
		return false
	}
	switch pgErr.Code[:2] {
	case "08", "25", "28", "3D", "40", "42", "53", "55", "57", "58", "XX":
		return true
	}
	return false
}

// CodeLicenseThrottled is CockroachDB's XXC02 (pgcode.CCLValidLicenseRequired). An
// unlicensed multi-node cluster, 7 days after init, refuses every user statement with it
// while more than 5 user transactions are open on the gateway node, implicit one-statement
// transactions included (pkg/server/license/enforcer.go, MaybeFailIfThrottled, called
// for each statement in pkg/sql/conn_executor_exec.go with the node's sql.txns.open).
const CodeLicenseThrottled = "XXC02"

// ThrottledWait is how long a loop waits after CockroachDB's license throttle refused it.
// Retrying at once only adds transactions to a node that counts them; the throttle lifts
// when others finish (or a license key is installed), not sooner for asking.
const ThrottledWait = 10 * time.Second

// IsLicenseThrottled reports CockroachDB's license throttle (XXC02). It is also
// IsUnavailable, so no row is ever quarantined for it; loops wait ThrottledWait before
// trying again, and processing counts no attempt against the events it could not run.
func IsLicenseThrottled(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == CodeLicenseThrottled
}

// maxRefusalDetail bounds the database's message kept in quarantine.detail.
const maxRefusalDetail = 2000

// refusalDetail describes a deterministic database error for quarantine.detail.
func refusalDetail(err error) string {
	var pgErr *pgconn.PgError
	d := err.Error()
	if errors.As(err, &pgErr) {
		d = fmt.Sprintf("database refused the row: SQLSTATE %s: %s", pgErr.Code, pgErr.Message)
		if pgErr.Detail != "" {
			d += " (" + pgErr.Detail + ")"
		}
	}
	return storable(d, maxRefusalDetail) // it may quote the row: cut on a rune, no NUL
}

// ingestIsolating writes entries and bad with one statement; when the database refuses
// it deterministically, it splits the batch in two, in order (so sequence numbers keep
// arrival order), and writes each half the same way, until a refused entry stands alone
// and goes to quarantine. A batch of n with k refused rows costs about 2k·log2(n)
// statements, only on this slow path. An availability error stops it at once: the
// caller acks nothing, and whatever halves were committed collapse on redelivery.
func ingestIsolating(ctx context.Context, db database.DB, entries []Entry, bad []Bad) (Result, error) {
	res, err := ingest(ctx, db, entries, bad)
	if err == nil || IsUnavailable(err) {
		return res, err
	}
	var parts [2]struct {
		entries []Entry
		bad     []Bad
	}
	switch {
	case len(entries) >= 2:
		h := len(entries) / 2
		parts[0].entries, parts[0].bad = entries[:h], bad
		parts[1].entries = entries[h:]
	case len(entries) == 1 && len(bad) > 0:
		parts[0].entries = entries
		parts[1].bad = bad
	case len(entries) == 1:
		return refuse(ctx, db, entries[0], err)
	case len(bad) >= 2:
		h := len(bad) / 2
		parts[0].bad, parts[1].bad = bad[:h], bad[h:]
	default:
		return requarantine(ctx, db, bad[0], err)
	}
	var sum Result
	for _, p := range parts {
		r, err := ingestIsolating(ctx, db, p.entries, p.bad)
		if err != nil {
			return Result{}, err
		}
		sum.Inserted += r.Inserted
		sum.Duplicates += r.Duplicates
		sum.Conflicts += r.Conflicts
		sum.Quarantined += r.Quarantined
		sum.Refused += r.Refused
	}
	return sum, nil
}

// refuse quarantines one entry the database refused, with the raw payload, the
// SQLSTATE and message, and the message's headers. An entry refused as too large for one
// message (the server's limit is below the statement bound) is quarantined too_large
// with the first lastResortBody bytes of its payload.
func refuse(ctx context.Context, db database.DB, e Entry, cause error) (Result, error) {
	if sqlbound.IsMessageTooLarge(cause) {
		b := truncateBody(tooLarge(e, refusalDetail(cause)), lastResortBody)
		b.Headers = nil
		res, err := ingest(ctx, db, nil, []Bad{b})
		if err != nil {
			return Result{}, fmt.Errorf("quarantining an event too large for the database's message limit: %w", err)
		}
		return res, nil
	}
	b := Bad{
		Reason:      message.ReasonDBRefused,
		Detail:      refusalDetail(cause),
		Destination: e.Destination,
		MessageID:   e.MessageID,
		Body:        e.Event.Payload,
	}
	if e.Headers != nil {
		b.Headers = e.Headers()
	}
	b = boundBad(b, len(b.Body)) // headers and texts capped; the payload fit as an entry
	res, err := ingest(ctx, db, nil, []Bad{b})
	if err != nil && !IsUnavailable(err) {
		res, err = requarantine(ctx, db, b, err)
	}
	if err != nil {
		return Result{}, err
	}
	res.Refused = 1
	return res, nil
}

// requarantine is the last resort for a quarantine row the database refuses: the same
// raw body and reason with nothing else that came from outside (headers, message id),
// and the database's complaint as detail. It never loops: if even that is refused the
// error is returned, and it is not an availability error, so the caller's logs say so.
//
// A row refused as too large keeps the first lastResortBody bytes of its body.
func requarantine(ctx context.Context, db database.DB, b Bad, cause error) (Result, error) {
	bare := Bad{Reason: b.Reason, Destination: b.Destination, Body: b.Body, EventID: b.EventID, id: b.id,
		Detail: b.Detail + "; headers dropped: " + refusalDetail(cause)}
	if sqlbound.IsMessageTooLarge(cause) {
		bare = truncateBody(bare, lastResortBody)
	}
	res, err := ingest(ctx, db, nil, []Bad{bare})
	if err != nil {
		return Result{}, fmt.Errorf("quarantining a message the database refused (%s): %w", refusalDetail(cause), err)
	}
	return res, nil
}
