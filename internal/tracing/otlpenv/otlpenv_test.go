package otlpenv

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string // "noop", "sdk" or "error"
	}{
		{"nothing set", map[string]string{}, "noop"},
		{"only a service name", map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, "noop"},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, "noop"},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, "noop"},
		{"otlp http by default", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, "sdk"},
		{"endpoint alone", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, "sdk"},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "sdk"},
		{"unknown protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "error"},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, shutdown, err := FromEnv(context.Background(), func(k string) string { return tt.env[k] })
			got := "error"
			switch tp.(type) {
			case noop.TracerProvider:
				got = "noop"
			case *sdktrace.TracerProvider:
				got = "sdk"
			}
			if err != nil {
				got = "error"
			}
			if got != tt.want {
				t.Fatalf("FromEnv(%v) = %T, %v; want %s", tt.env, tp, err, tt.want)
			}
			if shutdown != nil {
				if err := shutdown(context.Background()); err != nil {
					t.Errorf("shutdown: %v", err)
				}
			}
		})
	}
}
