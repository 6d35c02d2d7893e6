// Package otlpenv configures OpenTelemetry tracing from the standard OTEL_* variables
// for the command line. It is apart from package tracing so that a program embedding
// inboxd, which brings its own TracerProvider, does not link the OTLP exporters and gRPC.
package otlpenv

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// FromEnv builds the tracer provider of "inboxd serve" from the standard OTEL_*
// variables only (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/
// and https://opentelemetry.io/docs/specs/otel/protocol/exporter/):
//
//   - spans are exported over OTLP when OTEL_TRACES_EXPORTER is "otlp" or an OTLP
//     endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
//     otherwise, and with OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true, the
//     provider is a no-op: nothing is recorded, nothing exported, nothing costs;
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL, chooses
//     "http/protobuf" (the default) or "grpc"; the exporters read their endpoint,
//     headers, timeout, TLS and compression variables themselves;
//   - the SDK reads OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_*, and the resource
//     OTEL_SERVICE_NAME (default "inboxd") and OTEL_RESOURCE_ATTRIBUTES.
//
// shutdown flushes the spans still queued; call it once, when serve ends.
func FromEnv(ctx context.Context, getenv func(string) string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	off := func(context.Context) error { return nil }
	exporter := strings.TrimSpace(strings.ToLower(getenv("OTEL_TRACES_EXPORTER")))
	endpoint := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	switch {
	case strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true"), exporter == "none":
		return noop.NewTracerProvider(), off, nil
	case exporter == "" && !endpoint:
		return noop.NewTracerProvider(), off, nil
	case exporter != "" && exporter != "otlp":
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: inboxd exports traces over OTLP only (otlp or none)", exporter)
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp *otlptrace.Exporter
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: want http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("creating the OTLP trace exporter: %w", err)
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the default name.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "inboxd")),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("building the trace resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return p, p.Shutdown, nil
}
