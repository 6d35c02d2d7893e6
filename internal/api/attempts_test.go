package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Issue 18, item 7: every handler attempt is recorded (when, how long, how many runs,
// the outcome and the error), and GET /journal/{id} returns the timeline.
func TestEntryAttemptTimeline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	ids := seedEvents(t, h.db.Pool, "flaky", map[string]any{"n": 1})
	reg := process.NewRegistry()
	reg.Register("flaky", process.HandlerFunc(func(_ context.Context, _ pgx.Tx, ev process.Event) error {
		if ev.Attempt <= 2 {
			return errors.New("ledger down \xff")
		}
		return nil
	}))
	e := process.New(h.db.Pool, reg, process.Config{BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil, nil)
	for i := 1; i <= 3; i++ {
		testenv.Eventually(t, 30*time.Second, "the next attempt", func() bool { // past the 1 ms backoff
			if _, err := e.Process(ctx, ids[0]); err != nil {
				t.Fatal(err)
			}
			r, err := journal.Get(ctx, h.db.Pool, ids[0])
			return err == nil && r.Attempts == i
		})
	}
	var got entry
	r := h.do(t, "GET", "/journal/"+ids[0], nil)
	r.JSON(t, &got)
	if r.Code != 200 || got.Status != "PROCESSED" || got.Attempts != 3 {
		t.Fatalf("entry: %d %s", r.Code, r.Body)
	}
	if len(got.Timeline) != 3 {
		t.Fatalf("%d attempts in the timeline, want 3: %s", len(got.Timeline), r.Body)
	}
	for i, want := range []string{"FAILED", "FAILED", "PROCESSED"} {
		a := got.Timeline[i]
		runs := 1 + process.DefaultImmediateRetries // a failed attempt used its immediate retries
		if want == "PROCESSED" {
			runs = 1
		}
		if a.Attempt != i+1 || a.Outcome != want || a.Runs != runs || a.StartedAt.IsZero() || a.DurationMS < 0 ||
			(want == "FAILED") != (a.Error != nil) {
			t.Errorf("attempt %d: %+v, want %s after %d runs", i+1, a, want, runs)
		}
		if i > 0 && a.StartedAt.Before(got.Timeline[i-1].StartedAt) {
			t.Errorf("timeline out of order at %d", i)
		}
	}
}
