package inboxdtest_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/inboxdtest"
)

// A handler's test: Run journals the messages and processes them as a Client does, and
// the assertions check the outcomes and what went to the outbox. In a test, pass t.
func ExampleRun() {
	t, done := inboxdtest.Standalone("ExampleRun")
	defer done()
	pool := inboxdtest.NewDB(t)

	accept := inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		if ev.Key == "ord-bad" {
			return inboxd.Reject(fmt.Errorf("order %s: no customer", ev.Key))
		}
		_, err := inboxd.Emit(ctx, tx, inboxd.Outgoing{Destination: "/queue/order-events", Body: []byte(`{"accepted":"` + ev.Key + `"}`)})
		return err
	})
	rep := inboxdtest.Run(t, pool, "order.placed", accept,
		inboxdtest.Message{Body: []byte(`{"id":"ord-0001"}`)},
		inboxdtest.Message{Body: []byte(`{"id":"ord-bad"}`)})

	inboxdtest.RequireOutcome(t, rep, "ord-0001", inboxdtest.OutcomeProcessed)
	r := inboxdtest.RequireOutcome(t, rep, "ord-bad", inboxdtest.OutcomeRejected)
	sent := inboxdtest.RequireEmitted(t, rep, "/queue/order-events", 1)
	fmt.Println(r.Err)
	fmt.Println(string(sent[0].Body))
	// Output:
	// order ord-bad: no customer
	// {"accepted":"ord-0001"}
}

// An integration test drives a running Client through the real broker: Publish, then
// WaitSettled on the journal id Publish returns.
func ExamplePublish() {
	t, done := inboxdtest.Standalone("ExamplePublish")
	defer done()
	pool := inboxdtest.NewDB(t)
	queue := inboxdtest.Queue(t)
	c, err := inboxd.New(pool, inboxd.Config{StompAddr: inboxdtest.Broker(t), Destinations: []string{queue},
		DefaultEventType: "order.placed", DisableHTTP: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	c.Handle("order.placed", inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error { return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(ctx) }()
	defer func() { cancel(); <-stopped }()

	id := inboxdtest.Publish(t, queue, []byte(`{"id":"ord-0001"}`), nil)
	fmt.Println(id == inboxd.JournalID("ord-0001"), inboxdtest.WaitSettled(t, pool, id, 30*time.Second))
	// Output: true PROCESSED
}
