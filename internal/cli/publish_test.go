package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TestPublishGivenBody: "inboxd publish -body/-body-file" sends the body given, with
// -type and -header, and a running Client journals exactly that body under that type.
func TestPublishGivenBody(t *testing.T) {
	db := testenv.NewDB(t)
	broker := testenv.Broker(t)
	queue := testenv.Queue(t)
	c, err := inboxd.New(db.Pool, inboxd.Config{StompAddr: broker, Destinations: []string{queue},
		DisableHTTP: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c.Handle("payment-captured", inboxd.HandlerFunc(func(context.Context, pgx.Tx, inboxd.Event) error { return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped })

	file := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(file, []byte(`{"id":"pay-2","amount":7}`), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"publish", "-database-url", db.URL, "-stomp-addr", broker, "-to", queue, "-verify", "-verify-timeout", "30s"}
	for _, tt := range []struct {
		name   string
		args   []string
		id     string
		amount float64
	}{
		{"body", []string{"-body", `{"id":"pay-1","amount":12}`, "-type", "payment-captured", "-header", "aggregate-id=acct-9"}, "pay-1", 12},
		{"body-file", []string{"-body-file", file, "-header", "event-type=payment-captured"}, "pay-2", 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(t, append(common, tt.args...)...)
			if code != 0 || !strings.Contains(out, "verified") {
				t.Fatalf("exit %d: %s %s", code, out, errOut)
			}
			rec, err := journal.Get(context.Background(), db.Pool, inboxd.JournalID(tt.id))
			if err != nil {
				t.Fatal(err)
			}
			var p struct {
				ID     string
				Amount float64
			}
			if err := json.Unmarshal(rec.Payload, &p); err != nil || p.ID != tt.id || p.Amount != tt.amount || rec.EventType != "payment-captured" {
				t.Errorf("journal holds %s type %s (%v), want the body published, type payment-captured", rec.Payload, rec.EventType, err)
			}
		})
	}
	if rec, err := journal.Get(context.Background(), db.Pool, inboxd.JournalID("pay-1")); err != nil || rec.AggregateID != "acct-9" {
		t.Errorf("-header aggregate-id: journal aggregate %q (%v), want acct-9", rec.AggregateID, err)
	}
	if code, _, errOut := run(t, "publish", "-type", "x"); code == 0 || !strings.Contains(errOut, "need -body") {
		t.Errorf("-type without a body: exit %d, %s", code, errOut)
	}
}

// publish of generated events with -verify waits until the journal and the quarantine
// hold exactly what it sent, and says so; with nothing ingesting, it gives up after
// -verify-timeout, naming the timeout.
func TestPublishGeneratedVerifies(t *testing.T) {
	db := testenv.NewDB(t)
	broker := testenv.Broker(t)
	queue := testenv.Queue(t)
	common := []string{"publish", "-database-url", db.URL, "-stomp-addr", broker, "-to", queue,
		"-n", "30", "-duplicates", "0.2", "-malformed", "0.1", "-verify"}
	if code, _, errOut := run(t, append(common, "-verify-timeout", "1s")...); code == 0 || !strings.Contains(errOut, "after 1s") {
		t.Fatalf("with nothing ingesting: exit %d, %s; want a failure after 1s", code, errOut)
	}
	c, err := inboxd.New(db.Pool, inboxd.Config{StompAddr: broker, Destinations: []string{queue},
		DisableHTTP: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped })
	if code, out, errOut := run(t, append(common, "-verify-timeout", "60s")...); code != 0 || !strings.Contains(out, "verified after") {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
}
