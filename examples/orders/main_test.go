package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/inboxdtest"
)

func TestMain(m *testing.M) { inboxdtest.Main(m) }

// The handler alone, in inboxd's own processing transaction: an order becomes a row
// and an order.accepted message in the outbox; an invalid one is REJECTED.
func TestPlaceOrder(t *testing.T) {
	t.Parallel()
	pool := inboxdtest.NewDB(t)
	if err := migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	rep := inboxdtest.Run(t, pool, "order.placed", placeOrder("/queue/order-events"),
		inboxdtest.Message{Body: []byte(`{"id":"ord-0001","customer":"ada","total":42}`)},
		inboxdtest.Message{Body: []byte(`{"id":"ord-0002","customer":"bob","total":0}`)})
	inboxdtest.RequireOutcome(t, rep, "ord-0001", inboxdtest.OutcomeProcessed)
	inboxdtest.RequireOutcome(t, rep, "ord-0002", inboxdtest.OutcomeRejected)
	sent := inboxdtest.RequireEmitted(t, rep, "/queue/order-events", 1)
	if string(sent[0].Body) != `{"customer":"ada","orderId":"ord-0001","total":42}` || sent[0].Headers["event-type"] != "order.accepted" {
		t.Errorf("emitted %s %v", sent[0].Body, sent[0].Headers)
	}
	var total int64
	if err := pool.QueryRow(context.Background(), `SELECT total FROM orders WHERE order_id = 'ord-0001'`).Scan(&total); err != nil || total != 42 {
		t.Errorf("orders row of ord-0001: total %d, %v", total, err)
	}
}

// The whole program against the real PostgreSQL and ActiveMQ: published orders are
// settled, order.accepted is relayed, and cancelling stops it with no error.
func TestOrdersExample(t *testing.T) {
	t.Parallel()
	pool := inboxdtest.NewDB(t)
	queue, events := inboxdtest.Queue(t), inboxdtest.Queue(t)
	vars := map[string]string{
		"INBOXD_DATABASE_URL": pool.Config().ConnString(), "INBOXD_STOMP_ADDR": inboxdtest.Broker(t),
		"ORDERS_QUEUE": queue, "ORDERS_EVENTS_QUEUE": events, "ORDERS_HTTP_ADDR": "127.0.0.1:0",
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() {
		stopped <- run(ctx, func(k string) string { return vars[k] }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("run after cancel = %v, want nil", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not stop within 30s of its cancel")
		}
	})

	good := inboxdtest.Publish(t, queue, []byte(`{"id":"ord-0001","type":"order.placed","customer":"ada","total":42}`), nil)
	bad := inboxdtest.Publish(t, queue, []byte(`{"id":"ord-0002","customer":"bob","total":0}`), nil) // no type: DefaultEventType
	if good != inboxd.JournalID("ord-0001") {
		t.Errorf("Publish returned %s, want JournalID(ord-0001)", good)
	}
	if s := inboxdtest.WaitSettled(t, pool, good, 30*time.Second); s != "PROCESSED" {
		t.Errorf("ord-0001: %s", s)
	}
	if s := inboxdtest.WaitSettled(t, pool, bad, 30*time.Second); s != "REJECTED" {
		t.Errorf("ord-0002: %s", s)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var sent int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE destination = $1 AND sent_at IS NOT NULL`, events).Scan(&sent)
		if err == nil && sent == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order.accepted not sent by the relay within 30s (%d sent, %v)", sent, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the outbox table
	}
}
