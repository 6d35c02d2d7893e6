package inboxd_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TestBusinessKeyThroughAPI is the newcomer's program: order.placed events with string
// ids such as "ord-0001". The handler sees that id as Event.Key beside the journal id
// (Event.ID = inboxd.JournalID(Key)), and GET /journal/ord-0001 finds the event, as
// does GET /journal/{journal id}.
func TestBusinessKeyThroughAPI(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	queue := testenv.Queue(t)
	addr := testenv.FreeAddr(t)
	c := newClient(t, db, inboxd.Config{StompAddr: testenv.Broker(t), Destinations: []string{queue},
		HTTPAddr: addr, DefaultEventType: "order.placed", SweepInterval: 50 * time.Millisecond})
	var mu sync.Mutex
	seen := map[string]string{} // Key → ID
	c.Handle("order.placed", inboxd.HandlerFunc(func(_ context.Context, _ pgx.Tx, ev inboxd.Event) error {
		mu.Lock()
		defer mu.Unlock()
		seen[ev.Key] = ev.ID
		if ev.Key == "ord-0002" {
			return inboxd.Reject(errors.New("no such customer"))
		}
		return nil
	}))
	testenv.Start(t, time.Minute, c.Run)
	pub := stompx.NewPublisher(stompx.Config{Addr: testenv.Broker(t)}, 1)
	t.Cleanup(func() { pub.Close() })
	for _, body := range []string{`{"id":"ord-0001","total":12}`, `{"id":"ord-0002","total":7}`} {
		if err := pub.Publish(context.Background(), queue, []byte(body), nil); err != nil {
			t.Fatalf("publishing: %v", err)
		}
	}

	testenv.Eventually(t, 30*time.Second, "both orders handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 2
	})
	for _, key := range []string{"ord-0001", "ord-0002"} {
		mu.Lock()
		id := seen[key]
		mu.Unlock()
		if want := inboxd.JournalID(key); id != want {
			t.Errorf("Event.ID of %s = %q, want JournalID = %q", key, id, want)
		}
		for _, ref := range []string{key, id} {
			var got struct{ ID, Status string }
			want := map[string]string{"ord-0001": "PROCESSED", "ord-0002": "REJECTED"}[key]
			testenv.Eventually(t, 30*time.Second, "GET /journal/"+ref+" "+want, func() bool {
				r, err := http.Get("http://" + addr + "/journal/" + ref)
				if err != nil {
					return false
				}
				defer r.Body.Close()
				return r.StatusCode == 200 && json.NewDecoder(r.Body).Decode(&got) == nil && got.Status == want
			})
			if got.ID != id {
				t.Errorf("GET /journal/%s: id %q, want %q", ref, got.ID, id)
			}
		}
	}
	// The operator's actions take the event's own id too.
	r, err := http.Post("http://"+addr+"/admin/events/ord-0002/retry", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var retry struct{ Retried bool }
	if err := json.NewDecoder(r.Body).Decode(&retry); err != nil || r.StatusCode != 200 || !retry.Retried {
		t.Errorf("POST /admin/events/ord-0002/retry: %d, retried %v (%v)", r.StatusCode, retry.Retried, err)
	}
	r.Body.Close()

	// A UUID key is its own journal id, whatever its case.
	const u = "0F1E2D3C-4B5A-4978-8695-A4B3C2D1E0F9"
	if got := inboxd.JournalID(u); got != "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9" {
		t.Errorf("JournalID(%s) = %s", u, got)
	}
}

// TestHintsNameTheLibrarysSetting: a program embedding inboxd is told to set
// Config.AdminToken, not the command line's INBOXD_ADMIN_TOKEN.
func TestHintsNameTheLibrarysSetting(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	var logs testenv.Buffer
	c, err := inboxd.New(db.Pool, inboxd.Config{StompAddr: testenv.Broker(t), Destinations: []string{testenv.Queue(t)},
		HTTPAddr: testenv.FreeAddr(t), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Start(t, time.Minute, c.Run)
	testenv.Eventually(t, 30*time.Second, "the API's start-up hint", func() bool { return strings.Contains(logs.String(), "no admin token") })
	if s := logs.String(); !strings.Contains(s, "set Config.AdminToken for remote access") || strings.Contains(s, "INBOXD_") {
		t.Errorf("hints name the command line's settings:\n%s", s)
	}
}
