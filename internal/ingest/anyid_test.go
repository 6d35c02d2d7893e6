package ingest

import (
	"fmt"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Issue 22.3: a non-UUID id (the Kafka inbox seed's evt-456) is journaled under its
// computed key, and its redeliveries collapse onto that one row; through the real broker.
func TestNonUUIDIDCollapsesRedeliveries(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	for range 3 {
		publish(t, addr, q, []byte(`{"id":"evt-456","type":"order.placed","total":12}`), nil)
	}
	publish(t, addr, q, []byte(`{"id":"evt-457","type":"order.placed","total":13}`), nil)
	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 2, Linger: time.Millisecond}, db.Pool, hooks{})
	testenv.Eventually(t, 30*time.Second, "all four acked", func() bool { return r.counter("acked", q) == 4 })
	r.stop(t)
	if n := count(t, db.Pool, `SELECT count(*) FROM journal`); n != 2 {
		t.Errorf("journal rows = %d, want 2 (evt-456 once, evt-457)", n)
	}
	id := message.JournalID("evt-456")
	if n := count(t, db.Pool, `SELECT count(*) FROM journal WHERE id = $1 AND payload->>'id' = 'evt-456'`, id); n != 1 {
		t.Errorf("journal rows for evt-456 under %s = %d, want 1", id, n)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Errorf("quarantine rows = %d, want 0", n)
	}
	if got := r.counter("duplicates", q); got != 2 {
		t.Errorf("duplicates counted = %v, want 2", got)
	}
	assertDrained(t, addr, q)
}

// The id may come from a header: with header:message-id (the JMS message id) every
// message is its own event, whatever its payload says.
func TestIDFromHeader(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	src, err := message.ParseIDSource("header:x-event-id")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		publish(t, addr, q, []byte(`{"type":"t"}`), map[string]string{"x-event-id": fmt.Sprintf("order-%d", i%2)})
	}
	publish(t, addr, q, []byte(`{"type":"t"}`), nil) // no id: quarantined
	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 8, Linger: time.Millisecond, IDSource: src}, db.Pool, hooks{})
	testenv.Eventually(t, 30*time.Second, "all five acked", func() bool { return r.counter("acked", q) == 5 })
	r.stop(t)
	for _, k := range []string{"order-0", "order-1"} {
		if n := count(t, db.Pool, `SELECT count(*) FROM journal WHERE id = $1`, message.JournalID(k)); n != 1 {
			t.Errorf("journal rows for %s = %d, want 1", k, n)
		}
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM quarantine WHERE reason = 'missing_id'`); n != 1 {
		t.Errorf("missing_id quarantine rows = %d, want 1", n)
	}
}
