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

// Issue 29: a PROCESSED attempt whose handler ran once is not written to the history
// table (journal_attempt); the timeline shows it from the journal row, once, and an
// attempt that took immediate retries keeps its history row.
func TestTimelineOfAttemptsWithoutHistoryRows(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	ids := seedEvents(t, h.db.Pool, "once", map[string]any{"n": 1})
	retried := seedEvents(t, h.db.Pool, "fluke", map[string]any{"n": 2})
	reg := process.NewRegistry()
	reg.Register("once", process.HandlerFunc(func(context.Context, pgx.Tx, process.Event) error { return nil }))
	runs := 0
	reg.Register("fluke", process.HandlerFunc(func(context.Context, pgx.Tx, process.Event) error {
		if runs++; runs == 1 {
			return errors.New("fluke")
		}
		return nil
	}))
	e := process.New(h.db.Pool, reg, process.Config{}, nil, nil)
	for _, id := range []string{ids[0], retried[0]} {
		if out, err := e.Process(ctx, id); err != nil || out != process.OutcomeProcessed {
			t.Fatalf("processing %s: %s, %v", id, out, err)
		}
	}
	cases := []struct {
		name        string
		id          string
		runs        int
		historyRows int
	}{
		{"first run", ids[0], 1, 0},
		{"after an immediate retry", retried[0], 2, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var rows int
			if err := h.db.Pool.QueryRow(ctx, `SELECT count(*) FROM journal_attempt WHERE journal_id = $1`, c.id).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows != c.historyRows {
				t.Errorf("%d history rows, want %d", rows, c.historyRows)
			}
			var got entry
			r := h.do(t, "GET", "/journal/"+c.id, nil)
			r.JSON(t, &got)
			if r.Code != 200 || len(got.Timeline) != 1 {
				t.Fatalf("want one attempt in the timeline: %d %s", r.Code, r.Body)
			}
			a := got.Timeline[0]
			if a.Attempt != 1 || a.Outcome != "PROCESSED" || a.Runs != c.runs || a.Error != nil || a.StartedAt.IsZero() ||
				a.DurationMS < 0 || a.RecordedAt.IsZero() {
				t.Errorf("attempt: %+v", a)
			}
		})
	}
}
