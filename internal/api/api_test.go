package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

// published is one message the fake publisher accepted.
type published struct {
	Destination string
	Body        []byte
	Headers     map[string]string
}

// fakePublisher stands in for the broker: it records what it is given, or fails.
type fakePublisher struct {
	mu   sync.Mutex
	msgs []published
	err  error
}

func (f *fakePublisher) Publish(ctx context.Context, dest string, body []byte, headers map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.msgs = append(f.msgs, published{dest, append([]byte(nil), body...), headers})
	return nil
}

func (f *fakePublisher) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakePublisher) sent() []published {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]published(nil), f.msgs...)
}

// syncBuffer is a log sink safe for concurrent handlers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

const testDestination = "/queue/inboxd-test.api"

type harness struct {
	srv *Server
	db  *testenv.DB
	pub *fakePublisher
	log *syncBuffer
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	db := testenv.NewDB(t)
	h := &harness{db: db, pub: &fakePublisher{}, log: &syncBuffer{}}
	cfg := Config{
		Pool:        db.Pool,
		Publisher:   h.pub,
		Destination: testDestination,
		Logger:      slog.New(slog.NewJSONHandler(h.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	return h
}

type response struct {
	Code   int
	Header http.Header
	Body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.Body, err)
	}
}

func (h *harness) do(t *testing.T, method, path string, body any, headers ...string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req := httptest.NewRequest(method, path, rd)
	// A local client by default, as curl on the server's machine; "RemoteAddr" and
	// "Host" pseudo-headers play another.
	req.RemoteAddr, req.Host = "127.0.0.1:40000", "localhost:8090"
	if rd != nil || method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		switch headers[i] {
		case "RemoteAddr":
			req.RemoteAddr = headers[i+1]
		case "Host":
			req.Host = headers[i+1]
		default:
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	return response{Code: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
}

// expectError checks status and the error shape, and returns the detail.
func expectError(t *testing.T, r response, status int) any {
	t.Helper()
	if r.Code != status {
		t.Fatalf("status = %d, want %d; body %s", r.Code, status, r.Body)
	}
	var m map[string]any
	r.json(t, &m)
	if _, ok := m["error"].(string); !ok {
		t.Fatalf("error body %s has no string \"error\"", r.Body)
	}
	if _, ok := m["detail"]; !ok || len(m) != 2 {
		t.Fatalf("error body %s: want exactly error and detail", r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("content type %q", ct)
	}
	return m["detail"]
}

// seedEvents journals events with the given payload fields; each gets an id.
func seedEvents(t *testing.T, db journal.DB, eventType string, payloads ...map[string]any) []string {
	t.Helper()
	var b journal.Batch
	var ids []string
	for _, p := range payloads {
		id := message.NewID()
		p["id"] = id
		body, _ := json.Marshal(p)
		ev, err := message.Decode(body, func(string) string { return "" }, message.Options{DefaultEventType: eventType})
		if err != nil {
			t.Fatal(err)
		}
		b.Entries = append(b.Entries, journal.Entry{Event: ev, Destination: "/queue/x"})
		ids = append(ids, id)
	}
	if _, err := journal.Ingest(context.Background(), db, b); err != nil {
		t.Fatal(err)
	}
	return ids
}

func setStatus(t *testing.T, db journal.DB, status string, ids ...string) {
	t.Helper()
	if _, err := db.Exec(context.Background(), `UPDATE journal SET status = $1, attempts = 5, last_error = 'boom' WHERE id = ANY ($2::UUID[])`, status, ids); err != nil {
		t.Fatal(err)
	}
}

func TestErrorShape(t *testing.T) {
	h := newHarness(t, nil)
	tests := []struct {
		method, path string
		body         any
		status       int
	}{
		{"GET", "/nope", nil, 404},
		{"DELETE", "/registration", nil, 405},
		{"PUT", "/journal/stats", nil, 405},
		{"POST", "/registration", "{", 400},
		{"GET", "/journal/not-a-uuid", nil, 400},
		{"GET", "/journal/" + message.NewID(), nil, 404},
		{"GET", "/journal/-events", nil, 404},
		{"POST", "/registration", strings.Repeat("x", 2<<20), 413},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			expectError(t, h.do(t, tt.method, tt.path, tt.body), tt.status)
		})
	}
	if r := h.do(t, "DELETE", "/registration", nil); r.Header.Get("Allow") == "" {
		t.Error("405 without an Allow header")
	}
}

func TestRegistrationFormRoundTrip(t *testing.T) {
	h := newHarness(t, nil)
	var forms [2]map[string]any
	for i := range forms {
		r := h.do(t, "GET", "/registration/form", nil)
		if r.Code != 200 {
			t.Fatalf("form: %d %s", r.Code, r.Body)
		}
		r.json(t, &forms[i])
	}
	if forms[0]["email"] == forms[1]["email"] || forms[0]["jurisdiction"] != "mga" {
		t.Errorf("forms should differ and be mga: %v %v", forms[0], forms[1])
	}
	for _, k := range []string{"name", "email", "jurisdiction", "createdAt"} {
		if _, ok := forms[0][k]; !ok {
			t.Errorf("form has no %q", k)
		}
	}

	r := h.do(t, "POST", "/registration", forms[0])
	if r.Code != http.StatusAccepted {
		t.Fatalf("post: %d %s", r.Code, r.Body)
	}
	var acc acceptedResponse
	r.json(t, &acc)
	if _, ok := message.CanonicalUUID(acc.ID); !ok || acc.Status != "accepted" {
		t.Errorf("accepted %+v", acc)
	}
	if loc := r.Header.Get("Location"); loc != "/journal/"+acc.ID {
		t.Errorf("Location = %q", loc)
	}
	msgs := h.pub.sent()
	if len(msgs) != 1 {
		t.Fatalf("published %d messages", len(msgs))
	}
	m := msgs[0]
	wantAgg := "mga:" + strings.ToLower(forms[0]["email"].(string))
	if m.Destination != testDestination || m.Headers[message.HeaderEventType] != "registration" || m.Headers[message.HeaderAggregateID] != wantAgg {
		t.Errorf("published %s with headers %v", m.Destination, m.Headers)
	}
	// The published body is what ingest will decode: same id, aggregate id in the payload.
	ev, err := message.Decode(m.Body, func(k string) string { return m.Headers[k] }, message.Options{})
	if err != nil || ev.ID != acc.ID || ev.AggregateID != wantAgg || ev.EventType != "registration" {
		t.Errorf("decoded %+v, %v", ev, err)
	}
}

func TestPostRegistrationValidation(t *testing.T) {
	h := newHarness(t, nil)
	valid := func() map[string]any {
		return map[string]any{"name": "Jane Doe", "email": "Jane@Example.com", "jurisdiction": "MGA", "createdAt": "2025-01-31T12:00:00Z"}
	}
	with := func(k string, v any) map[string]any {
		m := valid()
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name     string
		body     any
		status   int
		badField string
	}{
		{"valid", valid(), 202, ""},
		{"valid with id", with("id", "6F1C1F0E-1C3A-4C55-9A65-8B7E2D1F0A01"), 202, ""},
		{"valid with matching aggregateId", with("aggregateId", "mga:jane@example.com"), 202, ""},
		{"fractional createdAt", with("createdAt", "2025-01-31T12:00:00.123+01:00"), 202, ""},
		{"missing name", with("name", nil), 400, "name"},
		{"blank name", with("name", "   "), 400, "name"},
		{"long name", with("name", strings.Repeat("n", 201)), 400, "name"},
		{"missing email", with("email", nil), 400, "email"},
		{"bad email", with("email", "jane"), 400, "email"},
		{"display name email", with("email", "Jane <jane@example.com>"), 400, "email"},
		{"undotted domain", with("email", "jane@localhost"), 400, "email"},
		{"missing jurisdiction", with("jurisdiction", nil), 400, "jurisdiction"},
		{"bad jurisdiction", with("jurisdiction", "m g a"), 400, "jurisdiction"},
		{"missing createdAt", with("createdAt", nil), 400, "createdAt"},
		{"bad createdAt", with("createdAt", "31/01/2025"), 400, "createdAt"},
		{"bad id", with("id", "42"), 400, "id"},
		{"wrong aggregateId", with("aggregateId", "x"), 400, "aggregateId"},
		{"number as name", with("name", 5), 400, "name"},
		{"unknown field", with("nmae", "typo"), 400, ""},
		{"not json", "name=jane", 400, ""},
		{"array", "[]", 400, ""},
		{"trailing data", `{"name":"a"} {}`, 400, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(t, "POST", "/registration", tt.body)
			if tt.status == 202 {
				if r.Code != 202 {
					t.Fatalf("status %d: %s", r.Code, r.Body)
				}
				return
			}
			detail := expectError(t, r, tt.status)
			if tt.badField != "" {
				d, ok := detail.(map[string]any)
				if !ok || d[tt.badField] == nil {
					t.Errorf("detail %v does not name %q", detail, tt.badField)
				}
			}
		})
	}
	for _, m := range h.pub.sent() {
		var p map[string]any
		_ = json.Unmarshal(m.Body, &p)
		if p["jurisdiction"] != "mga" || p["aggregateId"] != "mga:jane@example.com" {
			t.Errorf("published payload not normalised: %s", m.Body)
		}
	}
}

func TestPostRegistrationBrokerDown(t *testing.T) {
	h := newHarness(t, nil)
	h.pub.setErr(errors.New("dial tcp 127.0.0.1:61613: connection refused"))
	body := map[string]any{"id": message.NewID(), "name": "A", "email": "a@example.com", "jurisdiction": "mga", "createdAt": "2025-01-31T12:00:00Z"}
	detail := expectError(t, h.do(t, "POST", "/registration", body), http.StatusServiceUnavailable)
	if d, _ := detail.(map[string]any); d["id"] != body["id"] {
		t.Errorf("503 detail %v should carry the id to retry with", detail)
	}
	if len(h.pub.sent()) != 0 {
		t.Error("nothing should be recorded as published")
	}
}

func TestRequestLogs(t *testing.T) {
	const token = "s3cr3t-admin-token"
	h := newHarness(t, func(c *Config) { c.AdminToken = token })
	r := h.do(t, "GET", "/admin/events", nil, "Authorization", "Bearer "+token, "X-Request-Id", "req-123")
	if r.Code != 200 {
		t.Fatalf("%d %s", r.Code, r.Body)
	}
	h.do(t, "GET", "/admin/events", nil, "Authorization", "Bearer wrong-"+token)
	logs := h.log.String()
	if strings.Contains(logs, token) || strings.Contains(strings.ToLower(logs), "bearer ") {
		t.Errorf("logs leak the token:\n%s", logs)
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != "http request" {
			continue
		}
		if m["request_id"] == "req-123" && m["method"] == "GET" && m["path"] == "/admin/events" && m["status"] == float64(200) && m["latency_ms"] != nil {
			found = true
		}
	}
	if !found {
		t.Errorf("no request log line with method, path, status, latency and request id:\n%s", logs)
	}
}
