package process

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/tracing"
)

// Span attributes of processing (inboxd's own names; the event type is the registry's
// bounded label, never a payload's made-up type).
const (
	attrEventID = attribute.Key("inboxd.event.id")
	attrType    = attribute.Key("inboxd.event.type")
	attrAttempt = attribute.Key("inboxd.attempt")
	attrOutcome = attribute.Key("inboxd.outcome")
	attrEvents  = attribute.Key("inboxd.events")
)

// startEventSpan starts the processing span of one event: a child of the trace of the
// message it came in (its stored traceparent), else of whatever span ctx holds. The
// handler gets its context, so that the handler's own spans, and the traceparent of
// what it emits to the outbox, nest under it.
func (e *Engine) startEventSpan(ctx context.Context, h journal.Head, attempt int) (context.Context, trace.Span) {
	ctx = tracing.WithStored(ctx, h.TraceContext)
	typ := e.reg.MetricLabel(h.EventType)
	return e.tracer.Start(ctx, "process "+typ, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrEventID.String(h.ID), attrType.String(typ), attrAttempt.Int(attempt)))
}

// endEventSpan records the outcome (and a handler's error) and ends the span.
func endEventSpan(span trace.Span, out Outcome, herr, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if err == nil && out != "" {
		span.SetAttributes(attrOutcome.String(string(out)))
	}
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, "processing transaction failed")
	case herr != nil && !errors.Is(herr, ErrRejected):
		span.RecordError(herr)
		span.SetStatus(codes.Error, "handler failed")
	}
	span.End()
}

// startSetSpan starts the span of one BatchHandler call, linked to the trace of each
// event it applies (one call has many parents, which a span cannot have).
func (e *Engine) startSetSpan(ctx context.Context, typ string, heads map[string]string, evs []Event) (context.Context, trace.Span) {
	links := make([]trace.Link, 0, len(evs))
	for _, ev := range evs {
		if sc := tracing.SpanContext(heads[ev.ID]); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attrEventID.String(ev.ID)}})
		}
	}
	label := e.reg.MetricLabel(typ)
	return e.tracer.Start(ctx, "process batch "+label, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
		trace.WithAttributes(attrType.String(label), attrEvents.Int(len(evs))))
}
