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
// command line (serve, migrate, changefeed, …):
//
//	func main() {
//		inboxd.Register("order.placed", inboxd.HandlerFunc(placeOrder))
//		os.Exit(inboxd.Main())
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
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/inboxd/inboxd/internal/api"
	"github.com/inboxd/inboxd/internal/cli"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/tracing"
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

// handlers is what Register fills and Main's "serve" processes with: the one-file
// path's registry, like net/http's DefaultServeMux. A Client has its own.
var handlers = process.NewRegistry()

// Register adds (or replaces) the handler of an event type for Main, with options such
// as WithRetryPolicy. With -demo, Main adds the demo's "registration" handler unless one
// is registered for that type.
func Register(eventType string, h Handler, opts ...HandleOption) {
	applyOptions(handlers, eventType, opts)
	handlers.Replace(eventType, h)
}

// HandleOption configures how the events of one type are handled (Client.Handle,
// Register). An option stays set until given again.
type HandleOption struct {
	apply func(reg *process.Registry, eventType string)
}

func applyOptions(reg *process.Registry, eventType string, opts []HandleOption) {
	for _, o := range opts {
		if o.apply != nil {
			o.apply(reg, eventType)
		}
	}
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

// RunOnDead is Client.RunOnDead for Main's handlers.
func RunOnDead(eventType string) { handlers.RunOnDead(eventType) }

// Main runs the inboxd command line (serve, migrate, changefeed, …) with os.Args and
// returns the exit code. Its "serve" is a Client over the pool the command line opens,
// with the handlers given to Register.
func Main() int {
	return cli.Main(os.Args[1:], os.Stdout, os.Stderr, cli.Options{Handlers: handlers, Serve: serve})
}

// serve is the command line's "serve": the command line has parsed the settings, waited
// for the database, migrated it and opened pool, which stays its own.
//
// Its tracing is configured by the standard OTEL_* variables only (tracing.FromEnv):
// with no OTLP exporter named there, spans are neither recorded nor exported.
func serve(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, reg *process.Registry, log *slog.Logger, routes []api.Extension) (err error) {
	tp, shutdown, err := tracing.FromEnv(ctx, os.Getenv)
	if err != nil {
		return fmt.Errorf("configuring tracing: %w", err)
	}
	if _, off := tp.(noop.TracerProvider); !off {
		// Global too, so that a handler's own otel.Tracer spans are exported with inboxd's.
		otel.SetTracerProvider(tp)
		log.Info("tracing: exporting spans over OTLP (OTEL_* variables)")
	}
	defer func() {
		// Bounded: a collector that is down must not hold the exit.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if serr := shutdown(sctx); serr != nil {
			log.Warn("flushing spans at exit", "err", serr)
		}
	}()
	return (&Client{pool: pool, cfg: cfg, log: log, reg: reg, routes: routes, tp: tp}).Run(ctx)
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
