package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Issue 22.2, through the real broker: the three CloudEvents of the issue (structured,
// binary with the JMS-compatible cloudEvents_ headers, and the same id from another
// source), each sent twice, end as exactly three journal entries with their own types;
// a binary event without a source is quarantined as missing_source.
func TestCloudEventsThroughBroker(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	type msg struct {
		body    string
		headers map[string]string
	}
	structured := msg{body: `{"specversion":"1.0","id":"evt-456","source":"/orders","type":"order.placed","data":{"orderId":"o-1","total":12}}`}
	binary := msg{body: `{"orderId":"o-1","amount":12}`, headers: map[string]string{
		"cloudEvents_specversion": "1.0", "cloudEvents_id": "evt-789", "cloudEvents_source": "/payments",
		"cloudEvents_type": "payment.received", "cloudEvents_subject": "o-1", "content-type": "application/json"}}
	otherSource := msg{body: `{"specversion":"1.0","id":"evt-456","source":"/billing","type":"invoice.issued","data":{"invoice":"i-1"}}`}
	noSource := msg{body: `{}`, headers: map[string]string{"ce-specversion": "1.0", "ce-id": "evt-1", "ce-type": "t"}}
	for range 2 {
		for _, m := range []msg{structured, binary, otherSource} {
			publish(t, addr, q, []byte(m.body), m.headers)
		}
	}
	publish(t, addr, q, []byte(noSource.body), noSource.headers)
	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 3, Linger: time.Millisecond}, db.Pool, hooks{})
	testenv.Eventually(t, 30*time.Second, "all seven acked", func() bool { return r.counter("acked", q) == 7 })
	r.stop(t)

	if n := count(t, db.Pool, `SELECT count(*) FROM journal`); n != 3 {
		t.Errorf("journal rows = %d, want 3", n)
	}
	for _, w := range []struct{ source, id, typ, agg string }{
		{"/orders", "evt-456", "order.placed", ""},
		{"/payments", "evt-789", "payment.received", "o-1"},
		{"/billing", "evt-456", "invoice.issued", ""},
	} {
		id := message.CloudEventID(w.source, w.id)
		if w.agg == "" {
			w.agg = id
		}
		var typ, agg, source, ceID string
		err := db.Pool.QueryRow(context.Background(), `SELECT event_type, aggregate_id, payload->>'source', payload->>'id' FROM journal WHERE id = $1`, id).
			Scan(&typ, &agg, &source, &ceID)
		if err != nil || typ != w.typ || agg != w.agg || source != w.source || ceID != w.id {
			t.Errorf("entry %s (%s %s) = type %q aggregate %q source %q id %q (%v); want %q %q", id, w.source, w.id, typ, agg, source, ceID, err, w.typ, w.agg)
		}
	}
	// The binary event is journaled as its structured form.
	var data string
	if err := db.Pool.QueryRow(context.Background(), `SELECT payload->'data'->>'orderId' || ' ' || (payload->>'specversion')
		FROM journal WHERE id = $1`, message.CloudEventID("/payments", "evt-789")).Scan(&data); err != nil || data != "o-1 1.0" {
		t.Errorf("binary event's structured form: data.orderId and specversion = %q (%v)", data, err)
	}
	var reason, detail string
	if err := db.Pool.QueryRow(context.Background(), `SELECT reason, detail FROM quarantine`).Scan(&reason, &detail); err != nil ||
		reason != string(message.ReasonMissingSource) {
		t.Errorf("quarantine = %q %q (%v), want missing_source", reason, detail, err)
	}
	if got := r.counter("duplicates", q); got != 3 {
		t.Errorf("duplicates counted = %v, want 3", got)
	}
	assertDrained(t, addr, q)
}
