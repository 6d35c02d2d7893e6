package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/api/apitest"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

type (
	fakePublisher = apitest.Publisher
	response      = apitest.Response
)

var expectError = apitest.ExpectError

const testDestination = "/queue/inboxd-test.api"

type harness struct {
	srv *Server
	db  *testenv.DB
	pub *fakePublisher
	log *testenv.Buffer
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	db := testenv.NewDB(t)
	h := &harness{db: db, pub: &fakePublisher{}, log: &testenv.Buffer{}}
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

func (h *harness) do(t *testing.T, method, path string, body any, headers ...string) response {
	t.Helper()
	return apitest.Do(t, h.srv, method, path, body, headers...)
}

// seedEvents journals events with the given payload fields; each gets an id.
func seedEvents(t *testing.T, db database.DB, eventType string, payloads ...map[string]any) []string {
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

func setStatus(t *testing.T, db database.DB, status journal.Status, ids ...string) {
	t.Helper()
	if _, err := db.Exec(context.Background(), `UPDATE journal_state SET status = $1, attempts = 5, last_error = 'boom' WHERE id = ANY ($2::UUID[])`, string(status), ids); err != nil {
		t.Fatal(err)
	}
	if err := journal.SyncHeadsOf(context.Background(), db, ids); err != nil {
		t.Fatal(err)
	}
}

func TestErrorShape(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	tests := []struct {
		method, path string
		body         any
		status       int
	}{
		{"GET", "/nope", nil, 404},
		{"DELETE", "/journal/stats", nil, 405},
		{"PUT", "/journal/stats", nil, 405},
		{"POST", "/admin/events/replay", "{", 400},
		{"GET", "/journal/not-a-uuid", nil, 404}, // an event id (Event.Key) nobody sent
		{"GET", "/journal/" + strings.Repeat("k", 1025), nil, 400},
		{"GET", "/journal/" + message.NewID(), nil, 404},
		{"GET", "/journal/-events", nil, 404},
		{"POST", "/admin/events/replay", strings.Repeat("x", 2<<20), 413},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			expectError(t, h.do(t, tt.method, tt.path, tt.body), tt.status)
		})
	}
	if r := h.do(t, "DELETE", "/journal/stats", nil); r.Header.Get("Allow") == "" {
		t.Error("405 without an Allow header")
	}
}

func TestRequestLogs(t *testing.T) {
	t.Parallel()
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
