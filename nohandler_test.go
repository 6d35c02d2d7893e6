package inboxd_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/inboxdtest"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TestNoHandler: an event whose type has no handler is named in the log line of its
// attempt, the registered types are logged at start, and Config.NoHandler decides its
// fate: retry (FAILED, next attempt within the backoff), reject (REJECTED), park (FAILED
// and held, then processed when a Client starts with a handler for its type).
func TestNoHandler(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode   string
		status journal.Status
		check  func(t *testing.T, r journal.Record)
	}{
		{"", journal.StatusFailed, func(t *testing.T, r journal.Record) { // the default: retry
			if d := time.Until(r.NextAttemptAt); d > time.Hour {
				t.Errorf("retry: next attempt in %s, want within the backoff", d)
			}
		}},
		{"retry", journal.StatusFailed, nil},
		{"reject", journal.StatusRejected, nil},
		{"park", journal.StatusFailed, func(t *testing.T, r journal.Record) {
			if d := time.Until(r.NextAttemptAt); d < 365*24*time.Hour {
				t.Errorf("park: next attempt in %s, want held", d)
			}
		}},
	} {
		t.Run("mode="+tt.mode, func(t *testing.T) {
			t.Parallel()
			db := testenv.NewDB(t)
			queue := testenv.Queue(t)
			start := func(types ...string) (logs *testenv.Buffer, stop func()) {
				logs = &testenv.Buffer{}
				c, err := inboxd.New(db.Pool, inboxd.Config{StompAddr: testenv.Broker(t), Destinations: []string{queue},
					NoHandler: tt.mode, DisableHTTP: true, Logger: slog.New(slog.NewTextHandler(logs, nil))})
				if err != nil {
					t.Fatal(err)
				}
				for _, typ := range types {
					c.Handle(typ, inboxd.HandlerFunc(func(context.Context, pgx.Tx, inboxd.Event) error { return nil }))
				}
				ctx, cancel := context.WithCancel(context.Background())
				stopped := make(chan error, 1)
				go func() { stopped <- c.Run(ctx) }()
				return logs, func() { cancel(); <-stopped }
			}
			logs, stop := start("order-placed")
			defer func() { stop() }()
			id := inboxdtest.Publish(t, queue, []byte(`{"id":"pay-1","type":"payment-captured"}`), nil)
			var rec journal.Record
			testenv.Eventually(t, 30*time.Second, "an attempt recorded", func() bool {
				var err error
				rec, err = journal.Get(context.Background(), db.Pool, id)
				return err == nil && rec.Attempts > 0
			})
			if rec.Status != tt.status {
				t.Fatalf("status %s, want %s (last error %v)", rec.Status, tt.status, rec.LastError)
			}
			if tt.check != nil {
				tt.check(t, rec)
			}
			if l := logs.String(); !strings.Contains(l, "handlers registered") || !strings.Contains(l, "types=[order-placed]") {
				t.Errorf("no start line listing the registered types:\n%s", l)
			}
			// The outcome is logged just after its transaction commits.
			want := "type=payment-captured"
			if tt.mode == "park" {
				want = "event parked"
			}
			if tt.status == journal.StatusFailed {
				testenv.Eventually(t, 10*time.Second, "the attempt's log line, naming the type", func() bool {
					return strings.Contains(logs.String(), want) && strings.Contains(logs.String(), "type=payment-captured")
				})
			}
			if tt.mode != "park" {
				return
			}
			stop()
			_, stop = start("order-placed", "payment-captured")
			if got := inboxdtest.WaitSettled(t, db.Pool, id, 30*time.Second); got != string(journal.StatusProcessed) {
				t.Errorf("parked event after a start with its handler: %s, want PROCESSED", got)
			}
		})
	}
}
