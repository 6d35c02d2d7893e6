package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
)

// TestAdminEditAndRetry: each refusal is a clear 4xx that changes nothing; the edit
// replaces the payload, keeps the original with who, from where and when in the attempt
// history (GET /journal/{id}, timeline), and requeues the entry; only the admin token may do it (issue 22,
// item 5).
func TestAdminEditAndRetry(t *testing.T) {
	t.Parallel()
	const admin, reader = "adm-7c1d", "read-2b9e"
	h := newHarness(t, func(c *Config) { c.AdminToken, c.ReadToken, c.MaxEventBytes = admin, reader, 256 })
	ids := seedEvents(t, h.db.Pool, "payment", map[string]any{"amount": "twelve"}, map[string]any{"amount": "1.00"})
	dead, other := ids[0], ids[1]
	setStatus(t, h.db.Pool, journal.StatusDead, dead)
	auth := []string{"Authorization", "Bearer " + admin}
	fixed := map[string]any{"id": dead, "amount": "12.00"}
	path := "/admin/events/" + dead + "/edit-and-retry"

	tests := []struct {
		name   string
		path   string
		body   any
		hdr    []string
		status int
		reason string
	}{
		{"no token", path, map[string]any{"by": "alice", "payload": fixed}, nil, http.StatusUnauthorized, ""},
		{"read token", path, map[string]any{"by": "alice", "payload": fixed}, []string{"Authorization", "Bearer " + reader}, http.StatusUnauthorized, ""},
		{"unknown event id", "/admin/events/nope/edit-and-retry", map[string]any{"by": "alice", "payload": fixed}, auth, 404, ""},
		{"unknown id", "/admin/events/" + message.NewID() + "/edit-and-retry", map[string]any{"by": "alice", "payload": fixed}, auth, 404, ""},
		{"not DEAD", "/admin/events/" + other + "/edit-and-retry", map[string]any{"by": "alice", "payload": map[string]any{"id": other, "amount": "2.00"}}, auth, 409, ""},
		{"no by", path, map[string]any{"payload": fixed}, auth, 400, ""},
		{"by too long", path, map[string]any{"by": strings.Repeat("x", 201), "payload": fixed}, auth, 400, ""},
		{"unknown field", path, map[string]any{"by": "alice", "payload": fixed, "force": true}, auth, 400, ""},
		{"no payload", path, map[string]any{"by": "alice"}, auth, 400, ""},
		{"null payload", path, map[string]any{"by": "alice", "payload": nil}, auth, 400, ""},
		{"not JSON", path, map[string]any{"by": "alice", "payload": `{"id":`}, auth, 400, journal.EditNotJSON},
		{"not an object", path, map[string]any{"by": "alice", "payload": []int{1}}, auth, 400, journal.EditNotObject},
		{"NUL", path, map[string]any{"by": "alice", "payload": map[string]any{"id": dead, "amount": "1\x00"}}, auth, 400, journal.EditNotJSON},
		{"unchanged", path, map[string]any{"by": "alice", "payload": map[string]any{"id": dead, "amount": "twelve"}}, auth, 400, journal.EditUnchanged},
		{"too large", path, map[string]any{"by": "alice", "payload": map[string]any{"id": dead, "amount": strings.Repeat("9", 300)}}, auth, 413, journal.EditTooLarge},
		{"id changed", path, map[string]any{"by": "alice", "payload": map[string]any{"id": message.NewID(), "amount": "12.00"}}, auth, 422, journal.EditIdentityChanged},
		{"type added", path, map[string]any{"by": "alice", "payload": map[string]any{"id": dead, "type": "refund", "amount": "12.00"}}, auth, 422, journal.EditIdentityChanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(t, "POST", tt.path, tt.body, tt.hdr...)
			expectError(t, r, tt.status)
			if tt.reason != "" {
				var e struct {
					Detail map[string]string `json:"detail"`
				}
				r.JSON(t, &e)
				if e.Detail["reason"] != tt.reason || e.Detail["payload"] == "" {
					t.Errorf("detail %v, want reason %s", e.Detail, tt.reason)
				}
			}
		})
	}
	if e, err := journal.Get(context.Background(), h.db.Pool, dead); err != nil || e.Status != journal.StatusDead || !strings.Contains(string(e.Payload), "twelve") {
		t.Fatalf("refusals changed the entry: %+v %v", e, err)
	}

	// The console sends the textarea's text as a string.
	text, _ := json.Marshal(fixed)
	r := h.do(t, "POST", path, map[string]any{"by": "alice", "payload": string(text)}, auth...)
	var res editResponse
	r.JSON(t, &res)
	if r.Code != 200 || !res.Retried || res.ID != dead || res.Status != journal.StatusFailed || res.EditedBy != "alice" || res.EditedFrom == "" || res.EditedAt.IsZero() {
		t.Fatalf("edit: %d %s", r.Code, r.Body)
	}
	r = h.do(t, "GET", "/journal/"+dead, nil, auth...)
	var got entry
	r.JSON(t, &got)
	if got.ID != dead || got.Status != journal.StatusFailed || got.Attempts != 0 || !strings.Contains(string(got.Payload), "12.00") {
		t.Fatalf("after the edit: %s", r.Body)
	}
	if len(got.Timeline) != 1 || got.Timeline[0].Outcome != journal.OutcomeEdited || got.Timeline[0].EditedBy == nil ||
		*got.Timeline[0].EditedBy != "alice" || !got.Timeline[0].RecordedAt.Equal(res.EditedAt) ||
		!strings.Contains(string(got.Timeline[0].OriginalPayload), `"twelve"`) {
		t.Fatalf("history: %s", r.Body)
	}
	expectError(t, h.do(t, "POST", path, map[string]any{"by": "alice", "payload": fixed}, auth...), http.StatusConflict)
	if log := h.log.String(); !strings.Contains(log, `"action":"edit_and_retry"`) || !strings.Contains(log, `"by":"alice"`) || strings.Contains(log, "12.00") {
		t.Error("edit not logged with who, or logged with the payload")
	}
}
