package process_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// A delivery moves every aggregate it names on, however many there are and however
// often the batches that move them conflict: each batch takes at most as many
// aggregates as its size limit allows (BatchSize, halved after repeated 40001s), and
// the ones it did not take are the next batch's. Dropping them left their successors
// RECEIVED until the sweeper's grace, for good in a webhook-only deployment
// (TestDatabaseOutage under the SERIALIZABLE profile: 18 events of two aggregates).
func TestChainMovesEveryAggregate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cfg        process.Config
		aggregates int
		events     int // per aggregate
		noop       bool
		conflicts  int // 40001s of the first successor's handler
	}{
		{name: "more aggregates than BatchSize", cfg: process.Config{BatchSize: 2}, aggregates: 5, events: 3},
		{name: "no-op redelivery, more aggregates than BatchSize", cfg: process.Config{BatchSize: 2}, aggregates: 5, events: 3, noop: true},
		// 5 conflicts halve the batch from the 8 it claimed: 8 → 4 → 2 → 1 → 1; the batch
		// that commits takes 1 of the 8 aggregates, the next batches the others.
		{name: "conflicts halve the chain's batch", cfg: process.Config{}, aggregates: 8, events: 2, conflicts: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			db := testenv.NewDB(t)
			e, _, _ := newEngine(t, db, tt.cfg)
			var payloads [][]byte
			for k := range tt.events {
				for a := range tt.aggregates {
					s := pt.Spec{Aggregate: fmt.Sprintf("agg-%d", a)}
					if k == 1 && a == 0 {
						s.Conflicts = tt.conflicts
					}
					payloads = append(payloads, pt.Payload(s))
				}
			}
			ids := pt.Ingest(t, db.Pool, payloads...)
			items := make([]process.Item, tt.aggregates) // the first event of each aggregate
			for a := range items {
				items[a] = process.Item{ID: ids[a], AggregateID: fmt.Sprintf("agg-%d", a)}
			}
			if tt.noop {
				// Processed elsewhere (the sweeper, another instance) by batches that did not
				// go on, e.g. because the database went away right after their commit.
				for done := 0; done < tt.aggregates; {
					_, heads, err := e.ProcessDue(ctx, 0, tt.aggregates, nil)
					if err != nil {
						t.Fatal(err)
					}
					done += len(heads)
				}
			}
			outs, err := e.ProcessBatch(ctx, items)
			if err != nil {
				t.Fatal(err)
			}
			want := process.OutcomeProcessed
			if tt.noop {
				want = process.OutcomeNoop
			}
			for i, o := range outs {
				if o != want {
					t.Errorf("item %d: %s, want %s", i, o, want)
				}
			}
			if n := pt.CountStatus(t, db.Pool, "PROCESSED"); n != len(ids) {
				t.Errorf("PROCESSED = %d of %d: the delivery left aggregates behind", n, len(ids))
				dumpPendingHeads(t, db)
			}
			pt.Check(t, db.Pool)
		})
	}
}

func dumpPendingHeads(t *testing.T, db *testenv.DB) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT aggregate_id, head_seq FROM aggregate_head ORDER BY aggregate_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var agg string
		var seq int64
		if err := rows.Scan(&agg, &seq); err != nil {
			t.Fatal(err)
		}
		t.Logf("left behind: aggregate %s at sequence %d", agg, seq)
	}
}
