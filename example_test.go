package inboxd_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
)

// A handler for "order.placed" events: its insert commits in the same transaction that
// marks the event PROCESSED, and ON CONFLICT makes a replay harmless.
func Example() {
	placeOrder := inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		var order struct {
			Total int `json:"total"`
		}
		if err := json.Unmarshal(ev.Payload, &order); err != nil || order.Total <= 0 {
			return inboxd.Reject(fmt.Errorf("order %s: total must be a positive number", ev.ID))
		}
		_, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, ev.ID, order.Total)
		return err
	})
	// In a real program: c, err := inboxd.New(pool, cfg); c.Handle("order.placed", placeOrder); c.Run(ctx)
	_ = placeOrder
	fmt.Println("registered")
	// Output: registered
}

// A handler that emits an event: the outbox row commits with the event's effect and its
// PROCESSED status, and the relay publishes it afterwards, with header outbox-id.
func ExampleEmit() {
	payOrder := inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		_, err := inboxd.Emit(ctx, tx, inboxd.Outgoing{
			Destination: "/queue/shipping-requests",
			Body:        ev.Payload,
			Headers:     map[string]string{"content-type": "application/json", "event-type": "shipping.requested"},
		})
		return err
	})
	_ = payOrder // c.Handle("order.paid", payOrder)
	fmt.Println("registered")
	// Output: registered
}
