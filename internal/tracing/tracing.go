// Package tracing carries W3C trace context (traceparent, tracestate) from the broker's
// messages through the journal to processing and to the outbox, with OpenTelemetry.
//
// Nothing here parses trace headers by hand: propagation.TraceContext validates them on
// the way in and writes them on the way out. What the journal keeps is the carrier that
// propagator re-injects from a valid context, as a small JSON object, so a malformed or
// oversized header from a publisher is dropped rather than stored.
package tracing

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of inboxd's spans.
const ScopeName = "github.com/inboxd/inboxd"

// W3C header names (https://www.w3.org/TR/trace-context/#header-name).
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// MaxTracestate bounds the tracestate kept with an event. The W3C recommendation is that
// a vendor propagate at least 512 characters and may drop the whole header beyond that
// (https://www.w3.org/TR/trace-context/#tracestate-limits); a longer one is dropped and
// the traceparent kept.
const MaxTracestate = 512

// MaxStored bounds what Extract returns: {"traceparent": 55 characters, "tracestate":
// at most MaxTracestate}, JSON-escaped (the propagator admits no character that needs
// escaping, so this is loose).
const MaxStored = 64 + 2*MaxTracestate

var propagator = propagation.TraceContext{}

// Tracer returns inboxd's tracer of tp; nil means otel's global provider (a no-op one
// unless the program set its own).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// headerCarrier reads headers through a getter (a STOMP frame's Header.Get).
type headerCarrier func(string) string

func (h headerCarrier) Get(key string) string { return h(key) }
func (h headerCarrier) Set(string, string)    {}
func (h headerCarrier) Keys() []string        { return []string{HeaderTraceparent, HeaderTracestate} }

// Extract reads the W3C trace context from a message's headers and returns it in the
// form the journal keeps (a JSON object of the two headers), or "" when the message
// carries no valid traceparent. The result is at most MaxStored bytes.
func Extract(header func(string) string) string {
	if header == nil || header(HeaderTraceparent) == "" {
		return "" // the common case without tracing: no allocation
	}
	sc := trace.SpanContextFromContext(propagator.Extract(context.Background(), headerCarrier(header)))
	if !sc.IsValid() {
		return ""
	}
	if len(sc.TraceState().String()) > MaxTracestate {
		sc = sc.WithTraceState(trace.TraceState{})
	}
	c := propagation.MapCarrier{}
	propagator.Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), c)
	b, err := json.Marshal(c)
	if err != nil || len(b) > MaxStored {
		return ""
	}
	return string(b)
}

// SpanContext returns the remote span context of a stored trace context (Extract's
// result); an empty or invalid one gives the zero SpanContext.
func SpanContext(stored string) trace.SpanContext {
	if stored == "" {
		return trace.SpanContext{}
	}
	c := propagation.MapCarrier{}
	if json.Unmarshal([]byte(stored), &c) != nil {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagator.Extract(context.Background(), c))
}

// WithStored returns ctx carrying the stored trace context as its remote parent; with
// none, ctx unchanged.
func WithStored(ctx context.Context, stored string) context.Context {
	sc := SpanContext(stored)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Inject returns headers with the traceparent (and tracestate) of ctx's span added,
// unless ctx has no valid span or headers already name a traceparent. headers is not
// modified: a copy is returned when something is added.
func Inject(ctx context.Context, headers map[string]string) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return headers
	}
	if _, ok := headers[HeaderTraceparent]; ok {
		return headers // the emitter chose its own
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	out := make(map[string]string, len(headers)+len(c))
	for k, v := range headers {
		out[k] = v
	}
	for k, v := range c {
		out[k] = v
	}
	return out
}
