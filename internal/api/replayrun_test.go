package api

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/journal"
)

// The replay routes: plan stores a frozen plan, start records the reason and the admin
// role, pause and cancel change its state, a change the state does not allow is 409,
// an unknown run 404, a start without a reason 400; the changes are audited.
func TestReplayRoutes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ids := seedEvents(t, h.db.Pool, "order.placed", map[string]any{"aggregateId": "a"}, map[string]any{"aggregateId": "a"})
	if _, err := h.db.Pool.Exec(context.Background(), `UPDATE journal_state SET status = 'PROCESSED'`); err != nil {
		t.Fatal(err)
	}
	r := h.do(t, "POST", "/admin/replays", map[string]any{"type": "order.placed"})
	var run journal.ReplayRun
	if r.Code != 201 || json.Unmarshal(r.Body, &run) != nil || run.Events != 2 || run.State != "planned" || run.Pending != 2 {
		t.Fatalf("plan: %d %s", r.Code, r.Body)
	}
	if r := h.do(t, "POST", "/admin/replays", map[string]any{"statuses": []string{"DEAD"}}); r.Code != 400 {
		t.Errorf("plan of DEAD events: %d", r.Code)
	}
	if r := h.do(t, "POST", "/admin/replays/"+run.ID+"/start", map[string]any{}); r.Code != 400 {
		t.Errorf("start without a reason: %d", r.Code)
	}
	r = h.do(t, "POST", "/admin/replays/"+run.ID+"/start", map[string]any{"reason": "fix", "rate": 10})
	if r.Code != 200 || json.Unmarshal(r.Body, &run) != nil || run.State != "running" || run.StartedBy != "admin" || run.Reason != "fix" {
		t.Fatalf("start: %d %s", r.Code, r.Body)
	}
	if r := h.do(t, "POST", "/admin/replays/"+run.ID+"/resume", map[string]any{}); r.Code != 409 {
		t.Errorf("resuming a running run: %d", r.Code)
	}
	if r := h.do(t, "POST", "/admin/replays/"+run.ID+"/pause", map[string]any{}); r.Code != 200 {
		t.Errorf("pause: %d %s", r.Code, r.Body)
	}
	r = h.do(t, "POST", "/admin/replays/"+run.ID+"/cancel", map[string]any{})
	if r.Code != 200 || json.Unmarshal(r.Body, &run) != nil || run.State != "cancelled" {
		t.Errorf("cancel: %d %s", r.Code, r.Body)
	}
	if r := h.do(t, "GET", "/admin/replays/"+run.ID, nil); r.Code != 200 {
		t.Errorf("status: %d", r.Code)
	}
	if r := h.do(t, "GET", "/admin/replays/"+ids[0], nil); r.Code != 404 {
		t.Errorf("unknown run: %d", r.Code)
	}
	var list struct{ Items []journal.ReplayRun }
	if r := h.do(t, "GET", "/admin/replays", nil); r.Code != 200 || json.Unmarshal(r.Body, &list) != nil ||
		len(list.Items) != 1 || list.Items[0].ID != run.ID || list.Items[0].Pending != 2 || list.Items[0].Events != 2 {
		t.Errorf("list: %d %s", r.Code, r.Body)
	}
	for q, want := range map[string]int{"?state=cancelled": 1, "?state=running": 0, "?state=nope": -400, "?limit=0": -400, "?limit=100": 1} {
		r := h.do(t, "GET", "/admin/replays"+q, nil)
		if want < 0 {
			if r.Code != -want {
				t.Errorf("list%s: %d, want %d", q, r.Code, -want)
			}
			continue
		}
		list.Items = nil
		if r.Code != 200 || json.Unmarshal(r.Body, &list) != nil || len(list.Items) != want {
			t.Errorf("list%s: %d %s, want %d runs", q, r.Code, r.Body, want)
		}
	}
	if !strings.Contains(h.log.String(), `"action":"replay start"`) {
		t.Errorf("start not audited:\n%s", h.log.String())
	}
}
