// Package ingest is the STOMP subscriber that feeds the journal: it reads messages
// from the broker, decodes them (message.Decode), writes each batch with exactly one
// journal.Ingest call, and acknowledges the batch only after that call returned nil.
//
// Delivery guarantees, per destination:
//   - a message is acked only after its journal or quarantine row is durably committed,
//     so a crash at any point loses nothing: the broker redelivers what was not acked;
//   - a redelivered message collides on the journal's primary key (computed from the
//     payload's id), so it is counted as a duplicate and never inserted twice;
//   - when Ingest fails, or its outcome is unknown, nothing of the batch is acked: the
//     connection is dropped so the broker redelivers, and the subscriber reconnects
//     with a capped jittered backoff (waiting for the database first when it was the
//     database that failed).
//
// Each destination gets its own connection, subscription and pipeline:
//
//	broker ─▶ reader ─▶ batcher (decode, up to BatchSize or Linger) ─▶ committer (Ingest) ─▶ acker
//
// Each stage is a small type sharing one session value (session.go).
//
// A batch is also closed before it outgrows one statement (Config.MaxStatementBytes,
// journal.Room): CockroachDB refuses any client message over 16 MiB, and a batch's
// bodies all travel in one statement.
//
// The reader drains Subscription.C at once (go-stomp stalls the whole connection,
// heart-beats and acks included, when that 16-slot channel is full). The batcher
// collects the next batch while the committer writes earlier ones: up to
// CommitsInFlight batches are written at once, but a batch that shares an event id or
// an aggregate with a write under way waits for it, so one aggregate's events are
// journaled (and so processed) in broker order; and once a write has failed no later
// batch is written, so none can commit an aggregate's event ahead of an earlier one that
// is coming back redelivered. Batches are acked strictly in dispatch order and never
// after a failure. That is what makes a cumulative ("client") ack of a batch's last
// message safe: it can only cover messages of this batch or of batches already
// committed. A batch committed after an earlier one failed stays unacked; the broker
// redelivers it and the journal collapses it. These rules are written once, in
// order.go.
//
// A topic destination ("/topic/…") gets a durable subscription (Config.ClientID,
// Config.SubscriptionName, see DurableFor), recorded in the journal's
// durable_subscription table before its SUBSCRIBE. Only one connection can hold a
// client id: a second subscriber with the same one waits as a standby
// (stompx.ErrClientIDInUse) and takes over when the first lets go. A destination counts
// as ready only once the broker has confirmed its SUBSCRIBE.
//
// A message's W3C traceparent and tracestate headers are kept with its journal entry
// (tracing.Extract: validated by propagation.TraceContext, bounded), and each batch
// written has an OpenTelemetry span ("ingest <destination>", Config.TracerProvider)
// linked to the trace of each of its messages.
package ingest
