package process

import (
	"context"
	"slices"
	"sort"
)

// maxChain bounds how many successors one delivery processes inline; anything left
// is found by later deliveries or by the sweeper.
const maxChain = 1000

// moving returns the aggregates a delivery moves on (chain): those whose delivered
// events completed. A no-op counts too: the event was completed elsewhere, but whoever
// did may have failed to go on to its successors (database lost right after the
// commit). Any delivery thus drives its aggregate forward.
func (d delivered) moving(items []Item) map[string]bool {
	moving := map[string]bool{}
	for _, it := range items {
		if _, pending := d.outs[it.ID]; !pending && it.AggregateID != "" {
			moving[it.AggregateID] = true
		}
	}
	for id, o := range d.outs {
		if o.completes() && d.next[d.aggOf[id]] {
			moving[d.aggOf[id]] = true
		}
	}
	for id, o := range d.outs {
		if o == OutcomeFailed || o == OutcomeNotDue {
			delete(moving, d.aggOf[id]) // its retry is the sweeper's, after the backoff
		}
	}
	return moving
}

// completed returns the aggregates whose claimed event completed and that have a next
// event: it is due now, even inside the grace period (with a changefeed, it may well
// have been delivered already and seen deferred).
func completed(res batchResult) map[string]bool {
	aggs := map[string]bool{}
	for _, h := range res.claimed {
		if res.outs[h.ID].completes() && res.next[h.AggregateID] {
			aggs[h.AggregateID] = true
		}
	}
	return aggs
}

// chain processes the due heads of aggregates, batch after batch, for as long as
// batches complete events, up to maxChain events. A batch takes up to its size limit
// of the aggregates (BatchSize, less after conflicts); those it did not take go to the
// next batch, ahead of the ones it moved on. Nothing else would move them: their
// delivery was answered once this returns, and the sweeper takes a RECEIVED head only
// after its grace.
func (e *Engine) chain(ctx context.Context, aggs map[string]bool, outs map[string]Outcome) error {
	list := make([]string, 0, len(aggs))
	for a := range aggs {
		list = append(list, a)
	}
	sort.Strings(list)
	for n := 0; n < maxChain && len(list) > 0; {
		res, took, err := e.processDue(ctx, 0, e.cfg.BatchSize, list)
		if err != nil {
			return err
		}
		o, heads := res.outs, res.claimed
		next := slices.Clone(list[took:])
		for _, h := range heads {
			outs[h.ID] = o[h.ID]
			if o[h.ID].completes() && res.next[h.AggregateID] {
				next = append(next, h.AggregateID)
			}
		}
		n += len(heads)
		list = next
	}
	return nil
}
