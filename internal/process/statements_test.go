package process_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/txstats"
)

// TestProcessingStatementsPerTransaction bounds what inboxd itself sends per processing
// transaction, the handler's statements apart (txstats): on CockroachDB each statement
// is at least one round trip to the gateway, and a batch holds its locks that long. It
// was 10 to 14 statements: a savepoint and its release around the handlers and around
// the outcomes, plan_cache_mode set and reset, the outcome UPDATE, and the aggregate
// heads' lock, upsert and delete, each its own statement. The pick of a sweep, on the
// pool before the transaction begins, counts as the transaction's.
func TestProcessingStatementsPerTransaction(t *testing.T) {
	t.Parallel()
	const (
		maxStatements = 6
		maxRoundTrips = 3
	)
	for _, tt := range []struct {
		name     string
		setBased bool
		due      bool // claimed by a sweep; else delivered by id
		perBatch int  // events per processing transaction
		// held: the oldest due heads another worker holds during the first sweep (SKIP
		// LOCKED goes past them).
		held int
	}{
		{name: "set-based handler, swept", setBased: true, due: true, perBatch: 20},
		{name: "per-event handler, delivered one at a time", perBatch: 1},
		{name: "per-event handler, swept one at a time", due: true, perBatch: 1},
		{name: "set-based handler, swept past heads another worker holds", setBased: true, due: true, perBatch: 5, held: 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testenv.NewDB(t)
			tracer := &txstats.Tracer{}
			pool := db.OpenPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer })
			fx := pt.NewEffects(t, db.Pool)
			reg := process.NewRegistry()
			if tt.setBased {
				reg.Register(pt.EffectType, &setEffects{Effects: fx})
			} else {
				reg.Register(pt.EffectType, fx)
			}
			e := process.New(pool, reg, process.Config{ImmediateRetries: -1, BatchSize: tt.perBatch, Concurrency: 1}, nil, nil)
			const n = 60
			payloads := make([][]byte, n)
			for i := range payloads {
				payloads[i] = pt.Payload(pt.Spec{Aggregate: fmt.Sprintf("agg-%d", i%30)})
			}
			ids := pt.Ingest(t, db.Pool, payloads...)
			var other pgx.Tx
			if tt.held > 0 {
				var err error
				if other, err = db.Pool.Begin(ctx); err != nil {
					t.Fatal(err)
				}
				defer other.Rollback(ctx) //nolint:errcheck // an error once it ended
				if _, err := other.Exec(ctx, `SELECT 1 FROM journal_state WHERE id = ANY ($1::UUID[]) FOR UPDATE`, ids[:tt.held]); err != nil {
					t.Fatal(err)
				}
			}
			for processed := 0; processed < n; {
				if tt.due {
					outs, _, err := e.ProcessDue(ctx, 0, tt.perBatch, nil)
					if err != nil {
						t.Fatal(err)
					}
					if len(outs) == 0 {
						t.Fatalf("nothing due after %d of %d events", processed, n)
					}
					processed += len(outs)
					if other != nil {
						if err := other.Rollback(ctx); err != nil {
							t.Fatal(err)
						}
						other = nil
					}
					continue
				}
				if _, err := e.Process(ctx, ids[processed]); err != nil {
					t.Fatal(err)
				}
				processed++
			}
			if got := pt.CountStatus(t, db.Pool, journal.StatusProcessed); got != n {
				t.Fatalf("%d of %d events PROCESSED", got, n)
			}
			pt.Check(t, db.Pool)
			c := tracer.Counts()
			stmts, rts, hStmts, _ := c.PerTransaction()
			t.Logf("%d transactions: inboxd %.1f statements in %.1f round trips on average (at most %d in %d), handler %.1f statements",
				c.Transactions, stmts, rts, c.MaxStatements, c.MaxRoundTrips, hStmts)
			if c.Transactions == 0 || c.HandlerStatements == 0 {
				t.Fatalf("counted %+v: the tracer saw no processing", c)
			}
			wantStmts, wantRTs := maxStatements, maxRoundTrips
			if tt.held > 0 && testenv.Serializable() {
				// Under SERIALIZABLE a sweep picks on the pool, then locks a chunk at a time
				// (journal.ClaimDue says why): up to maxLockChunks lock round trips.
				wantStmts, wantRTs = maxStatements+3, maxRoundTrips+3
			}
			if c.MaxStatements > int64(wantStmts) || c.MaxRoundTrips > int64(wantRTs) {
				t.Errorf("inboxd sent up to %d statements in %d round trips in one processing transaction, want at most %d in %d",
					c.MaxStatements, c.MaxRoundTrips, wantStmts, wantRTs)
			}
		})
	}
}

// A claim whose first chunk of picked heads is held by another transaction locks the
// next chunk and opens the handlers' savepoint again after it, without a RELEASE. Each
// handler's failure rolls back to the latest savepoint only: every row the batch
// claimed, in either chunk, is still locked by it when its last handler runs, and the
// failed events' effects are gone while the others' stay.
func TestClaimInChunksKeepsItsLocksThroughRollbacks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	const held, limit = 4, 4
	payloads := make([][]byte, 0, held+limit)
	for i := range held + limit {
		s := pt.Spec{Aggregate: fmt.Sprintf("agg-%d", i)}
		if i >= held && i%2 == 1 {
			s.Always = true
		}
		payloads = append(payloads, pt.Payload(s))
	}
	ids := pt.Ingest(t, db.Pool, payloads...)
	other, err := db.Pool.Begin(ctx) // holds the oldest heads: the claim's first chunk
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	if _, err := other.Exec(ctx, `SELECT 1 FROM journal_state WHERE id = ANY ($1::UUID[]) FOR UPDATE`, ids[:held]); err != nil {
		t.Fatal(err)
	}
	fx := pt.NewEffects(t, db.Pool)
	var (
		calls       int
		stillLocked = -1
	)
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, process.HandlerFunc(func(hctx context.Context, tx pgx.Tx, ev process.Event) error {
		calls++
		if calls == limit { // the last one: after every earlier call, and its rollback if it failed
			var n int
			err := db.Pool.QueryRow(hctx, `SELECT count(*) FROM journal_state WHERE id = ANY ($1::UUID[])
				AND id NOT IN (SELECT id FROM journal_state WHERE id = ANY ($1::UUID[]) FOR UPDATE SKIP LOCKED)`, ids[held:]).Scan(&n)
			if err != nil {
				return fmt.Errorf("probing the batch's locks: %w", err)
			}
			stillLocked = n
		}
		return fx.Handle(hctx, tx, ev)
	}))
	e := process.New(db.Pool, reg, process.Config{ImmediateRetries: -1, MaxAttempts: 5, Concurrency: 1}, nil, nil)
	outs, claimed, err := e.ProcessDue(ctx, 0, limit, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != limit {
		t.Fatalf("claimed %d, want %d (the second chunk)", len(claimed), limit)
	}
	if stillLocked != limit {
		t.Errorf("when the batch's last handler ran, %d of its %d rows were still locked by it, want all", stillLocked, limit)
	}
	for i, id := range ids[held:] {
		want := process.OutcomeProcessed
		if (held+i)%2 == 1 {
			want = process.OutcomeFailed
		}
		if outs[id] != want {
			t.Errorf("event %d: outcome %q, want %q", held+i, outs[id], want)
		}
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM test_effects WHERE event_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if (n == 1) != (want == process.OutcomeProcessed) {
			t.Errorf("event %d (%s): %d effects", held+i, want, n)
		}
	}
}
