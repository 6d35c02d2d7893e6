package ingest

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/tracing"
)

// batchSpan starts the span of one batch written to the journal. A batch holds
// messages of many traces, so instead of a parent it has a link to each message's
// context (the SDK keeps the first 128 by default, OTEL_SPAN_LINK_COUNT_LIMIT). The
// links are made only when the span records: with tracing off this costs a no-op Start.
func (s *Subscriber) batchSpan(ctx context.Context, dest string, b *batch) (context.Context, trace.Span) {
	ctx, span := s.tracer.Start(ctx, "ingest "+dest, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "activemq"),
			attribute.String("messaging.destination.name", dest),
			attribute.Int("messaging.batch.message_count", len(b.msgs))))
	if span.IsRecording() {
		for _, e := range b.jb.Entries {
			if sc := tracing.SpanContext(e.TraceContext); sc.IsValid() {
				span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
					attribute.String("inboxd.event.id", e.Event.ID)}})
			}
		}
	}
	return ctx, span
}

func endBatchSpan(span trace.Span, res journal.Result, err error) {
	if span.IsRecording() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "writing the batch to the journal failed")
		} else {
			span.SetAttributes(attribute.Int("inboxd.inserted", res.Inserted), attribute.Int("inboxd.duplicates", res.Duplicates),
				attribute.Int("inboxd.quarantined", res.Quarantined))
		}
	}
	span.End()
}
