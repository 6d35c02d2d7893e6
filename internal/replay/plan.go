package replay

import (
	"context"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
)

// DefaultPlanLimit bounds the events of one replay plan.
const DefaultPlanLimit = 1_000_000

// Plan is what a replay would run, frozen before it runs: the events in journal order
// and their counts. Storing it, and running it for real, are still to come.
type Plan struct {
	Items []journal.PlanItem
	// Events is len(Items); Selected were chosen by the selection, AddedByTail by the
	// tail rule (the later settled events of a selected event's aggregate).
	Events, Selected, AddedByTail int
	// Types counts the events per type; Aggregates is how many aggregates they touch.
	Types      map[string]int
	Aggregates int
}

// BuildPlan plans a replay of sel, with the tail rule unless noTail. limit ≤ 0 means
// DefaultPlanLimit; a larger plan is journal.ErrPlanTooLarge.
func BuildPlan(ctx context.Context, db database.DB, sel journal.Selection, noTail bool, limit int) (*Plan, error) {
	if limit <= 0 {
		limit = DefaultPlanLimit
	}
	items, err := journal.PlanReplay(ctx, db, sel, !noTail, limit)
	if err != nil {
		return nil, err
	}
	p := &Plan{Items: items, Events: len(items), Types: map[string]int{}}
	aggs := map[string]bool{}
	for _, it := range items {
		if it.Selected {
			p.Selected++
		} else {
			p.AddedByTail++
		}
		p.Types[it.EventType]++
		aggs[it.AggregateID] = true
	}
	p.Aggregates = len(aggs)
	return p, nil
}
