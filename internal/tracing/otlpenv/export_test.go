package otlpenv

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/inboxd/inboxd/internal/tracing"
)

// collector keeps the service name and span names of what it receives.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []string // "service/span"
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, service+"/"+s.GetName())
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *collector) received() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.spans...)
}

// startHTTP serves OTLP/HTTP (protobuf) at /v1/traces and returns its base URL.
func startHTTP(t *testing.T, c *collector) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil || r.URL.Path != "/v1/traces" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		resp, _ := c.Export(r.Context(), &req)
		out, _ := proto.Marshal(resp)
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// startGRPC serves OTLP/gRPC and returns its base URL.
func startGRPC(t *testing.T, c *collector) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return "http://" + lis.Addr().String()
}

// FromEnv exports over both OTLP protocols to a real receiver, with the service name
// and the sampler of the environment.
func TestFromEnvExports(t *testing.T) {
	tests := []struct {
		name     string
		protocol string
		sampler  string
		want     int
	}{
		{"http", "", "", 1},
		{"http/protobuf", "http/protobuf", "always_on", 1},
		{"grpc", "grpc", "", 1},
		{"sampled out", "http/protobuf", "always_off", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &collector{}
			url := startHTTP(t, c)
			if tt.protocol == "grpc" {
				url = startGRPC(t, c)
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tt.protocol)
			t.Setenv("OTEL_TRACES_SAMPLER", tt.sampler)
			t.Setenv("OTEL_SERVICE_NAME", "svc-"+tt.name)
			ctx := context.Background()
			tp, shutdown, err := FromEnv(ctx, os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			_, span := tracing.Tracer(tp).Start(ctx, "work")
			span.End()
			if err := shutdown(ctx); err != nil { // flushes
				t.Fatalf("shutdown: %v", err)
			}
			got := c.received()
			if len(got) != tt.want || (tt.want == 1 && got[0] != "svc-"+tt.name+"/work") {
				t.Fatalf("received %v, want %d span named svc-%s/work", got, tt.want, tt.name)
			}
		})
	}
}
