package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Issue 22.2, "Emit can write CloudEvents too": in either mode the message an inboxd
// consumer receives decodes to the same CloudEvent (journal id from source + id, type,
// subject as aggregate, data), and emitting it again from a handler that runs again is a
// duplicate, not a second message.
func TestCloudEventMessage(t *testing.T) {
	t.Parallel()
	e := CloudEvent{ID: "evt-456", Source: "/orders", Type: "order.placed", Subject: "o-1",
		Time: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC), Data: json.RawMessage(`{"total":12}`),
		Extensions: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	for _, mode := range []CEMode{CEStructured, CEBinary} {
		o, err := CloudEventMessage("/queue/orders", e, mode)
		if err != nil {
			t.Fatalf("mode %d: %v", mode, err)
		}
		ev, err := message.Decode(o.Body, func(k string) string { return o.Headers[k] }, message.Options{
			Headers: func(yield func(string, string) bool) {
				for k, v := range o.Headers {
					if !yield(k, v) {
						return
					}
				}
			}})
		if err != nil {
			t.Fatalf("mode %d: the consumer refuses it: %v", mode, err)
		}
		if ev.ID != message.CloudEventID("/orders", "evt-456") || ev.ID != o.ID || ev.EventType != "order.placed" || ev.AggregateID != "o-1" {
			t.Errorf("mode %d: decoded %s %s %s (outbox id %s)", mode, ev.ID, ev.EventType, ev.AggregateID, o.ID)
		}
		var doc struct {
			Data        map[string]int `json:"data"`
			Time        string         `json:"time"`
			Traceparent string         `json:"traceparent"`
		}
		if err := json.Unmarshal(ev.Payload, &doc); err != nil || doc.Data["total"] != 12 || doc.Time != "2026-11-26T12:00:00Z" || doc.Traceparent == "" {
			t.Errorf("mode %d: structured form %s (%v)", mode, ev.Payload, err)
		}
	}
	for _, bad := range []CloudEvent{{Source: "s", Type: "t"}, {ID: "i", Type: "t"}, {ID: "i", Source: "s"},
		{ID: "i", Source: "s", Type: "t", Data: json.RawMessage(`{`)},
		{ID: "i", Source: "s", Type: "t", Extensions: map[string]string{"Bad-Name": "x"}},
		{ID: "i", Source: "s", Type: "t", Extensions: map[string]string{"id": "x"}}} {
		if _, err := CloudEventMessage("/queue/q", bad, CEBinary); !errors.Is(err, ErrInvalid) {
			t.Errorf("CloudEventMessage(%+v) = %v, want ErrInvalid", bad, err)
		}
	}

	db := testenv.NewDB(t)
	ctx := context.Background()
	o, err := CloudEventMessage("/queue/orders", e, CEStructured)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			_, err := Emit(ctx, tx, o)
			return err
		})
		if want := i == 1; errors.Is(err, ErrDuplicateID) != want || (err != nil && !want) {
			t.Fatalf("emit %d: %v", i+1, err)
		}
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM outbox`); n != 1 {
		t.Fatalf("outbox rows = %d, want 1", n)
	}
}
