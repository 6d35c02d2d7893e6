package process_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/process"
)

// A handler is registered by event type; the engine calls it inside the transaction
// that marks the event PROCESSED.
func ExampleRegistry() {
	reg := process.NewRegistry()
	reg.Register("payout", process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
		var p struct {
			Amount int64 `json:"amount"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil || p.Amount <= 0 {
			// Invalid business input: REJECTED, never retried.
			return process.Reject(errors.New("amount must be a positive integer"))
		}
		// The event id keys the effect, so a replay cannot pay twice. Any other error
		// is a failure: FAILED, retried with backoff, DEAD after MaxAttempts.
		_, err := tx.Exec(ctx, `INSERT INTO payouts (id, amount) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, ev.ID, p.Amount)
		return err
	}))
	// Then: engine := process.New(pool, reg, process.Config{}, metrics, logger)

	h, ok := reg.Lookup("payout")
	fmt.Println(reg.Types(), ok)
	err := h.Handle(context.Background(), nil, process.Event{ID: "x", Type: "payout", Payload: json.RawMessage(`{"amount":-5}`)})
	fmt.Println(err, errors.Is(err, process.ErrRejected))
	// Output:
	// [payout] true
	// amount must be a positive integer true
}
