package inboxdtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/inboxdtest"
)

// A handler change tested against the history the old handler recorded: the unchanged
// handler shows no difference (the stamped time is a noise rule), and the changed one
// exactly its changes, for exactly the events it changes; the handlers see ModeShadow.
func TestShadowKit(t *testing.T) {
	pool := inboxdtest.NewDB(t)
	handler := func(rejectBig bool) inboxd.HandlerFunc {
		return func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
			var p struct {
				Amount int `json:"amount"`
			}
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				return inboxd.Reject(err)
			}
			if rejectBig && p.Amount > 100 {
				return inboxd.Reject(fmt.Errorf("amount %d over the limit", p.Amount))
			}
			body, _ := json.Marshal(map[string]any{"order": ev.Key, "at": time.Now().UnixNano()})
			_, err := inboxd.Emit(ctx, tx, inboxd.Outgoing{Destination: "/queue/kit-out", Body: body})
			return err
		}
	}
	var msgs []inboxdtest.Message
	for i := range 6 {
		msgs = append(msgs, inboxdtest.Message{Body: fmt.Appendf(nil, `{"id":"ord-%d","amount":%d}`, i, i*50)})
	}
	inboxdtest.Run(t, pool, "order.placed", handler(false), msgs...)

	opts := inboxd.ShadowOptions{Ignore: []string{"body.$.at"}}
	same := inboxdtest.Shadow(t, pool, "order.placed", handler(false), opts)
	if same.Summary.Events != 6 || same.Summary.Differing != 0 {
		t.Fatalf("unchanged handler: %+v", same.Summary)
	}
	changed := inboxdtest.Shadow(t, pool, "order.placed", handler(true), opts)
	if changed.Summary.Differing != 3 || changed.Summary.OutcomeChanged != 3 || changed.Summary.MessagesRemoved != 3 {
		t.Fatalf("changed handler: %+v", changed.Summary)
	}
	for i, ev := range changed.Events {
		if want := inboxd.JournalID(fmt.Sprintf("ord-%d", i+3)); ev.ID != want || ev.Shadow.Outcome != "rejected" {
			t.Errorf("event %d: %s %+v, want %s rejected", i, ev.ID, ev.Shadow, want)
		}
	}

	var modes []inboxd.EventMode
	inboxdtest.Shadow(t, pool, "order.placed", inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		modes = append(modes, ev.Mode)
		return nil
	}), inboxd.ShadowOptions{Limit: 2})
	if fmt.Sprint(modes) != "[shadow shadow]" {
		t.Fatalf("modes %v", modes)
	}
}
