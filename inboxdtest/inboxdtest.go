// Package inboxdtest is inboxd's test kit, for the tests of a program's handlers (after
// River's rivertest and riverdbtest):
//
//   - NewDB gives a test a PostgreSQL database of its own with inboxd's schema migrated;
//   - Run journals messages as ingest does and runs a Handler (or BatchHandler) on them
//     in the engine's own processing transaction (a savepoint per event, outcomes
//     recorded), and returns each event's outcome and the messages emitted through the
//     outbox;
//   - RequireOutcome and RequireEmitted assert on what Run returned;
//   - Shadow runs a changed handler over the history Run recorded, as a shadow replay
//     (nothing committed, nothing published), and reports what it would do differently;
//   - Publish and WaitSettled drive a running Client through the real broker, for
//     integration tests.
//
// The services are PostgreSQL at INBOXD_TEST_ADMIN_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable; the kit creates and
// drops a database per test there) and ActiveMQ's STOMP at INBOXD_TEST_STOMP_ADDR
// (default 127.0.0.1:61613). A test that cannot reach one skips, and fails when CI=true:
// in CI a missing service is a broken pipeline.
package inboxdtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/hook"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TB is the part of testing.TB the kit uses, so that Examples can run it too.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Skipf(format string, args ...any)
	Logf(format string, args ...any)
	Name() string
}

// NewDB returns a pool on a new database with inboxd's schema migrated (what
// inboxd.Migrate creates), dropped when the test ends.
func NewDB(t TB) *pgxpool.Pool {
	t.Helper()
	return testenv.NewDB(tb{t: t}).Pool
}

// Message is an event as the broker delivers it to inboxd.
type Message struct {
	// Body is the message body: a JSON object whose "id" is the event's id (Event.Key),
	// e.g. {"id":"ord-0001","total":12}.
	Body []byte
	// Type is the event type (the event-type header); empty: the body's "type", else
	// Run's eventType.
	Type string
	// AggregateID is the aggregate-id header; empty: the body's "aggregateId", else the
	// event id.
	AggregateID string
}

// Outcome is what processing did with an event.
type Outcome string

// OutcomeProcessed: the handler returned nil; the event is PROCESSED.
const OutcomeProcessed Outcome = "processed"

// OutcomeRejected: the handler returned inboxd.Reject(err); the event is REJECTED.
const OutcomeRejected Outcome = "rejected"

// OutcomeFailed: the handler failed; the event is FAILED and would be retried.
const OutcomeFailed Outcome = "failed"

// OutcomeDead: the handler failed on the event's last attempt; it is DEAD.
const OutcomeDead Outcome = "dead"

// OutcomeDeferred: an earlier event of the aggregate is still pending.
const OutcomeDeferred Outcome = "deferred"

// Result is what Run did with one event.
type Result struct {
	// ID is the event's journal id (inboxd.Event.ID), Key its own id (inboxd.Event.Key).
	ID, Key string
	// Outcome is what processing did.
	Outcome Outcome
	// Err is the error the journal recorded (the handler's), "" when processed.
	Err string
}

// Report is what Run did.
type Report struct {
	// Results holds one Result per message, in Run's order.
	Results []Result
	// Emitted holds the messages the handler wrote to the outbox during Run, in emit
	// order, with their outbox ids (Outgoing.ID).
	Emitted []inboxd.Outgoing
}

// Options tunes Run; its zero value is inboxd's defaults.
type Options struct {
	// IDSource is Config.IDSource: where the event id is read.
	IDSource string
	// RetryPolicy is the event type's policy; MaxAttempts 1 makes a failure DEAD at once.
	RetryPolicy inboxd.RetryPolicy
}

// Run journals msgs on pool as ingest does (in their order, so their sequence numbers
// follow it), then processes them as a Client does: one processing transaction, h's
// HandleBatch first when it is a BatchHandler, each event in its own savepoint, each
// outcome recorded in the journal. Messages of no type take eventType. A message the
// journal refuses, or a database failure, fails the test.
func Run(t TB, pool *pgxpool.Pool, eventType string, h inboxd.Handler, msgs ...Message) *Report {
	t.Helper()
	return RunWith(t, pool, Options{}, eventType, h, msgs...)
}

// RunWith is Run with options.
func RunWith(t TB, pool *pgxpool.Pool, opts Options, eventType string, h inboxd.Handler, msgs ...Message) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, err := message.ParseIDSource(opts.IDSource)
	if err != nil {
		t.Fatalf("inboxdtest: %v", err)
	}
	before, err := outbox.Unsent(ctx, pool, 1<<20)
	if err != nil {
		t.Fatalf("inboxdtest: %v", err)
	}
	seen := make(map[string]bool, len(before))
	for _, r := range before {
		seen[r.ID] = true
	}

	var b journal.Batch
	items := make([]process.Item, len(msgs))
	for i, m := range msgs {
		header := func(name string) string {
			switch name {
			case message.HeaderEventType:
				return m.Type
			case message.HeaderAggregateID:
				return m.AggregateID
			}
			return ""
		}
		ev, err := message.Decode(m.Body, header, message.Options{DefaultEventType: eventType, IDSource: src})
		if err != nil {
			t.Fatalf("inboxdtest: message %d would be quarantined: %v", i, err)
		}
		b.Entries = append(b.Entries, journal.Entry{Event: ev, Destination: "/queue/inboxdtest"})
		items[i] = process.Item{ID: ev.ID, AggregateID: ev.AggregateID}
	}
	if _, err := journal.Ingest(ctx, pool, b); err != nil {
		t.Fatalf("inboxdtest: journaling: %v", err)
	}

	reg := process.NewRegistry()
	reg.Replace(eventType, hook.EngineHandler(h, src))
	p := opts.RetryPolicy
	reg.SetRetryPolicy(eventType, process.RetryPolicy{ImmediateRetries: p.ImmediateRetries, MaxAttempts: p.MaxAttempts,
		BaseBackoff: p.BaseBackoff, MaxBackoff: p.MaxBackoff})
	for _, e := range b.Entries {
		if e.Event.EventType != eventType {
			reg.Replace(e.Event.EventType, hook.EngineHandler(h, src))
		}
	}
	// One worker: the batch is one transaction, as the engine runs a batch of events of
	// different aggregates.
	engine := process.New(pool, reg, process.Config{Concurrency: 1}, nil, slog.New(slog.DiscardHandler))
	outs, err := engine.ProcessBatch(ctx, items)
	if err != nil {
		t.Fatalf("inboxdtest: processing: %v", err)
	}

	rep := &Report{Results: make([]Result, len(msgs))}
	for i, e := range b.Entries {
		rec, err := journal.Get(ctx, pool, e.Event.ID)
		if err != nil {
			t.Fatalf("inboxdtest: reading event %s: %v", e.Event.ID, err)
		}
		r := Result{ID: e.Event.ID, Key: message.EventKey(e.Event.Payload, src), Outcome: Outcome(outs[i])}
		if rec.LastError != nil && r.Outcome != OutcomeProcessed {
			r.Err = *rec.LastError
		}
		rep.Results[i] = r
	}
	after, err := outbox.Unsent(ctx, pool, 1<<20)
	if err != nil {
		t.Fatalf("inboxdtest: %v", err)
	}
	for _, r := range after {
		if !seen[r.ID] {
			rep.Emitted = append(rep.Emitted, inboxd.Outgoing{ID: r.ID, Destination: r.Destination, Body: r.Body, Headers: r.Headers})
		}
	}
	return rep
}

// RequireOutcome fails the test unless the event whose own id (Result.Key) or journal
// id is id had outcome want.
func RequireOutcome(t TB, rep *Report, id string, want Outcome) Result {
	t.Helper()
	for _, r := range rep.Results {
		if r.Key == id || r.ID == id {
			if r.Outcome != want {
				t.Fatalf("event %s: outcome %s (%s), want %s", id, r.Outcome, r.Err, want)
			}
			return r
		}
	}
	t.Fatalf("event %s: not in this run", id)
	return Result{}
}

// RequireEmitted fails the test unless the run emitted exactly count messages to
// destination, and returns them in emit order.
func RequireEmitted(t TB, rep *Report, destination string, count int) []inboxd.Outgoing {
	t.Helper()
	var out []inboxd.Outgoing
	for _, o := range rep.Emitted {
		if o.Destination == destination {
			out = append(out, o)
		}
	}
	if len(out) != count {
		t.Fatalf("emitted %d messages to %s, want %d (all: %s)", len(out), destination, count, destinations(rep.Emitted))
	}
	return out
}

func destinations(msgs []inboxd.Outgoing) string {
	s := make([]string, len(msgs))
	for i, m := range msgs {
		s[i] = m.Destination
	}
	return fmt.Sprint(s)
}

// Broker returns the address of the test broker (ActiveMQ's STOMP); it skips the test
// when the broker is unreachable, and fails it when CI=true.
func Broker(t TB) string {
	t.Helper()
	return testenv.Broker(tb{t: t})
}

// Queue returns a queue name no other test uses, for a Client's Destinations.
func Queue(t TB) string {
	t.Helper()
	return testenv.Queue(tb{t: t})
}

// Publish sends body to destination on the test broker, persistent and confirmed, with
// headers (e.g. "event-type"), and returns the journal id the event will have: the
// JournalID of the body's "id".
func Publish(t TB, destination string, body []byte, headers map[string]string) string {
	t.Helper()
	ev, err := message.Decode(body, func(name string) string { return headers[name] }, message.Options{DefaultEventType: "-"})
	if err != nil {
		t.Fatalf("inboxdtest: publishing a message inboxd would quarantine: %v", err)
	}
	pub := stompx.NewPublisher(stompx.Config{Addr: Broker(t)}, 1)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pub.Publish(ctx, destination, body, headers); err != nil {
		t.Fatalf("inboxdtest: publishing to %s: %v", destination, err)
	}
	return ev.ID
}

// WaitSettled waits, at most within, until the event with journal id id is settled
// (PROCESSED, REJECTED or DEAD) and returns that status; it fails the test otherwise.
func WaitSettled(t TB, pool *pgxpool.Pool, id string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	// Every read is bounded by the deadline too: a database that stops answering must
	// not hold the test past within.
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for {
		rec, err := journal.Get(ctx, pool, id)
		switch {
		case err != nil && ctx.Err() != nil:
			t.Fatalf("inboxdtest: event %s not settled after %s (the last read did not answer: %v)", id, within, err)
		case err == nil && (rec.Status == journal.StatusProcessed || rec.Status == journal.StatusRejected || rec.Status == journal.StatusDead):
			return string(rec.Status)
		case err != nil && !errors.Is(err, journal.ErrNotFound):
			t.Fatalf("inboxdtest: reading event %s: %v", id, err)
		case time.Now().After(deadline):
			t.Fatalf("inboxdtest: event %s not settled after %s", id, within)
		}
		time.Sleep(20 * time.Millisecond) // polling the journal: no signal to wait on from outside the Client
	}
}
