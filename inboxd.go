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
// idempotency key for any effect outside the database (ev.Key is the id the publisher sent), return Reject(err) for input
// that can never succeed, and any other error for a failure worth retrying. It may run
// more than once for one event (transaction retries, replays), so it must not keep
// state outside tx.
//
// Package github.com/inboxd/inboxd/inboxdtest tests handlers: a migrated database per
// test, a handler run in inboxd's own processing transaction with its outcomes and
// emitted messages, and helpers that drive a Client through the real broker.
package inboxd

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/eventctx"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/process"
)

// The types below are defined here, where go doc shows them, and not as aliases: the
// engine below this package keeps mirrors of Event, RetryPolicy, Outgoing, Emitted and
// CloudEvent, converted at the boundary (handler.go) by Go's struct conversion, which
// stops compiling the day a field differs.

// Event is one journal event, as a handler gets it.
type Event struct {
	// ID is the event's journal id: the primary key of its row in the journal table
	// (journal.id) and what GET /journal/{id} answers for. It is a UUID: Key itself when
	// Key is a UUID (lower-cased), else JournalID(Key); a CloudEvent's comes from its
	// source and id, not from Key alone. Use it as the idempotency key of any effect
	// outside the database (Key only where its publisher keeps ids unique).
	ID string
	// Key is the event's own id as its publisher sent it, e.g. "ord-0001": the payload's
	// "id" (or the field Config.IDSource names), or a CloudEvent's id. It is empty when
	// the id came from a header (IDSource "header:NAME"), which the journal does not keep.
	// GET /journal/{id} takes it too, except a CloudEvent's (found by ID only).
	Key string
	// Type is the event type (the event-type header, else the payload's "type", else
	// Config.DefaultEventType): the one Client.Handle chose this handler for.
	Type string
	// AggregateID groups events that must be processed in order: the payload's
	// "aggregateId", else the aggregate-id header, else the event id.
	AggregateID string
	// SequenceNo is the event's place in ingest order; the events of one aggregate run
	// in this order.
	SequenceNo int64
	// Tag is where the event came from (the STOMP destination).
	Tag string
	// Payload is the message body as received (a JSON object).
	Payload json.RawMessage
	// Attempt is 1 on the first run, 2 on the first retry, and so on.
	Attempt int
	// Mode tells a first run (ModeLive) from a retry, a replay and a shadow run. A
	// handler that calls out of the database (an email, a payment) skips or changes the
	// call in a shadow run, whose database work is rolled back but whose calls are not.
	Mode EventMode
	// ReplayRun is the id of the replay or shadow run the handler runs in; empty in live
	// runs and retries.
	ReplayRun string
}

// EventMode is how a handler runs (Event.Mode).
type EventMode string

// The modes of Event.Mode.
const (
	// ModeLive is an event's first run.
	ModeLive EventMode = EventMode(eventctx.Live)
	// ModeRetry is a run after a failed attempt, or after an operator's retry.
	ModeRetry EventMode = EventMode(eventctx.Retry)
	// ModeReplay is a run that reprocesses an event for real.
	ModeReplay EventMode = EventMode(eventctx.Replay)
	// ModeShadow is a dry run (Client.ShadowReplay, "inboxd shadow"): everything the
	// handler does in the database is rolled back and nothing it emits is published.
	ModeShadow EventMode = EventMode(eventctx.Shadow)
)

// Handler applies one event's business effect inside tx, the transaction that records
// the event's outcome.
//
// Return nil on success, Reject(err) for input that can never succeed (REJECTED, not
// retried), and any other error for a failure worth retrying. Handle may run more than
// once for one event (a rolled-back transaction, a replay), so it keeps no state
// outside tx.
type Handler interface {
	Handle(ctx context.Context, tx pgx.Tx, ev Event) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, tx pgx.Tx, ev Event) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, tx pgx.Tx, ev Event) error { return f(ctx, tx, ev) }

// BatchHandler is a Handler that can also apply many events of its type in one call,
// set-based (one INSERT … SELECT FROM unnest for all of them, say). The engine calls
// HandleBatch with the events of a batch that are ready to run, in sequence order,
// inside one savepoint. It returns one error per event (nil for success), or err for
// the call as a whole. If any event fails (or err is not nil, or the call panics), the
// engine rolls the call back and runs each of those events through Handle in its own
// savepoint instead, so a failure, a rejection or a conflict stays with its event:
// HandleBatch may simply return an error whenever it cannot apply every event cleanly.
// EmitBatch is its way to the outbox.
type BatchHandler interface {
	Handler
	HandleBatch(ctx context.Context, tx pgx.Tx, evs []Event) (errs []error, err error)
}

// ErrRejected matches (errors.Is) every error built by Reject.
var ErrRejected = process.ErrRejected

// Reject marks err as a business rejection: the event becomes REJECTED, with err's text
// as its last error, and is not retried. Reject(nil) is nil.
func Reject(err error) error { return process.Reject(err) }

// JournalID is the journal id (Event.ID, the journal table's primary key) of an event
// whose own id is key: key itself, lower-cased, when it is a UUID, else the version-5
// UUID of key in inboxd's fixed namespace 6f1c4b52-9d3e-4a07-b821-5e0a7c943d11. A
// CloudEvent's journal id is derived from its source and id instead.
func JournalID(key string) string { return message.JournalID(key) }

// HandleOption configures how the events of one type are handled (Client.Handle). An
// option stays set until given again.
type HandleOption struct {
	apply func(reg *process.Registry, eventType string)
}

// RetryPolicy is the recoverability policy of an event type: a failing handler runs
// again at once ImmediateRetries times, then the attempt is recorded as failed and
// retried after BaseBackoff, doubling up to MaxBackoff (±10%), until MaxAttempts
// attempts failed and the event is DEAD. A zero field takes Config's value
// (Config.ImmediateRetries, MaxAttempts, RetryBaseDelay, RetryMaxDelay).
type RetryPolicy struct {
	// ImmediateRetries is how many more times a failing handler runs at once, in the
	// same transaction, before the attempt is recorded as failed. -1 means none.
	ImmediateRetries int
	// MaxAttempts is the number of recorded attempts after which a failing event is DEAD.
	MaxAttempts int
	// BaseBackoff is the delay after the first failed attempt; it doubles per attempt up
	// to MaxBackoff.
	BaseBackoff time.Duration
	// MaxBackoff is the longest delay between two attempts.
	MaxBackoff time.Duration
}

// Delay is the nominal delay (without its ±10% jitter) before the attempt that follows
// failed attempt number attempt (1-based), zero fields taking the defaults.
func (p RetryPolicy) Delay(attempt int) time.Duration { return process.RetryPolicy(p).Delay(attempt) }

// WithRetryPolicy gives an event type its own recoverability policy, e.g. fewer
// attempts for a type whose handler calls nothing that can be down:
//
//	c.Handle("order.placed", h, inboxd.WithRetryPolicy(inboxd.RetryPolicy{MaxAttempts: 3}))
//
// It panics on a negative MaxAttempts, BaseBackoff or MaxBackoff, a wiring bug.
func WithRetryPolicy(p RetryPolicy) HandleOption {
	return HandleOption{apply: func(reg *process.Registry, eventType string) {
		reg.SetRetryPolicy(eventType, process.RetryPolicy(p))
	}}
}

// Outgoing is a message a handler emits through the outbox (Emit, EmitBatch).
type Outgoing struct {
	// Destination is a queue or topic, e.g. "/queue/customer-events".
	Destination string
	// Body is the message body, sent as is.
	Body []byte
	// Headers are extra STOMP headers; "content-type" sets the content type.
	Headers map[string]string
	// ID, when set, is the outbox id (a UUID); empty means a new random one. Set it
	// from the event being processed to make the emission itself idempotent.
	ID string
	// Group orders messages: those of one group are published in emit order, one after
	// another, whatever their destination; a group's message waits while an earlier one
	// is unsent. Empty means the JMSXGroupID header, else the aggregate-id header;
	// without any of them the message is published independently. It is not sent as a
	// header.
	Group string
}

// Emitted is what EmitBatch did with one message.
type Emitted struct {
	// ID is the message's outbox id.
	ID string
	// Duplicate tells that ID was already in the outbox (or earlier in the same batch),
	// so nothing was written for it: a handler that runs again emits nothing new.
	Duplicate bool
}

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
func Emit(ctx context.Context, tx pgx.Tx, o Outgoing) (string, error) {
	return outbox.Emit(ctx, tx, outbox.Outgoing(o))
}

// EmitBatch is Emit for several messages, in their order, with one round trip: the
// call for a BatchHandler. An invalid message fails it (errors.Is ErrInvalidOutgoing)
// before anything is written; an id already used is reported in Emitted.Duplicate.
func EmitBatch(ctx context.Context, tx pgx.Tx, msgs []Outgoing) ([]Emitted, error) {
	in := make([]outbox.Outgoing, len(msgs))
	for i, m := range msgs {
		in[i] = outbox.Outgoing(m)
	}
	out, err := outbox.EmitBatch(ctx, tx, in)
	if out == nil {
		return nil, err
	}
	res := make([]Emitted, len(out))
	for i, e := range out {
		res[i] = Emitted(e)
	}
	return res, err
}

// CloudEvent is an outgoing CloudEvents 1.0 event, for CloudEventMessage.
type CloudEvent struct {
	// ID identifies the event within its Source (required).
	ID string
	// Source is the URI-reference of the event's producer (required).
	Source string
	// Type is the event type, e.g. "com.example.order.accepted" (required).
	Type string
	// Subject is what the event is about within Source; a consuming inboxd takes it as
	// the aggregate id.
	Subject string
	// Time is when the event happened; zero means no time attribute.
	Time time.Time
	// DataContentType is the media type of Data; empty means application/json.
	DataContentType string
	// Data is the event data, as JSON (nil: no data).
	Data json.RawMessage
	// Extensions are extension attributes: lower-case letters and digits, string values.
	Extensions map[string]string
}

// CloudEventMode is how CloudEventMessage puts an event on the wire (the CloudEvents
// AMQP binding's content modes).
type CloudEventMode int

// The modes of CloudEventMessage.
const (
	// CloudEventStructured sends the JSON-format event as the body, content-type
	// application/cloudevents+json.
	CloudEventStructured CloudEventMode = CloudEventMode(outbox.CEStructured)
	// CloudEventBinary sends the attributes as cloudEvents_-prefixed headers and the
	// data as the body.
	CloudEventBinary CloudEventMode = CloudEventMode(outbox.CEBinary)
)

// CloudEventMessage is the Outgoing that carries e to destination in mode, for Emit or
// EmitBatch. Its id is derived from e's source and id, the key a consuming inboxd
// journals it under, so that a handler that runs again emits nothing new.
func CloudEventMessage(destination string, e CloudEvent, mode CloudEventMode) (Outgoing, error) {
	o, err := outbox.CloudEventMessage(destination, outbox.CloudEvent(e), outbox.CEMode(mode))
	return Outgoing(o), err
}
