package inboxd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/inboxdtest"
)

// The Examples run against the real PostgreSQL and ActiveMQ (see package inboxdtest):
// each handler below runs in inboxd's own processing transaction.

// A handler for "order.placed" events with string ids such as "ord-0001": its insert
// commits in the transaction that marks the event PROCESSED, and ON CONFLICT makes a
// replay harmless. ev.Key is the id the publisher sent, ev.ID its journal id.
func Example() {
	t, done := inboxdtest.Standalone("Example")
	defer done()
	pool := inboxdtest.NewDB(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE orders (order_id TEXT PRIMARY KEY, total INT8 NOT NULL)`); err != nil {
		panic(err)
	}

	placeOrder := inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		var order struct {
			Total int `json:"total"`
		}
		if err := json.Unmarshal(ev.Payload, &order); err != nil || order.Total <= 0 {
			return inboxd.Reject(fmt.Errorf("order %s: total must be a positive number", ev.Key))
		}
		_, err := tx.Exec(ctx, `INSERT INTO orders (order_id, total) VALUES ($1, $2) ON CONFLICT (order_id) DO NOTHING`, ev.Key, order.Total)
		return err
	})

	rep := inboxdtest.Run(t, pool, "order.placed", placeOrder, inboxdtest.Message{Body: []byte(`{"id":"ord-0001","total":12}`)})
	r := rep.Results[0]
	fmt.Println(r.Key, r.Outcome, r.ID == inboxd.JournalID("ord-0001"))
	// Output: ord-0001 processed true
}

// New and Run: a Client over the program's pool consumes a queue until its context is
// cancelled, then shuts down gracefully.
func ExampleNew() {
	t, done := inboxdtest.Standalone("ExampleNew")
	defer done()
	pool := inboxdtest.NewDB(t) // a program: pgxpool.New, then inboxd.Migrate
	queue := inboxdtest.Queue(t)

	c, err := inboxd.New(pool, inboxd.Config{
		StompAddr:        inboxdtest.Broker(t),
		Destinations:     []string{queue},
		DefaultEventType: "order.placed",
		DisableHTTP:      true,
		Logger:           slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	c.Handle("order.placed", inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		return nil // the order's effect, in tx
	}))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(ctx) }()

	id := inboxdtest.Publish(t, queue, []byte(`{"id":"ord-0001"}`), nil)
	fmt.Println("ord-0001:", inboxdtest.WaitSettled(t, pool, id, time.Minute))
	cancel()
	fmt.Println("Run returned:", <-stopped)
	// Output:
	// ord-0001: PROCESSED
	// Run returned: <nil>
}

// An event type with a recoverability policy of its own: one immediate retry, then
// delayed attempts from 2s doubling up to 1m, and DEAD after 3 attempts.
func ExampleWithRetryPolicy() {
	p := inboxd.RetryPolicy{ImmediateRetries: 1, MaxAttempts: 3, BaseBackoff: 2 * time.Second, MaxBackoff: time.Minute}
	fmt.Println("delays:", p.Delay(1), p.Delay(2))

	t, done := inboxdtest.Standalone("ExampleWithRetryPolicy")
	defer done()
	pool := inboxdtest.NewDB(t)
	charge := inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		return errors.New("payment gateway: connection refused")
	})
	// In a program: c.Handle("payment.requested", charge, inboxd.WithRetryPolicy(p))
	rep := inboxdtest.RunWith(t, pool, inboxdtest.Options{RetryPolicy: p}, "payment.requested", charge,
		inboxdtest.Message{Body: []byte(`{"id":"pay-1"}`)})
	fmt.Println(rep.Results[0].Outcome, rep.Results[0].Err)
	// Output:
	// delays: 2s 4s
	// failed payment gateway: connection refused
}

// Reject marks input that can never succeed: the event is REJECTED at once, not
// retried, and its transaction's writes are rolled back.
func ExampleReject() {
	t, done := inboxdtest.Standalone("ExampleReject")
	defer done()
	pool := inboxdtest.NewDB(t)
	h := inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		return inboxd.Reject(fmt.Errorf("order %s: unknown customer", ev.Key))
	})
	rep := inboxdtest.Run(t, pool, "order.placed", h, inboxdtest.Message{Body: []byte(`{"id":"ord-0002"}`)})
	fmt.Println(rep.Results[0].Outcome, "-", rep.Results[0].Err)
	fmt.Println(errors.Is(inboxd.Reject(errors.New("x")), inboxd.ErrRejected))
	// Output:
	// rejected - order ord-0002: unknown customer
	// true
}

// A handler that emits an event: the outbox row commits with the event's effect and its
// PROCESSED status, and the relay publishes it afterwards, with header outbox-id.
func ExampleEmit() {
	t, done := inboxdtest.Standalone("ExampleEmit")
	defer done()
	pool := inboxdtest.NewDB(t)
	payOrder := inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		_, err := inboxd.Emit(ctx, tx, inboxd.Outgoing{
			Destination: "/queue/shipping-requests",
			Body:        []byte(`{"order":"` + ev.Key + `"}`),
			Headers:     map[string]string{"content-type": "application/json", "event-type": "shipping.requested"},
		})
		return err
	})
	rep := inboxdtest.Run(t, pool, "order.paid", payOrder, inboxdtest.Message{Body: []byte(`{"id":"ord-0003"}`)})
	for _, o := range rep.Emitted {
		fmt.Println(o.Destination, string(o.Body), o.Headers["event-type"])
	}
	// Output: /queue/shipping-requests {"order":"ord-0003"} shipping.requested
}

// EmitBatch writes several messages in one round trip. An id derived from the event
// makes a second run emit nothing new: it comes back as a duplicate.
func ExampleEmitBatch() {
	t, done := inboxdtest.Standalone("ExampleEmitBatch")
	defer done()
	pool := inboxdtest.NewDB(t)
	var dups []bool
	fanOut := inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		msgs := []inboxd.Outgoing{
			{Destination: "/queue/billing", Body: ev.Payload, ID: inboxd.JournalID("billing/" + ev.Key)},
			{Destination: "/queue/shipping", Body: ev.Payload, ID: inboxd.JournalID("shipping/" + ev.Key)},
		}
		if _, err := inboxd.EmitBatch(ctx, tx, msgs); err != nil {
			return err
		}
		again, err := inboxd.EmitBatch(ctx, tx, msgs) // as a replay would
		for _, e := range again {
			dups = append(dups, e.Duplicate)
		}
		return err
	})
	rep := inboxdtest.Run(t, pool, "order.placed", fanOut, inboxdtest.Message{Body: []byte(`{"id":"ord-0004"}`)})
	fmt.Println(len(rep.Emitted), "emitted; the second time duplicates:", dups)
	// Output: 2 emitted; the second time duplicates: [true true]
}

// orderBatch is a BatchHandler: the clean events of a batch are inserted with one
// statement; any other case falls back to Handle, one event at a time.
type orderBatch struct{}

func (orderBatch) Handle(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
	_, err := tx.Exec(ctx, `INSERT INTO orders (order_id) VALUES ($1) ON CONFLICT (order_id) DO NOTHING`, ev.Key)
	return err
}

func (orderBatch) HandleBatch(ctx context.Context, tx pgx.Tx, evs []inboxd.Event) ([]error, error) {
	keys := make([]string, len(evs))
	for i, ev := range evs {
		keys[i] = ev.Key
	}
	_, err := tx.Exec(ctx, `INSERT INTO orders (order_id) SELECT unnest($1::TEXT[]) ON CONFLICT (order_id) DO NOTHING`, keys)
	return make([]error, len(evs)), err
}

func ExampleBatchHandler() {
	t, done := inboxdtest.Standalone("ExampleBatchHandler")
	defer done()
	pool := inboxdtest.NewDB(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE orders (order_id TEXT PRIMARY KEY)`); err != nil {
		panic(err)
	}
	var h inboxd.BatchHandler = orderBatch{}
	rep := inboxdtest.Run(t, pool, "order.placed", h,
		inboxdtest.Message{Body: []byte(`{"id":"ord-1"}`)}, inboxdtest.Message{Body: []byte(`{"id":"ord-2"}`)})
	var n int
	_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM orders`).Scan(&n)
	fmt.Println(rep.Results[0].Outcome, rep.Results[1].Outcome, n)
	// Output: processed processed 2
}

// CloudEventMessage builds the Outgoing of a CloudEvent; its outbox id derives from
// the event's source and id, so a handler that runs again emits nothing new.
func ExampleCloudEventMessage() {
	o, err := inboxd.CloudEventMessage("/topic/orders", inboxd.CloudEvent{
		ID: "ord-0001", Source: "https://shop.example/orders", Type: "com.example.order.accepted",
		Data: json.RawMessage(`{"total":12}`),
	}, inboxd.CloudEventStructured)
	if err != nil {
		panic(err)
	}
	again, _ := inboxd.CloudEventMessage("/topic/orders", inboxd.CloudEvent{
		ID: "ord-0001", Source: "https://shop.example/orders", Type: "com.example.order.accepted",
	}, inboxd.CloudEventBinary)
	fmt.Println(o.Headers["content-type"])
	fmt.Println(o.ID == again.ID, again.Headers["cloudEvents_type"])
	// Output:
	// application/cloudevents+json
	// true com.example.order.accepted
}
