package api

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/journal"
)

func TestListEventsFilters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	regs := seedEvents(t, h.db.Pool, "registration",
		map[string]any{"jurisdiction": "mga", "email": "a@x.com", "address": map[string]any{"country": "mt"}},
		map[string]any{"jurisdiction": "mga", "email": "b@x.com"},
		map[string]any{"jurisdiction": "ukgc", "email": "c@x.com", "address": map[string]any{"country": "uk"}},
	)
	seedEvents(t, h.db.Pool, "payment", map[string]any{"jurisdiction": "mga"})
	setStatus(t, h.db.Pool, journal.StatusDead, regs[1])
	past := url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339))
	future := url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))

	tests := []struct {
		query  string
		want   int
		status int
	}{
		{"", 3, 200},
		{"jurisdiction=mga", 2, 200},
		{"jurisdiction=MGA", 0, 200}, // values match exactly, as JSON containment does
		{"jurisdiction=mga&email=b@x.com", 1, 200},
		{"address.country=mt", 1, 200},
		{"status=DEAD", 1, 200},
		{"status=dead,received", 3, 200},
		{"status=RECEIVED&status=DEAD&jurisdiction=ukgc", 1, 200},
		{"since=" + past, 3, 200},
		{"since=" + future, 0, 200},
		{"until=" + future + "&order=asc&limit=500", 3, 200},
		{"status=NOPE", 0, 400},
		{"since=yesterday", 0, 400},
		{"limit=0", 0, 400},
		{"limit=501", 0, 400},
		{"limit=ten", 0, 400},
		{"order=sideways", 0, 400},
		{"cursor=garbage", 0, 400},
		{"jurisdiction=a&jurisdiction=b", 0, 400},
		{"address=x&address.country=mt", 0, 400},
		{"a..b=x", 0, 400},
		{"limit=1&limit=2", 0, 400},
		{"x=%00", 0, 400},
		{"x=%ff", 0, 400},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			r := h.do(t, "GET", "/journal/registration-events?"+tt.query, nil)
			if tt.status != 200 {
				expectError(t, r, tt.status)
				return
			}
			if r.Code != 200 {
				t.Fatalf("%d %s", r.Code, r.Body)
			}
			var p page[entry]
			r.JSON(t, &p)
			if len(p.Items) != tt.want || p.NextCursor != "" {
				t.Errorf("got %d items (cursor %q), want %d", len(p.Items), p.NextCursor, tt.want)
			}
			for _, e := range p.Items {
				if e.EventType != "registration" {
					t.Errorf("listed a %s event", e.EventType)
				}
			}
		})
	}
	// An unknown type is an empty list, not an error: types are open-ended.
	r := h.do(t, "GET", "/journal/nothing-events", nil)
	var p page[entry]
	r.JSON(t, &p)
	if r.Code != 200 || len(p.Items) != 0 || p.Items == nil {
		t.Errorf("unknown type: %d %s", r.Code, r.Body)
	}
}

func TestListEventsPaginationWalk(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	var payloads []map[string]any
	for i := 0; i < 37; i++ {
		j := "mga"
		if i%3 == 0 {
			j = "ukgc"
		}
		payloads = append(payloads, map[string]any{"jurisdiction": j, "n": i})
	}
	seedEvents(t, h.db.Pool, "registration", payloads...)
	for _, order := range []string{"asc", "desc"} {
		for _, limit := range []int{1, 4, 24, 25, 500} {
			t.Run(fmt.Sprintf("%s/%d", order, limit), func(t *testing.T) {
				seen := map[string]bool{}
				var last int64
				cursor := ""
				pages := 0
				for {
					q := url.Values{"order": {order}, "limit": {fmt.Sprint(limit)}, "jurisdiction": {"mga"}}
					if cursor != "" {
						q.Set("cursor", cursor)
					}
					r := h.do(t, "GET", "/journal/registration-events?"+q.Encode(), nil)
					if r.Code != 200 {
						t.Fatalf("%d %s", r.Code, r.Body)
					}
					var p page[entry]
					r.JSON(t, &p)
					pages++
					if len(p.Items) > limit {
						t.Fatalf("page of %d items, limit %d", len(p.Items), limit)
					}
					for _, e := range p.Items {
						if seen[e.ID] {
							t.Fatalf("duplicate %s", e.ID)
						}
						seen[e.ID] = true
						if last != 0 && (order == "asc") != (e.SequenceNo > last) {
							t.Fatalf("order %s broken: %d after %d", order, e.SequenceNo, last)
						}
						last = e.SequenceNo
					}
					if p.NextCursor == "" {
						break
					}
					cursor = p.NextCursor
				}
				if len(seen) != 24 {
					t.Errorf("walked %d entries, want 24", len(seen))
				}
				if want := (24 + limit - 1) / limit; pages != want && !(24%limit == 0 && pages == want+1) {
					t.Errorf("%d pages, want %d", pages, want)
				}
			})
		}
	}
	// A cursor is bound to its order and its listing kind.
	r := h.do(t, "GET", "/journal/registration-events?limit=1&order=asc", nil)
	var p page[entry]
	r.JSON(t, &p)
	expectError(t, h.do(t, "GET", "/journal/registration-events?order=desc&cursor="+p.NextCursor, nil), 400)
	expectError(t, h.do(t, "GET", "/admin/quarantine?order=asc&cursor="+p.NextCursor, nil), 400)
}

func TestGetEntry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ids := seedEvents(t, h.db.Pool, "registration", map[string]any{"jurisdiction": "mga"})
	r := h.do(t, "GET", "/journal/"+ids[0], nil)
	if r.Code != 200 {
		t.Fatalf("%d %s", r.Code, r.Body)
	}
	var m map[string]any
	r.JSON(t, &m)
	for _, k := range []string{"id", "status", "attempts", "last_error", "next_attempt_at", "received_at", "processed_at",
		"updated_at", "sequence_no", "tag", "aggregate_id", "payload", "event_type"} {
		if _, ok := m[k]; !ok {
			t.Errorf("entry has no %q: %s", k, r.Body)
		}
	}
	if m["id"] != ids[0] || m["status"] != "RECEIVED" || m["tag"] != "/queue/x" {
		t.Errorf("entry %s", r.Body)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ids := seedEvents(t, h.db.Pool, "registration", map[string]any{}, map[string]any{}, map[string]any{})
	seedEvents(t, h.db.Pool, "payment", map[string]any{})
	setStatus(t, h.db.Pool, journal.StatusProcessed, ids[0])
	ctx := context.Background()
	if _, err := h.db.Pool.Exec(ctx, `UPDATE journal SET received_at = now() - interval '1 hour' WHERE id = $1`, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.Pool.Exec(ctx, `INSERT INTO feed_watermark (sink, resolved, resolved_at) VALUES ('webhook-a', '1700000000000000000.0000000000', now() - interval '30 seconds')`); err != nil {
		t.Fatal(err)
	}
	r := h.do(t, "GET", "/journal/stats", nil)
	if r.Code != 200 {
		t.Fatalf("%d %s", r.Code, r.Body)
	}
	var s statsResponse
	r.JSON(t, &s)
	if s.Total != 4 || s.ByStatus["RECEIVED"] != 3 || s.ByStatus["PROCESSED"] != 1 || s.ByStatus["DEAD"] != 0 {
		t.Errorf("counts %+v", s)
	}
	if s.ByType["registration"]["RECEIVED"] != 2 || s.ByType["payment"]["RECEIVED"] != 1 {
		t.Errorf("by type %v", s.ByType)
	}
	if s.OldestPendingAgeSeconds < 3599 || s.OldestPendingAgeSeconds > 3700 {
		t.Errorf("oldest pending age %v", s.OldestPendingAgeSeconds)
	}
	if len(s.FeedWatermarks) != 1 || s.FeedWatermarks[0].Sink != "webhook-a" || s.FeedWatermarks[0].LagSeconds < 29 || s.FeedWatermarks[0].LagSeconds > 90 {
		t.Errorf("watermarks %+v", s.FeedWatermarks)
	}
	if s.Quarantine.Total != 0 {
		t.Errorf("quarantine %+v", s.Quarantine)
	}
}
