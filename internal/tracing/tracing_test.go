package tracing

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const (
	parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	state  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

func getter(h map[string]string) func(string) string { return func(k string) string { return h[k] } }

func TestExtract(t *testing.T) {
	long := "a=" + strings.Repeat("x", 250) + ",b=" + strings.Repeat("y", 250) + ",c=" + strings.Repeat("z", 20)
	tests := []struct {
		name      string
		headers   map[string]string
		wantTrace string // trace id, "" for nothing kept
		wantState string
	}{
		{"none", map[string]string{}, "", ""},
		{"traceparent only", map[string]string{"traceparent": parent}, "4bf92f3577b34da6a3ce929d0e0e4736", ""},
		{"with tracestate", map[string]string{"traceparent": parent, "tracestate": state}, "4bf92f3577b34da6a3ce929d0e0e4736", state},
		{"upper case is invalid", map[string]string{"traceparent": strings.ToUpper(parent)}, "", ""},
		{"all-zero trace id", map[string]string{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, "", ""},
		{"garbage", map[string]string{"traceparent": "hello", "tracestate": state}, "", ""},
		{"invalid tracestate dropped", map[string]string{"traceparent": parent, "tracestate": "not a list member"}, "4bf92f3577b34da6a3ce929d0e0e4736", ""},
		{"tracestate over 512 dropped", map[string]string{"traceparent": parent, "tracestate": long}, "4bf92f3577b34da6a3ce929d0e0e4736", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Extract(getter(tt.headers))
			sc := SpanContext(got)
			if tt.wantTrace == "" {
				if got != "" || sc.IsValid() {
					t.Fatalf("Extract = %q, want nothing", got)
				}
				return
			}
			if sc.TraceID().String() != tt.wantTrace || !sc.IsRemote() || !sc.IsSampled() {
				t.Fatalf("Extract = %q: span context %v, want trace %s, remote, sampled", got, sc, tt.wantTrace)
			}
			if sc.TraceState().String() != tt.wantState {
				t.Errorf("tracestate %q, want %q", sc.TraceState().String(), tt.wantState)
			}
		})
	}
}

func TestInject(t *testing.T) {
	sc := SpanContext(Extract(getter(map[string]string{"traceparent": parent, "tracestate": state})))
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	in := map[string]string{"aggregate-id": "a"}
	out := Inject(ctx, in)
	if out["traceparent"] != parent || out["tracestate"] != state || out["aggregate-id"] != "a" {
		t.Errorf("Inject = %v", out)
	}
	if _, ok := in["traceparent"]; ok {
		t.Error("Inject modified its argument")
	}
	own := map[string]string{"traceparent": "00-11111111111111111111111111111111-2222222222222222-00"}
	if got := Inject(ctx, own); got["traceparent"] != own["traceparent"] {
		t.Errorf("Inject replaced the emitter's own traceparent: %v", got)
	}
	if got := Inject(context.Background(), in); len(got) != 1 {
		t.Errorf("Inject without a span = %v, want the headers unchanged", got)
	}
}

// FuzzExtract: whatever a publisher sends, what is kept is empty or a bounded JSON
// object of the two headers that reads back as the same valid context.
func FuzzExtract(f *testing.F) {
	f.Add(parent, state)
	f.Add(parent, "")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "a=b")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "k=\x00")
	f.Fuzz(func(t *testing.T, tp, ts string) {
		got := Extract(getter(map[string]string{"traceparent": tp, "tracestate": ts}))
		if got == "" {
			return
		}
		if len(got) > MaxStored {
			t.Fatalf("stored %d bytes, over %d", len(got), MaxStored)
		}
		var c propagation.MapCarrier
		if err := json.Unmarshal([]byte(got), &c); err != nil {
			t.Fatalf("stored %q is not a JSON object of strings: %v", got, err)
		}
		for k := range c {
			if k != HeaderTraceparent && k != HeaderTracestate {
				t.Fatalf("stored unexpected key %q", k)
			}
		}
		if !SpanContext(got).IsValid() {
			t.Fatalf("stored %q reads back invalid", got)
		}
		if again := Extract(getter(c)); again != got {
			t.Fatalf("not stable: %q then %q", got, again)
		}
	})
}

// The per-message cost at ingest: nothing without a traceparent, one validation and a
// small JSON object with one.
func BenchmarkExtract(b *testing.B) {
	for _, bm := range []struct {
		name    string
		headers map[string]string
	}{
		{"none", map[string]string{"destination": "/queue/x"}},
		{"traceparent", map[string]string{"traceparent": parent}},
		{"traceparent+tracestate", map[string]string{"traceparent": parent, "tracestate": state}},
	} {
		get := getter(bm.headers)
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Extract(get)
			}
		})
	}
}
