package process_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// successorPicks counts the statements that look for the due heads of given
// aggregates (journal's pickAggregatesSQL), which chain runs after a batch.
type successorPicks struct{ n atomic.Int64 }

func (s *successorPicks) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM aggregate_head AS h") && strings.Contains(d.SQL, "h.aggregate_id = ANY ($1::TEXT[]) AND NOT h.parked") {
		s.n.Add(1)
	}
	return ctx
}

func (*successorPicks) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A batch goes on to the successors of the aggregates it moved, but only of those left
// with a next event: for an aggregate of one event (most of them, in the demo's
// registrations) there is nothing to look for, and the look cost a statement per batch
// (a fifth of processing's database time in e2e-max). Every event is still processed
// in one pass, successors included.
func TestChainLooksOnlyWhereThereIsANextEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		events    int // per aggregate
		delivered bool
		wantPicks bool
	}{
		{name: "sweeper, one event per aggregate", events: 1},
		{name: "sweeper, successors waiting", events: 3, wantPicks: true},
		{name: "delivery, one event per aggregate", events: 1, delivered: true},
		{name: "delivery, successors waiting", events: 3, delivered: true, wantPicks: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			db := testenv.NewDB(t)
			picks := &successorPicks{}
			pool := db.OpenPool(t, func(cfg *pgxpool.Config) {
				cfg.ConnConfig.Tracer = picks
			})
			e, _, _ := newEngine(t, &testenv.DB{URL: db.URL, Pool: pool}, process.Config{})
			const aggregates = 10
			var payloads [][]byte
			for range tt.events {
				for a := range aggregates {
					payloads = append(payloads, pt.Payload(pt.Spec{Aggregate: fmt.Sprintf("agg-%d", a)}))
				}
			}
			ids := pt.Ingest(t, db.Pool, payloads...)
			if tt.delivered {
				items := make([]process.Item, aggregates) // the first event of each aggregate
				for a := range items {
					items[a] = process.Item{ID: ids[a], AggregateID: fmt.Sprintf("agg-%d", a)}
				}
				if _, err := e.ProcessBatch(ctx, items); err != nil {
					t.Fatal(err)
				}
			} else if _, err := process.NewSweeper(e, process.SweeperConfig{}).Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			if n := pt.CountStatus(t, db.Pool, "PROCESSED"); n != len(ids) {
				t.Errorf("PROCESSED = %d of %d after one pass", n, len(ids))
			}
			if got := picks.n.Load(); (got > 0) != tt.wantPicks {
				t.Errorf("%d looks for successors, want some: %v", got, tt.wantPicks)
			}
		})
	}
}
