package ingest

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Issue 10: every bad message wrote its own WARN line (16 MB of requests, 1.39 GB of
// log), and the quarantine counter missed rows the database itself refused. The
// attack: a burst of bad messages, one of them a payload PostgreSQL's jsonb refuses.
func TestQuarantineFloodLogsPerBatch(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	const bad = 60
	for i := range bad {
		publish(t, addr, q, []byte(fmt.Sprintf("not json %d alice%d@example.com", i, i)), nil)
	}
	// Go's JSON decoder accepts a lone surrogate escape; jsonb does not.
	publish(t, addr, q, []byte(`{"id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0b01","s":"\ud800"}`), nil)

	var logs testenv.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 10, Linger: time.Millisecond, Logger: log}, db.Pool, hooks{})
	testenv.Eventually(t, 30*time.Second, "all acked", func() bool { return r.counter("acked", q) == bad+1 })
	r.stop(t)

	if got := r.counter("quarantined", string(message.ReasonNotJSON)); got != bad {
		t.Errorf("quarantined{reason=not_json} = %v, want %d", got, bad)
	}
	if got := r.counter("quarantined", string(message.ReasonDBRefused)); got != 1 {
		t.Errorf("quarantined{reason=db_refused} = %v, want 1 (the row the database refused)", got)
	}
	out := logs.String()
	if n := strings.Count(out, "messages quarantined"); n != 1 {
		t.Errorf("%d quarantine lines for %d bad messages in several batches, want 1 (rate-limited):\n%s", n, bad+1, out)
	}
	if strings.Contains(out, "@example.com") || strings.Contains(out, "not json") {
		t.Errorf("message contents in the log:\n%s", out)
	}
}
