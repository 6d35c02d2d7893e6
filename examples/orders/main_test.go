package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The example runs against the real PostgreSQL and ActiveMQ: an order becomes a row and
// an order.accepted message the relay sends; an invalid one is REJECTED; cancelling
// stops it with no error.
func TestOrdersExample(t *testing.T) {
	db := testenv.NewDB(t)
	broker := testenv.Broker(t)
	queue, events := testenv.Queue(t), testenv.Queue(t)
	vars := map[string]string{
		"INBOXD_DATABASE_URL": db.URL, "INBOXD_STOMP_ADDR": broker,
		"ORDERS_QUEUE": queue, "ORDERS_EVENTS_QUEUE": events, "ORDERS_HTTP_ADDR": "127.0.0.1:0",
	}
	ctx := context.Background()
	stopRun := testenv.Start(t, 30*time.Second, func(ctx context.Context) error {
		return run(ctx, func(k string) string { return vars[k] }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	})
	stop := func() {
		if err := stopRun(); err != nil {
			t.Errorf("run after cancel = %v, want nil", err)
		}
	}

	pub := stompx.NewPublisher(stompx.Config{Addr: broker}, 1)
	defer pub.Close()
	good, bad := message.NewID(), message.NewID()
	for _, body := range []string{
		fmt.Sprintf(`{"id":%q,"type":"order.placed","customer":"ada","total":42}`, good),
		fmt.Sprintf(`{"id":%q,"customer":"bob","total":0}`, bad), // no type: DefaultEventType
	} {
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		err := pub.Publish(pctx, queue, []byte(body), map[string]string{"persistent": "true"})
		pcancel()
		if err != nil {
			t.Fatalf("publishing: %v", err)
		}
	}
	status := func(id string) string {
		var s string
		_ = db.Pool.QueryRow(context.Background(), `SELECT status FROM journal WHERE id = $1`, id).Scan(&s)
		return s
	}
	testenv.Eventually(t, 30*time.Second, "the good order PROCESSED and the bad one REJECTED", func() bool {
		return status(good) == "PROCESSED" && status(bad) == "REJECTED"
	})
	var total int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT total FROM orders WHERE id = $1`, good).Scan(&total); err != nil || total != 42 {
		t.Fatalf("orders row of %s: total %d, %v", good, total, err)
	}
	testenv.Eventually(t, 30*time.Second, "order.accepted sent by the relay", func() bool {
		var sent int
		err := db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM outbox WHERE destination = $1 AND sent_at IS NOT NULL`, events).Scan(&sent)
		return err == nil && sent == 1
	})
	stop()
}
