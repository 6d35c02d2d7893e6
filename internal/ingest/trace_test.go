package ingest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

// The W3C trace context of a message read from the broker is kept with its journal
// entry, validated (a malformed traceparent keeps nothing, an oversized tracestate is
// dropped), and the span of the batch that wrote it links to it.
func TestTraceContextKept(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name    string
		headers map[string]string
		want    string // stored trace_context::TEXT, "" for NULL
	}{
		{"traceparent and tracestate", map[string]string{"traceparent": parent, "tracestate": "rojo=00f067aa0ba902b7"},
			`{"tracestate": "rojo=00f067aa0ba902b7", "traceparent": "` + parent + `"}`},
		{"traceparent only", map[string]string{"traceparent": parent}, `{"traceparent": "` + parent + `"}`},
		{"none", nil, ""},
		{"malformed", map[string]string{"traceparent": "00-xyz-00f067aa0ba902b7-01", "tracestate": "a=b"}, ""},
		{"tracestate too long", map[string]string{"traceparent": parent, "tracestate": "a=" + strings.Repeat("x", 250) + ",b=" + strings.Repeat("y", 250) + ",c=" + strings.Repeat("z", 20)},
			`{"traceparent": "` + parent + `"}`},
	}
	ids := make([]string, len(tests))
	for i, tt := range tests {
		ids[i] = message.NewID()
		publish(t, addr, q, fmt.Appendf(nil, `{"id":%q}`, ids[i]), tt.headers)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, TracerProvider: tp}, db.Pool, hooks{})
	testenv.Eventually(t, 20*time.Second, "all acked", func() bool { return r.counter("acked", q) == float64(len(tests)) })
	r.stop(t)
	for i, tt := range tests {
		var got string
		err := db.Pool.QueryRow(context.Background(), `SELECT COALESCE(trace_context::TEXT, '') FROM journal WHERE id = $1`, ids[i]).Scan(&got)
		if err != nil || got != tt.want {
			t.Errorf("%s: trace_context = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	links := map[string]int{}
	for _, s := range exp.GetSpans() {
		if s.Name != "ingest "+q {
			t.Errorf("unexpected span %q", s.Name)
		}
		for _, l := range s.Links {
			links[l.SpanContext.TraceID().String()+"/"+l.SpanContext.SpanID().String()]++
		}
	}
	if n := links["4bf92f3577b34da6a3ce929d0e0e4736/00f067aa0ba902b7"]; n != 3 {
		t.Errorf("batch spans link to the publisher's span %d times, want 3 (one per message with a valid traceparent): %v", n, links)
	}
}
