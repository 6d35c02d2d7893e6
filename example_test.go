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
	inboxd.Register("order.placed", inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		var order struct {
			Total int `json:"total"`
		}
		if err := json.Unmarshal(ev.Payload, &order); err != nil || order.Total <= 0 {
			return inboxd.Reject(fmt.Errorf("order %s: total must be a positive number", ev.ID))
		}
		_, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, ev.ID, order.Total)
		return err
	}))
	// In a real program: os.Exit(inboxd.Main())
	fmt.Println("registered")
	// Output: registered
}
