package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// With -tracing, a row records every span (ingest batches linked to each message,
// one processing span per event) with the SDK's batch processor, exported to a sink that
// drops them: the cost of tracing inside inboxd, without a collector's network cost.
// Published messages carry a traceparent then, as from an instrumented producer, so
// that ingest validates and journals it. Without -tracing, inboxd runs on otel's global
// no-op provider and messages carry none: what "inboxd serve" does with no OTEL_* set.

// tracedPublish: messages get a traceparent header (set from the knob in each process).
var tracedPublish atomic.Bool

// discardExporter is a SpanExporter that drops what it gets.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// tracerProvider is the row's provider: nil (the global no-op) unless k.Tracing.
func (k Knobs) tracerProvider() (trace.TracerProvider, func()) {
	tracedPublish.Store(k.Tracing)
	if !k.Tracing {
		return nil, func() {}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardExporter{}))
	return tp, func() { _ = tp.Shutdown(context.Background()) }
}

// traceparent is a new sampled W3C traceparent, as a traced producer sends.
func traceparent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}
