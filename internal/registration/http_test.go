package registration_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/inboxd/inboxd/internal/api"
	"github.com/inboxd/inboxd/internal/api/apitest"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

const testDestination = "/queue/inboxd-test.registration"

// harness is the API with the demo's routes, over a fake publisher by default.
type harness struct {
	srv *api.Server
	pub *apitest.Publisher
}

func newHarness(t *testing.T, mod func(*api.Config)) *harness {
	t.Helper()
	db := testenv.NewDB(t)
	h := &harness{pub: &apitest.Publisher{}}
	cfg := api.Config{
		Pool: db.Pool, Publisher: h.pub, Destination: testDestination,
		Logger:     slog.New(slog.DiscardHandler),
		Extensions: []api.Extension{registration.Routes()},
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	return h
}

func (h *harness) do(t *testing.T, method, path string, body any, headers ...string) apitest.Response {
	t.Helper()
	return apitest.Do(t, h.srv, method, path, body, headers...)
}

var expectError = apitest.ExpectError

// accepted is the body of 202 Accepted.
type accepted struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// The reference tutorial's requests: the slash after /registration, and its inline
// payload; GET / links to the form, and GET /registration answers with links.
func TestTutorialRoutesAndLinks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	inline := `{"name":"User","email":"user@email.com","jurisdiction":"mga","createdAt":"2023-01-12T09:21:04.571+00:00"}`
	for _, path := range []string{"/registration/", "/registration"} {
		r := h.do(t, "POST", path, inline)
		if r.Code != 202 || !strings.HasPrefix(r.Header.Get("Location"), "/journal/") {
			t.Fatalf("POST %s: %d %s", path, r.Code, r.Body)
		}
	}
	if n := len(h.pub.Sent()); n != 2 {
		t.Fatalf("published %d, want 2", n)
	}
	var idx struct {
		Links api.Links `json:"_links"`
	}
	h.do(t, "GET", "/", nil).JSON(t, &idx)
	for _, rel := range []string{"registration-form", "registration", "registration-events", "journal"} {
		l, ok := idx.Links[rel]
		if !ok {
			t.Errorf("GET / has no %q link", rel)
			continue
		}
		if r := h.do(t, "GET", l.Href, nil); r.Code != 200 {
			t.Errorf("link %s → GET %s: %d %s", rel, l.Href, r.Code, r.Body)
		}
	}
	if r := h.do(t, "GET", "/registration", nil); r.Code != 200 || !strings.Contains(string(r.Body), `"_links"`) {
		t.Errorf("GET /registration: %d %s", r.Code, r.Body)
	}
	// The routes are in the OpenAPI document the API serves, and the core's are kept.
	var doc struct {
		Paths map[string]any `json:"paths"`
	}
	h.do(t, "GET", "/openapi.json", nil).JSON(t, &doc)
	for _, p := range []string{"/registration", "/registration/", "/registration/form", "/journal/{id}"} {
		if doc.Paths[p] == nil {
			t.Errorf("/openapi.json has no %s", p)
		}
	}
}

// Every POST demands JSON (CSRF), the demo's too; and the routes answer 405, not 404,
// to other methods.
func TestRegistrationRefusesOtherContentTypes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	expectError(t, h.do(t, "POST", "/registration", `{"name":"a"}`, "Content-Type", "text/plain"), http.StatusUnsupportedMediaType)
	expectError(t, h.do(t, "DELETE", "/registration", nil), http.StatusMethodNotAllowed)
	expectError(t, h.do(t, "POST", "/registration", "{"), http.StatusBadRequest)
	expectError(t, h.do(t, "POST", "/registration", strings.Repeat("x", 2<<20)), http.StatusRequestEntityTooLarge)
	if n := len(h.pub.Sent()); n != 0 {
		t.Fatalf("%d published", n)
	}
}

func TestRegistrationFormRoundTrip(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	var forms [2]map[string]any
	for i := range forms {
		r := h.do(t, "GET", "/registration/form", nil)
		if r.Code != 200 {
			t.Fatalf("form: %d %s", r.Code, r.Body)
		}
		r.JSON(t, &forms[i])
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
	var acc accepted
	r.JSON(t, &acc)
	if _, ok := message.CanonicalUUID(acc.ID); !ok || acc.Status != "accepted" {
		t.Errorf("accepted %+v", acc)
	}
	if loc := r.Header.Get("Location"); loc != "/journal/"+acc.ID {
		t.Errorf("Location = %q", loc)
	}
	msgs := h.pub.Sent()
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
	t.Parallel()
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
	for _, m := range h.pub.Sent() {
		var p map[string]any
		_ = json.Unmarshal(m.Body, &p)
		if p["jurisdiction"] != "mga" || p["aggregateId"] != "mga:jane@example.com" {
			t.Errorf("published payload not normalised: %s", m.Body)
		}
	}
}

func TestPostRegistrationBrokerDown(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.pub.SetErr(errors.New("dial tcp 127.0.0.1:61613: connection refused"))
	body := map[string]any{"id": message.NewID(), "name": "A", "email": "a@example.com", "jurisdiction": "mga", "createdAt": "2025-01-31T12:00:00Z"}
	detail := expectError(t, h.do(t, "POST", "/registration", body), http.StatusServiceUnavailable)
	if d, _ := detail.(map[string]any); d["id"] != body["id"] {
		t.Errorf("503 detail %v should carry the id to retry with", detail)
	}
	if len(h.pub.Sent()) != 0 {
		t.Error("nothing should be recorded as published")
	}
}

// Issue 10: POST /registration answered 202 for what the handler then rejected
// (createdAt 0001-01-01, lookalike addresses); the API now runs the handler's rules.
func TestRegistrationAcceptsOnlyWhatTheHandlerWould(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	reg := func(k, v string) map[string]any {
		m := map[string]any{"name": "José", "email": "jose@example.com", "jurisdiction": "mga", "createdAt": "2025-01-31T12:00:00Z"}
		m[k] = v
		return m
	}
	for _, tc := range []struct{ field, value string }{
		{"createdAt", "0001-01-01T00:00:00Z"},
		{"createdAt", "1000-01-01T00:00:00Z"},
		{"email", "jo\u200bse@example.com"},
		{"email", "\uff4aose@example.com"},
		{"email", "j\u043ese@example.com"}, // Cyrillic о
		{"name", "Jos\u00e9\u202e"},
	} {
		detail := expectError(t, h.do(t, "POST", "/registration", reg(tc.field, tc.value)), http.StatusBadRequest)
		if d, _ := detail.(map[string]any); d[tc.field] == nil {
			t.Errorf("%s %q: detail %v does not name the field", tc.field, tc.value, detail)
		}
	}
	if n := len(h.pub.Sent()); n != 0 {
		t.Fatalf("%d refused registrations published", n)
	}
	// NFD is published in NFC, lower case: the handler sees the same customer key.
	if r := h.do(t, "POST", "/registration", reg("email", "JOSE\u0301@Example.com")); r.Code != 202 {
		t.Fatalf("%d %s", r.Code, r.Body)
	}
	sent := h.pub.Sent()
	if len(sent) != 1 || !strings.Contains(string(sent[0].Body), "jos\u00e9@example.com") || sent[0].Headers["aggregate-id"] != "mga:jos\u00e9@example.com" {
		t.Errorf("published %s %v", sent[0].Body, sent[0].Headers)
	}
}

// receiptPublisher is a minimal real Publisher for this test: a persistent SEND with a
// receipt, on a connection of its own (internal/stompx is the production one).
type receiptPublisher struct {
	mu   sync.Mutex
	conn *stomp.Conn
}

func (p *receiptPublisher) Publish(ctx context.Context, dest string, body []byte, headers map[string]string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	opts := []func(*frame.Frame) error{stomp.SendOpt.Receipt, stomp.SendOpt.Header("persistent", "true")}
	for k, v := range headers {
		if k != api.HeaderContentType {
			opts = append(opts, stomp.SendOpt.Header(k, v))
		}
	}
	return p.conn.Send(dest, headers[api.HeaderContentType], body, opts...)
}

func dialBroker(t *testing.T, addr string) *stomp.Conn {
	t.Helper()
	conn, err := stomp.Dial("tcp", addr, stomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatalf("dialing %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Disconnect() })
	return conn
}

// TestPostRegistrationOverRealBroker posts a registration and reads the message back
// from ActiveMQ: persistent, with the event-type header, decodable by ingest. It runs
// with the production publisher (internal/stompx) and with the minimal one above.
func TestPostRegistrationOverRealBroker(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	publishers := map[string]func(t *testing.T) api.Publisher{
		"stompx": func(t *testing.T) api.Publisher {
			p := stompx.NewPublisher(stompx.Config{Addr: addr}, 2)
			t.Cleanup(func() { _ = p.Close() })
			return p
		},
		"go-stomp": func(t *testing.T) api.Publisher { return &receiptPublisher{conn: dialBroker(t, addr)} },
	}
	for name, newPublisher := range publishers {
		t.Run(name, func(t *testing.T) { testPostOverBroker(t, addr, newPublisher(t)) })
	}
}

func testPostOverBroker(t *testing.T, addr string, pub api.Publisher) {
	queue := testenv.Queue(t)
	h := newHarness(t, func(c *api.Config) {
		c.Publisher = pub
		c.Destination = queue
	})
	sub, err := dialBroker(t, addr).Subscribe(queue, stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}

	var form map[string]any
	h.do(t, "GET", "/registration/form", nil).JSON(t, &form)
	r := h.do(t, "POST", "/registration", form)
	if r.Code != http.StatusAccepted {
		t.Fatalf("post: %d %s", r.Code, r.Body)
	}
	var acc accepted
	r.JSON(t, &acc)

	select {
	case msg := <-sub.C:
		if msg.Err != nil {
			t.Fatal(msg.Err)
		}
		if got := msg.Header.Get(message.HeaderEventType); got != "registration" {
			t.Errorf("event-type header %q", got)
		}
		if got := msg.Header.Get("persistent"); got != "true" {
			t.Errorf("persistent header %q", got)
		}
		if msg.ContentType != "application/json" {
			t.Errorf("content type %q", msg.ContentType)
		}
		ev, err := message.Decode(msg.Body, msg.Header.Get, message.Options{})
		if err != nil {
			t.Fatalf("ingest would quarantine it: %v", err)
		}
		if ev.ID != acc.ID || ev.EventType != "registration" || ev.AggregateID != "mga:"+form["email"].(string) {
			t.Errorf("event %+v", ev)
		}
		var p map[string]any
		if err := json.Unmarshal(msg.Body, &p); err != nil || p["name"] != form["name"] {
			t.Errorf("payload %s", msg.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no message on the queue within 10s")
	}
}

// TestPostRegistrationBrokerUnreachable: stompx cannot dial (nothing listens on the
// port), so the API answers 503 rather than accepting a message it could lose.
func TestPostRegistrationBrokerUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	pub := stompx.NewPublisher(stompx.Config{Addr: addr, DialTimeout: 2 * time.Second}, 1)
	t.Cleanup(func() { _ = pub.Close() })
	h := newHarness(t, func(c *api.Config) { c.Publisher = pub })
	var form map[string]any
	h.do(t, "GET", "/registration/form", nil).JSON(t, &form)
	expectError(t, h.do(t, "POST", "/registration", form), http.StatusServiceUnavailable)
}

// TestPostRegistrationBrokerGone: a publisher whose connection is closed answers 503.
func TestPostRegistrationBrokerGone(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	conn, err := stomp.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Disconnect()
	h := newHarness(t, func(c *api.Config) {
		c.Publisher = &receiptPublisher{conn: conn}
		c.Destination = testenv.Queue(t)
	})
	var form map[string]any
	h.do(t, "GET", "/registration/form", nil).JSON(t, &form)
	expectError(t, h.do(t, "POST", "/registration", form), http.StatusServiceUnavailable)
}
