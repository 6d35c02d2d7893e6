package inboxd_test

import (
	"context"
	"fmt"
	"os"

	"github.com/inboxd/inboxd"
)

// A shadow replay runs the handlers of this build over the order events already
// settled, each in a transaction that is rolled back, and reports what differs from
// what was recorded. A deploy gate fails above zero differences.
func ExampleClient_ShadowReplay() {
	ctx := context.Background()
	var c *inboxd.Client // from inboxd.New, with the changed handlers registered

	rep, err := c.ShadowReplay(ctx, inboxd.ShadowOptions{
		EventType: "order.placed",
		Ignore:    []string{"body.$.createdAt"}, // a stamped field, different at every run
		Rate:      200,                          // events per second, beside live traffic
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_ = rep.Write(os.Stdout, "markdown")
	if rep.Summary.Differing > 0 {
		os.Exit(1)
	}
}

// A replay reprocesses settled events for real: planned and stored first, then
// started with a reason, a rate and whether its messages are published. A running
// Client executes it; live events of its aggregates wait until their replay is done.
func ExampleClient_PlanReplay() {
	ctx := context.Background()
	var c *inboxd.Client // from inboxd.New, running (Run), with the fixed handler

	run, err := c.PlanReplay(ctx, inboxd.ReplaySelection{EventType: "order.placed", Statuses: []string{"PROCESSED"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Printf("%d events over %d aggregates, %d added by the tail rule\n", run.Events, run.Aggregates, run.AddedByTail)
	if err := c.StartReplay(ctx, run.ID, inboxd.ReplayStart{Reason: "fixed rounding in totals", StartedBy: "ops", Rate: 50}); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}
