package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

const editID = "6f1c9c1e-0000-4000-8000-000000000001"

// TestCheckEdit: each refusal of an edited payload, and what passes.
func TestCheckEdit(t *testing.T) {
	t.Parallel()
	old := json.RawMessage(`{"id":"` + editID + `","type":"payment","amount":"twelve"}`)
	ce := json.RawMessage(`{"specversion":"1.0","id":"evt-1","source":"/orders","type":"order.placed","data":{"n":1}}`)
	tests := []struct {
		name    string
		old     json.RawMessage
		payload string
		reason  string // "" means accepted
		field   string
		idField string
	}{
		{"fixed amount", old, `{"id":"` + editID + `","type":"payment","amount":"12.00"}`, "", "", ""},
		{"spacing and order do not matter", old, `{ "amount":"12.00", "type":"payment", "id":"` + editID + `" }`, "", "", ""},
		{"new field", old, `{"id":"` + editID + `","type":"payment","amount":"12.00","currency":"EUR"}`, "", "", ""},
		{"too large", old, `{"id":"` + editID + `","type":"payment","pad":"` + strings.Repeat("x", 200) + `"}`, journal.EditTooLarge, "", ""},
		{"not JSON", old, `{"id":`, journal.EditNotJSON, "", ""},
		{"trailing data", old, `{"id":"` + editID + `","type":"payment"} {}`, journal.EditNotJSON, "", ""},
		{"invalid UTF-8", old, "{\"id\":\"" + editID + "\",\"type\":\"payment\",\"a\":\"\xff\"}", journal.EditNotJSON, "", ""},
		{"NUL", old, `{"id":"` + editID + `","type":"payment","a":"x\u0000"}`, journal.EditNotJSON, "", ""},
		{"NUL in a key", old, `{"id":"` + editID + `","type":"payment","\u0000":1}`, journal.EditNotJSON, "", ""},
		{"array", old, `[1]`, journal.EditNotObject, "", ""},
		{"null", old, `null`, journal.EditNotObject, "", ""},
		{"id changed", old, `{"id":"6f1c9c1e-0000-4000-8000-000000000002","type":"payment","amount":"12.00"}`, journal.EditIdentityChanged, "id", ""},
		{"id upper-cased", old, `{"id":"` + strings.ToUpper(editID) + `","type":"payment","amount":"12.00"}`, journal.EditIdentityChanged, "id", ""},
		{"id removed", old, `{"type":"payment","amount":"12.00"}`, journal.EditIdentityChanged, "id", ""},
		{"type changed", old, `{"id":"` + editID + `","type":"refund","amount":"12.00"}`, journal.EditIdentityChanged, "type", ""},
		{"type removed", old, `{"id":"` + editID + `","amount":"12.00"}`, journal.EditIdentityChanged, "type", ""},
		{"aggregate added", old, `{"id":"` + editID + `","type":"payment","aggregateId":"a2","amount":"12.00"}`, journal.EditIdentityChanged, "aggregateId", ""},
		{"unchanged", old, `{"type":"payment","id":"` + editID + `","amount":"twelve"}`, journal.EditUnchanged, "", ""},
		{"CloudEvent data", ce, `{"specversion":"1.0","id":"evt-1","source":"/orders","type":"order.placed","data":{"n":2}}`, "", "", ""},
		{"CloudEvent source", ce, `{"specversion":"1.0","id":"evt-1","source":"/returns","type":"order.placed","data":{"n":2}}`, journal.EditIdentityChanged, "source", ""},
		{"id from another field", json.RawMessage(`{"eventId":"evt-9","type":"payment","amount":"x"}`), `{"eventId":"evt-10","type":"payment","amount":"x"}`, journal.EditIdentityChanged, "eventId", "eventId"},
		{"id from another field, kept", json.RawMessage(`{"eventId":"evt-9","type":"payment","amount":"x"}`), `{"eventId":"evt-9","type":"payment","amount":"1"}`, "", "", "eventId"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := journal.CheckEdit(tt.old, []byte(tt.payload), 128, tt.idField)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var r *journal.EditRefusal
			if !errors.As(err, &r) || r.Reason != tt.reason || r.Field != tt.field {
				t.Fatalf("got %v, want reason %s field %q", err, tt.reason, tt.field)
			}
		})
	}
}

// FuzzCheckEdit: any payload is either refused with an *EditRefusal, or is a JSON object
// that keeps the original's id and type and that PostgreSQL's JSONB can store (no NUL,
// valid UTF-8).
func FuzzCheckEdit(f *testing.F) {
	old := json.RawMessage(`{"id":"` + editID + `","type":"payment","amount":"twelve"}`)
	f.Add([]byte(`{"id":"` + editID + `","type":"payment","amount":"12.00"}`))
	f.Add([]byte(`{"id":"` + editID + `","type":"payment","a":"\u0000"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte("{\"id\":\"" + editID + "\",\"type\":\"payment\",\"a\":\"\xff\"}"))
	f.Fuzz(func(t *testing.T, payload []byte) {
		err := journal.CheckEdit(old, payload, 1024, "")
		if err != nil {
			var r *journal.EditRefusal
			if !errors.As(err, &r) {
				t.Fatalf("not a refusal: %v", err)
			}
			return
		}
		var doc map[string]any
		if json.Unmarshal(payload, &doc) != nil || doc == nil {
			t.Fatalf("accepted %q, not a JSON object", payload)
		}
		if doc["id"] != editID || doc["type"] != "payment" {
			t.Fatalf("accepted %q, which changes the identity", payload)
		}
		if strings.Contains(fmt.Sprint(doc), "\x00") || len(payload) > 1024 {
			t.Fatalf("accepted %q", payload)
		}
	})
}

// TestEditAndRetry: the edit replaces the payload of a DEAD head, keeps the original with
// who, from where and when, requeues the entry and unparks its aggregate; refusals and
// an entry that is not DEAD change nothing.
func TestEditAndRetry(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	ids := ingest(t, db, "payment", "agg-1", `{"amount":"twelve"}`, `{"amount":"1.00"}`)
	if _, err := db.Pool.Exec(ctx, `UPDATE journal_state SET status = 'DEAD', attempts = 5, last_error = 'bad amount' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := journal.SyncHeadsOf(ctx, db.Pool, ids[:1]); err != nil {
		t.Fatal(err)
	}
	parked := func() bool {
		var p bool
		if err := db.Pool.QueryRow(ctx, `SELECT parked FROM aggregate_head WHERE aggregate_id = 'agg-1'`).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if !parked() {
		t.Fatal("the DEAD head does not park its aggregate")
	}
	orig, err := journal.Get(ctx, db.Pool, ids[0])
	if err != nil {
		t.Fatal(err)
	}

	// Refused: the entry and its history stay as they were.
	_, _, err = journal.EditAndRetry(ctx, db.Pool, ids[0], journal.EditRequest{Payload: []byte(`{"id":"` + message.NewID() + `","type":"payment","amount":"12.00"}`), By: "alice", MaxBytes: 1024})
	var refusal *journal.EditRefusal
	if !errors.As(err, &refusal) || refusal.Field != "id" {
		t.Fatalf("changed id: %v", err)
	}
	if _, _, err := journal.EditAndRetry(ctx, db.Pool, message.NewID(), journal.EditRequest{Payload: []byte(`{}`), By: "alice", MaxBytes: 1024}); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	r, _, err := journal.EditAndRetry(ctx, db.Pool, ids[1], journal.EditRequest{Payload: []byte(`{"id":"` + ids[1] + `","type":"payment","amount":"2.00"}`), By: "alice", MaxBytes: 1024})
	if !errors.Is(err, journal.ErrNotEditable) || r.Status != journal.StatusReceived {
		t.Fatalf("RECEIVED entry: %v %+v", err, r)
	}
	if h, _ := journal.Attempts(ctx, db.Pool, ids[0]); len(h) != 0 {
		t.Fatalf("a refused edit left history: %+v", h)
	}

	fixed := `{"id":"` + ids[0] + `","type":"payment","amount":"12.00"}`
	r, ed, err := journal.EditAndRetry(ctx, db.Pool, ids[0], journal.EditRequest{Payload: []byte(fixed), By: "alice", From: "10.0.0.1", MaxBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != ids[0] || r.Status != journal.StatusFailed || r.Attempts != 0 || !jsonEqual(r.Payload, fixed) {
		t.Fatalf("after the edit: %+v", r)
	}
	if parked() {
		t.Error("the aggregate is still parked after the edit")
	}
	history, err := journal.Attempts(ctx, db.Pool, ids[0])
	if err != nil || len(history) != 1 {
		t.Fatalf("history: %+v %v", history, err)
	}
	a := history[0]
	if a.Outcome != journal.OutcomeEdited || a.Attempt != 5 || a.Runs != 0 || a.EditedBy == nil || *a.EditedBy != "alice" ||
		a.EditedFrom == nil || *a.EditedFrom != "10.0.0.1" || !a.RecordedAt.Equal(ed.EditedAt) || !jsonEqual(a.Original, string(orig.Payload)) {
		t.Errorf("history row: %+v, want the edit with the original %s", a, orig.Payload)
	}
	// The entry is no longer DEAD: a second edit is refused.
	if _, _, err := journal.EditAndRetry(ctx, db.Pool, ids[0], journal.EditRequest{Payload: []byte(fixed), By: "bob", MaxBytes: 1024}); !errors.Is(err, journal.ErrNotEditable) {
		t.Errorf("second edit: %v", err)
	}
}

// ingest journals events of one type and aggregate with the given payload fields.
func ingest(t *testing.T, db *testenv.DB, eventType, aggregate string, payloads ...string) []string {
	t.Helper()
	var b journal.Batch
	var ids []string
	for _, p := range payloads {
		id := message.NewID()
		var doc map[string]any
		if err := json.Unmarshal([]byte(p), &doc); err != nil {
			t.Fatal(err)
		}
		doc["id"], doc["type"] = id, eventType
		body, _ := json.Marshal(doc)
		ev, err := message.Decode(body, func(h string) string {
			if h == message.HeaderAggregateID {
				return aggregate
			}
			return ""
		}, message.Options{})
		if err != nil {
			t.Fatal(err)
		}
		b.Entries = append(b.Entries, journal.Entry{Event: ev, Destination: "/queue/x"})
		ids = append(ids, id)
	}
	if _, err := journal.Ingest(context.Background(), db.Pool, b); err != nil {
		t.Fatal(err)
	}
	return ids
}

func jsonEqual(a json.RawMessage, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

// TestEditAndRetryConcurrent: two operators edit the same DEAD entry at once. The row
// lock makes one edit win; the other finds the entry no longer DEAD, so the history
// holds exactly one edit and the payload is the winner's.
func TestEditAndRetryConcurrent(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	ids := ingest(t, db, "payment", "agg-c", `{"amount":"twelve"}`)
	if _, err := db.Pool.Exec(ctx, `UPDATE journal_state SET status = 'DEAD', attempts = 5 WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := journal.SyncHeadsOf(ctx, db.Pool, ids); err != nil {
		t.Fatal(err)
	}
	type result struct {
		by  string
		err error
	}
	results := make(chan result, 2)
	for _, by := range []string{"alice", "bob"} {
		go func() {
			payload := `{"id":"` + ids[0] + `","type":"payment","amount":"12.00","by":"` + by + `"}`
			_, _, err := journal.EditAndRetry(ctx, db.Pool, ids[0], journal.EditRequest{Payload: []byte(payload), By: by, MaxBytes: 1024})
			results <- result{by, err}
		}()
	}
	var winner string
	for range 2 {
		r := <-results
		switch {
		case r.err == nil && winner == "":
			winner = r.by
		case errors.Is(r.err, journal.ErrNotEditable):
		default:
			t.Fatalf("%s: %v (winner %q)", r.by, r.err, winner)
		}
	}
	if winner == "" {
		t.Fatal("neither edit won")
	}
	history, err := journal.Attempts(ctx, db.Pool, ids[0])
	if err != nil || len(history) != 1 || *history[0].EditedBy != winner {
		t.Fatalf("history %+v %v, want one edit by %s", history, err, winner)
	}
	e, err := journal.Get(ctx, db.Pool, ids[0])
	if err != nil || !strings.Contains(string(e.Payload), `"by": "`+winner+`"`) {
		t.Fatalf("payload %s, want %s's", e.Payload, winner)
	}
}
