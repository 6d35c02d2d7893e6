package inboxd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// otlpSpan is what the test's OTLP receiver keeps of a span.
type otlpSpan struct {
	service, name, trace, id, parent string
	links                            []string // "trace/span"
}

// otlpReceiver is a real OTLP/HTTP trace receiver: it decodes the protobuf export
// requests the SDK's exporter sends to /v1/traces.
type otlpReceiver struct {
	URL   string
	mu    sync.Mutex
	spans []otlpSpan
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(io.LimitReader(req.Body, 16<<20))
		var ex coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &ex)
		}
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
			t.Errorf("OTLP receiver: %s %s %s: %v", req.Method, req.URL.Path, req.Header.Get("Content-Type"), err)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range ex.GetResourceSpans() {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					o := otlpSpan{service: service, name: s.GetName(), trace: hex.EncodeToString(s.GetTraceId()),
						id: hex.EncodeToString(s.GetSpanId()), parent: hex.EncodeToString(s.GetParentSpanId())}
					for _, l := range s.GetLinks() {
						o.links = append(o.links, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
					}
					r.spans = append(r.spans, o)
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *otlpReceiver) received() []otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]otlpSpan(nil), r.spans...)
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// traceRoundTrip publishes an event with a publisher's traceparent to in, lets the
// handler (given to register) emit a message to out, reads that message back from
// ActiveMQ and checks that the receiver gets one trace: the publisher's span, the
// processing span (its child, the handler's context, the parent of the emitted
// message), and the ingest batch span linked to the publisher's span. wantService ""
// checks no service name.
func traceRoundTrip(t *testing.T, broker, in, out string, recv *otlpReceiver, wantService string, flush func()) {
	t.Helper()
	conn, err := stomp.Dial("tcp", broker, stomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Disconnect() })
	sub, err := conn.Subscribe(out, stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	traceID, pubSpan := randomHex(t, 16), randomHex(t, 8)
	pub := stompx.NewPublisher(stompx.Config{Addr: broker}, 1)
	t.Cleanup(func() { pub.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body := fmt.Sprintf(`{"id":%q,"type":"order.traced"}`, message.NewID())
	if err := pub.Publish(ctx, in, []byte(body), map[string]string{"persistent": "true",
		"traceparent": "00-" + traceID + "-" + pubSpan + "-01"}); err != nil {
		t.Fatal(err)
	}
	var emitted string
	select {
	case m := <-sub.C:
		if m.Err != nil {
			t.Fatal(m.Err)
		}
		emitted = m.Header.Get("traceparent")
	case <-ctx.Done():
		t.Fatal("no emitted message on " + out + " within 30s")
	}
	parts := strings.Split(emitted, "-")
	if len(parts) != 4 || parts[1] != traceID {
		t.Fatalf("emitted message's traceparent %q, want one in the publisher's trace %s", emitted, traceID)
	}
	procSpan := parts[2]
	if flush != nil {
		flush()
	}
	var proc, ingest *otlpSpan
	testenv.Eventually(t, 30*time.Second, "the processing and ingest spans at the OTLP receiver", func() bool {
		proc, ingest = nil, nil
		for _, s := range recv.received() {
			if s.id == procSpan {
				proc = &s
			}
			for _, l := range s.links {
				if l == traceID+"/"+pubSpan && strings.HasPrefix(s.name, "ingest ") {
					ingest = &s
				}
			}
		}
		return proc != nil && ingest != nil
	})
	if proc.trace != traceID || proc.parent != pubSpan || proc.name != "process order.traced" || (wantService != "" && proc.service != wantService) {
		t.Errorf("processing span %+v: want trace %s, parent %s (the publisher's), name \"process order.traced\", service %q",
			*proc, traceID, pubSpan, wantService)
	}
	if wantService != "" && ingest.service != wantService {
		t.Errorf("ingest span's service %q, want %q", ingest.service, wantService)
	}
}

// emitTo is the handler of both tests: it emits one message to out, in its trace.
func emitTo(out string) inboxd.Handler {
	return inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		_, err := inboxd.Emit(ctx, tx, inboxd.Outgoing{Destination: out, Body: fmt.Appendf(nil, `{"id":%q}`, message.NewID())})
		return err
	})
}

// A program's inboxd.Client with its own TracerProvider (OTLP over HTTP) exports one trace
// from the publisher's traceparent through processing to the emitted message.
func TestClientExportsOneTrace(t *testing.T) {
	// Serial: run beside the package's parallel tests, its Run twice overran the 10 s
	// shutdown timeout (of about 8 runs; the stage is not yet known).
	db := testenv.NewDB(t)
	broker := testenv.Broker(t)
	in, out := testenv.Queue(t), testenv.Queue(t)
	recv := newOTLPReceiver(t)
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(recv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c, err := inboxd.New(db.Pool, inboxd.Config{StompAddr: broker, Destinations: []string{in}, Logger: testenv.Logger(t),
		DisableHTTP: true, DisableWebhook: true, TracerProvider: tp, ShutdownTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c.Handle("order.traced", emitTo(out))
	stop := testenv.Start(t, 30*time.Second, c.Run)
	traceRoundTrip(t, broker, in, out, recv, "", func() { _ = tp.ForceFlush(context.Background()) })
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// "inboxd serve", configured by OTEL_* variables only, exports the same one trace.
func TestServeExportsOneTrace(t *testing.T) {
	db := testenv.NewDB(t)
	broker := testenv.Broker(t)
	in, out := testenv.Queue(t), testenv.Queue(t)
	recv := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", recv.URL+"/v1/traces")
	t.Setenv("OTEL_SERVICE_NAME", "inboxd-under-test")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	handle := func(c *inboxd.Client) { c.Handle("order.traced", emitTo(out)) }
	args := []string{"serve", "-database-url", db.URL, "-stomp-addr", broker, "-destination", in,
		"-http-addr", "", "-webhook-addr", "", "-cert-dir", t.TempDir(), "-log-level", "warn"}
	stop := startMain(t, args, handle)
	traceRoundTrip(t, broker, in, out, recv, "inboxd-under-test", nil)
	stop()
}
