package webhook_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/tracing"
	"github.com/inboxd/inboxd/internal/webhook"
	"github.com/inboxd/inboxd/internal/webhook/sinktest"
)

// On the webhook path (the changefeed as the only push, no sweeper), an event's
// processing span is a child of the trace of the message it came in, and its handler
// gets it, as on the sweeper and push paths.
func TestWebhookProcessingSpan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(ctx) })
	handled := make(chan trace.SpanContext, 1)
	reg := process.NewRegistry()
	reg.Register("traced", process.HandlerFunc(func(ctx context.Context, _ pgx.Tx, _ process.Event) error {
		select {
		case handled <- trace.SpanContextFromContext(ctx):
		default:
		}
		return nil
	}))
	m := metrics.New()
	engine := process.New(db.Pool, reg, process.Config{TracerProvider: tp}, m, nil)
	h := webhook.New(webhook.Config{AuthHeader: token, Sink: "journal"}, engine, db.Pool, m, nil)
	u, client := serve(t, h)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = h.Shutdown(sctx)
	})
	feed := &sinktest.Feed{DB: db.Pool, Sink: &sinktest.Sink{URLs: []string{u}, Client: client, AuthHeader: token},
		FlushFrequency: 20 * time.Millisecond}
	testenv.Start(t, 30*time.Second, feed.Run)

	id := message.NewID()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if _, err := journal.Ingest(ctx, db.Pool, journal.Batch{Entries: []journal.Entry{{Destination: "/queue/in",
		Event:        message.Event{ID: id, EventType: "traced", AggregateID: id, Payload: fmt.Appendf(nil, `{"id":%q}`, id)},
		TraceContext: tracing.Extract(func(k string) string { return map[string]string{"traceparent": parent}[k] })}}}); err != nil {
		t.Fatal(err)
	}
	var sc trace.SpanContext
	select {
	case sc = <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("the feed did not deliver the event within 30s")
	}
	var proc *tracetest.SpanStub
	testenv.Eventually(t, 30*time.Second, "the processing span ended", func() bool {
		for _, s := range exp.GetSpans() {
			if s.SpanContext.SpanID() == sc.SpanID() {
				proc = &s
				return true
			}
		}
		return false
	})
	if proc.Name != "process traced" || proc.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		proc.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("span in the handler's context: %q with parent %v; want \"process traced\", a child of the publisher's span", proc.Name, proc.Parent)
	}
}
