// Package inboxd runs inboxd inside your own Go program, with your own event handlers.
//
// inboxd turns at-least-once delivery (ActiveMQ over STOMP) into exactly-once
// processing: every message lands once in the journal, and each journal event's handler
// runs in the same database transaction that marks the event PROCESSED.
//
// A program that owns its pool, logger and lifetime embeds a Client:
//
//	pool, err := pgxpool.New(ctx, databaseURL)
//	err = inboxd.Migrate(ctx, pool)
//	c, err := inboxd.New(pool, inboxd.Config{Destinations: []string{"/queue/orders"}, Logger: logger})
//	c.Handle("order.placed", inboxd.HandlerFunc(placeOrder))
//	err = c.Run(ctx) // until ctx is cancelled; then a graceful shutdown, and nil
//
// A one-file program can instead register handlers and hand control to the inboxd
// command line (serve, migrate, changefeed, …), package
// github.com/inboxd/inboxd/cmd/inboxd/inboxdcli, which this package does not link:
//
//	func main() {
//		inboxdcli.Register("order.placed", inboxd.HandlerFunc(placeOrder))
//		os.Exit(inboxdcli.Main())
//	}
//
// A handler gets the transaction and the event. It must do its database work in tx
// (so the effect commits with the status change, exactly once), use ev.ID as the
// idempotency key for any effect outside the database, return Reject(err) for input
// that can never succeed, and any other error for a failure worth retrying. It may run
// more than once for one event (transaction retries, replays), so it must not keep
// state outside tx.
package inboxd

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/process"
)

// Event is what a handler sees of a journal entry.
type Event = process.Event

// Handler applies one event's business effect inside the transaction it is given.
type Handler = process.Handler

// HandlerFunc adapts a function to Handler.
type HandlerFunc = process.HandlerFunc

// ErrRejected matches (errors.Is) every error built by Reject.
var ErrRejected = process.ErrRejected

// Reject marks err as a business rejection: the event becomes REJECTED, not retried.
func Reject(err error) error { return process.Reject(err) }

// HandleOption configures how the events of one type are handled (Client.Handle). An
// option stays set until given again.
type HandleOption struct {
	apply func(reg *process.Registry, eventType string)
}

// RetryPolicy is the recoverability policy of an event type: immediate retries, then
// delayed attempts on a doubling schedule, then DEAD. Its zero fields take Config's
// values (ImmediateRetries, MaxAttempts, RetryBaseDelay, RetryMaxDelay); a negative
// ImmediateRetries means none.
type RetryPolicy = process.RetryPolicy

// WithRetryPolicy gives an event type its own recoverability policy, e.g. fewer
// attempts for a type whose handler calls nothing that can be down:
//
//	c.Handle("order.placed", h, inboxd.WithRetryPolicy(inboxd.RetryPolicy{MaxAttempts: 3}))
func WithRetryPolicy(p RetryPolicy) HandleOption {
	return HandleOption{apply: func(reg *process.Registry, eventType string) { reg.SetRetryPolicy(eventType, p) }}
}

// Outgoing is a message a handler emits: Destination ("/queue/x" or "/topic/x"), Body,
// extra STOMP Headers, an optional ID (a UUID; a new one when empty), and an optional
// Group: messages of one group (else of one JMSXGroupID or aggregate-id header) are
// published in emit order.
type Outgoing = outbox.Outgoing

// Emitted is what EmitBatch did with one message: its id, and whether that id was
// already in the outbox (nothing written).
type Emitted = outbox.Emitted

// ErrInvalidOutgoing matches (errors.Is) Emit's error for a message it refuses.
var ErrInvalidOutgoing = outbox.ErrInvalid

// ErrDuplicateOutgoing matches Emit's error for an Outgoing.ID already in the outbox:
// with an ID derived from the event, a handler that runs again can ignore it.
var ErrDuplicateOutgoing = outbox.ErrDuplicateID

// Emit writes a message to the transactional outbox in tx, the handler's processing
// transaction, and returns its id. inboxd publishes it to the broker (persistent,
// confirmed by a receipt) after tx commits, and never if tx rolls back. Delivery is at
// least once: every message carries its id in the "outbox-id" header for the receiver
// to deduplicate; put the same id in the body's "id" for a downstream inboxd.
func Emit(ctx context.Context, tx pgx.Tx, o Outgoing) (string, error) { return outbox.Emit(ctx, tx, o) }

// CloudEvent is an outgoing CloudEvents 1.0 event (ID, Source and Type required), and
// CloudEventMode how it goes on the wire: CloudEventStructured (the JSON-format event as
// body) or CloudEventBinary (cloudEvents_ headers, the data as body).
type (
	CloudEvent     = outbox.CloudEvent
	CloudEventMode = outbox.CEMode
)

// The modes of CloudEventMessage (the CloudEvents AMQP binding's content modes).
const (
	CloudEventStructured = outbox.CEStructured
	CloudEventBinary     = outbox.CEBinary
)

// CloudEventMessage is the Outgoing that carries e to destination in mode, for Emit or
// EmitBatch. Its id is derived from e's source and id, the key a consuming inboxd
// journals it under, so that a handler that runs again emits nothing new.
func CloudEventMessage(destination string, e CloudEvent, mode CloudEventMode) (Outgoing, error) {
	return outbox.CloudEventMessage(destination, e, mode)
}

// EmitBatch is Emit for several messages, in their order, with one round trip: the
// call for a BatchHandler. An invalid message fails it (errors.Is ErrInvalidOutgoing)
// before anything is written; an id already used is reported in Emitted.Duplicate.
func EmitBatch(ctx context.Context, tx pgx.Tx, msgs []Outgoing) ([]Emitted, error) {
	return outbox.EmitBatch(ctx, tx, msgs)
}
