package process_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// siReadRelationsSQL lists the tables and indexes the current transaction holds a
// relation-level SSI predicate lock on (SIReadLock): what a sequential scan, or an
// index with no page yet, takes under SERIALIZABLE.
const siReadRelationsSQL = `
SELECT coalesce(c.relname, l.relation::TEXT) FROM pg_locks AS l LEFT JOIN pg_class AS c ON c.oid = l.relation
WHERE l.mode = 'SIReadLock' AND l.locktype = 'relation'
  AND l.virtualtransaction = (SELECT v.virtualtransaction FROM pg_locks AS v
                              WHERE v.locktype = 'virtualxid' AND v.pid = pg_backend_pid() LIMIT 1)
ORDER BY 1`

// Under SERIALIZABLE (the CockroachDB-faithful profile's PostgreSQL, or a database an
// operator set so), a processing batch reads the journal by key: its claim takes no
// predicate lock on the whole journal. With one (a sequential scan, which the planner
// chose while the journal was small), every other batch's settle conflicted with it,
// and a long batch beside short ones was cancelled at its settle as a pivot, try after
// try (TestChangefeedOnlyPush: a wave of registrations waited over 90 s).
func TestSerializableBatchReadsTheJournalByKey(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		due  bool // claimed by a sweep (pick, then lock); else delivered by id
	}{{name: "delivered"}, {name: "swept", due: true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testenv.NewDBWith(t, testenv.DBOptions{Isolation: "serializable"})
			var (
				mu      sync.Mutex
				whole   = map[string]bool{}
				handled int
			)
			reg := process.NewRegistry()
			reg.Register(pt.EffectType, process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, _ process.Event) error {
				rows, err := tx.Query(ctx, siReadRelationsSQL)
				if err != nil {
					return err
				}
				rels, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				handled++
				for _, r := range rels {
					whole[r] = true
				}
				return nil
			}))
			const n = 40
			payloads := make([][]byte, n)
			for i := range payloads {
				payloads[i] = pt.Payload(pt.Spec{Aggregate: fmt.Sprintf("agg-%d", i%20)})
			}
			ids := pt.Ingest(t, db.Pool, payloads...)
			e := process.New(db.Pool, reg, process.Config{Concurrency: 1, BatchSize: n, ImmediateRetries: -1}, metrics.New(), nil)
			if tt.due {
				if _, _, err := e.ProcessDue(ctx, 0, n, nil); err != nil {
					t.Fatal(err)
				}
			} else {
				items := make([]process.Item, len(ids))
				for i, id := range ids {
					items[i] = process.Item{ID: id}
				}
				if _, err := e.ProcessBatch(ctx, items); err != nil {
					t.Fatal(err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if handled == 0 {
				t.Fatal("no handler ran")
			}
			if whole["journal"] {
				t.Errorf("a processing transaction held a predicate lock on the whole journal (relation-level SIReadLocks: %v)", whole)
			}
		})
	}
}

// A batch that keeps conflicting runs again with half as many events as it claimed, not
// half its size limit: 8 events under the default limit of 100 used to run whole on
// every try until the halved limit reached 8, four tries, each running every handler
// before the conflict.
func TestConflictsHalveTheClaimedBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	e, fx, _ := newEngine(t, db, process.Config{Concurrency: 1})
	const n = 8
	payloads := make([][]byte, n)
	for i := range payloads {
		s := pt.Spec{Aggregate: fmt.Sprintf("agg-%d", i)}
		if i == n-1 {
			s.Conflicts = 4 // the last in sequence order: every try runs the others first
		}
		payloads[i] = pt.Payload(s)
	}
	ids := pt.Ingest(t, db.Pool, payloads...)
	items := make([]process.Item, n)
	for i, id := range ids {
		items[i] = process.Item{ID: id, AggregateID: fmt.Sprintf("agg-%d", i)}
	}
	outs, err := e.ProcessBatch(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if o != process.OutcomeProcessed {
			t.Errorf("event %d: %s", i, o)
		}
	}
	pt.Check(t, db.Pool)
	// Tries: 8 and 8 conflict; then 4 (commit), 4 (conflict), 2 (commit), 2 (conflict),
	// 1 and 1. The first event ran in the two whole tries and the one that committed it.
	if got := fx.Calls(ids[0]); got != 3 {
		t.Errorf("the first event's handler ran %d times, want 3 (two whole tries, then half of the 8 claimed)", got)
	}
}
