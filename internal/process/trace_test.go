package process_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/tracing"
)

const publisherParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// Processing continues the trace of the message an event came in: one span per event,
// a child of the publisher's span; the handler's context holds it, so the handler's own
// span nests under it and what it emits to the outbox carries its traceparent. An
// event that came without one starts a trace of its own, emitted the same way.
func TestProcessingSpans(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(ctx) })

	type seen struct {
		handlerSpan trace.SpanContext // the span in the handler's context
		ownSpan     trace.SpanContext // the span the handler started itself
		outboxID    string
	}
	got := map[string]seen{}
	reg := process.NewRegistry()
	reg.Register("traced", process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
		hctx, own := tp.Tracer("handler").Start(ctx, "handler work")
		own.End()
		_ = hctx
		id, err := outbox.Emit(ctx, tx, outbox.Outgoing{Destination: "/queue/out", Body: []byte(`{}`)})
		got[ev.ID] = seen{trace.SpanContextFromContext(ctx), own.SpanContext(), id}
		return err
	}))
	e := process.New(db.Pool, reg, process.Config{TracerProvider: tp}, nil, nil)

	withTrace, without := message.NewID(), message.NewID()
	var entries []journal.Entry
	for _, id := range []string{withTrace, without} {
		entries = append(entries, journal.Entry{Destination: "/queue/in", Event: message.Event{ID: id, EventType: "traced", AggregateID: id,
			Payload: fmt.Appendf(nil, `{"id":%q}`, id)}})
	}
	entries[0].TraceContext = tracing.Extract(func(k string) string {
		return map[string]string{"traceparent": publisherParent, "tracestate": "rojo=1"}[k]
	})
	if _, err := journal.Ingest(ctx, db.Pool, journal.Batch{Entries: entries}); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := db.Pool.QueryRow(ctx, `SELECT trace_context->>'traceparent' FROM journal WHERE id = $1`, withTrace).Scan(&stored); err != nil || stored != publisherParent {
		t.Fatalf("journal.trace_context traceparent = %q, %v; want %q", stored, err, publisherParent)
	}
	outs, err := e.ProcessBatch(ctx, []process.Item{{ID: withTrace}, {ID: without}})
	if err != nil || outs[0] != process.OutcomeProcessed || outs[1] != process.OutcomeProcessed {
		t.Fatalf("ProcessBatch = %v, %v", outs, err)
	}

	spans := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.SpanContext.SpanID()] = s
	}
	for _, tt := range []struct {
		id     string
		parent string // the publisher's span, "" for a new root
	}{{withTrace, "00f067aa0ba902b7"}, {without, ""}} {
		s := got[tt.id]
		proc, ok := spans[s.handlerSpan.SpanID()]
		if !ok || proc.Name != "process traced" {
			t.Fatalf("event %s: the handler's context holds span %v, not an exported processing span (%d spans)", tt.id, s.handlerSpan, len(spans))
		}
		if tt.parent != "" {
			if proc.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || proc.Parent.SpanID().String() != tt.parent || !proc.Parent.IsRemote() {
				t.Errorf("processing span's parent = %v, want the publisher's span", proc.Parent)
			}
			if proc.SpanContext.TraceState().String() != "rojo=1" {
				t.Errorf("tracestate %q, want the publisher's", proc.SpanContext.TraceState().String())
			}
		} else if proc.Parent.IsValid() {
			t.Errorf("event without a traceparent: processing span has parent %v, want a root", proc.Parent)
		}
		if own := spans[s.ownSpan.SpanID()]; own.Parent.SpanID() != proc.SpanContext.SpanID() || own.SpanContext.TraceID() != proc.SpanContext.TraceID() {
			t.Errorf("the handler's own span has parent %v, want the processing span %v", own.Parent, proc.SpanContext)
		}
		row, ok, err := outbox.Get(ctx, db.Pool, s.outboxID)
		if err != nil || !ok {
			t.Fatalf("outbox.Get(%s): %v %v", s.outboxID, ok, err)
		}
		want := fmt.Sprintf("00-%s-%s-01", proc.SpanContext.TraceID(), proc.SpanContext.SpanID())
		if row.Headers["traceparent"] != want {
			t.Errorf("emitted message's traceparent = %q, want the processing span's %q", row.Headers["traceparent"], want)
		}
	}
}
