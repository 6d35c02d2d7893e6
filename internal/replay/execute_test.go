package replay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/replay"
	"github.com/inboxd/inboxd/internal/testenv"
)

// logHandler writes one replay_log row per run that commits (mode, run, the event's
// aggregate and sequence number), in commit order (seq), and emits one message whose
// id is derived from the event, as an idempotent handler's would be.
type logHandler struct{}

func (logHandler) Handle(ctx context.Context, tx pgx.Tx, ev process.Event) error {
	if _, err := tx.Exec(ctx, `INSERT INTO replay_log (event_id, aggregate_id, sequence_no, mode, run)
		VALUES ($1, $2, $3, $4, $5)`, ev.ID, ev.AggregateID, ev.SequenceNo, string(ev.Mode), ev.ReplayRun); err != nil {
		return err
	}
	_, err := outbox.Emit(ctx, tx, outbox.Outgoing{Destination: "/queue/replay-out", Body: []byte(ev.ID),
		ID: outbox.DerivedID(ev.ID, "v1")})
	return err
}

// logDB is a database with the replay_log table, and a registry of logHandler.
func logDB(t *testing.T) (*testenv.DB, *process.Registry) {
	t.Helper()
	db := testenv.NewDB(t)
	if _, err := db.Pool.Exec(context.Background(), `CREATE TABLE replay_log (
		seq BIGSERIAL PRIMARY KEY, event_id UUID NOT NULL, aggregate_id TEXT NOT NULL,
		sequence_no INT8 NOT NULL, mode TEXT NOT NULL, run TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	_, reg := registryOnly()
	return db, reg
}

func registryOnly() (struct{}, *process.Registry) {
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, logHandler{})
	return struct{}{}, reg
}

// processAll runs a sweeper until n events are settled.
func sweep(ctx context.Context, pool *pgxpool.Pool, reg *process.Registry) chan error {
	e := process.New(pool, reg, process.Config{}, nil, nil)
	done := make(chan error, 1)
	go func() {
		done <- process.NewSweeper(e, process.SweeperConfig{Interval: 5 * time.Millisecond, Grace: 0, BatchSize: 50}).Run(ctx)
	}()
	return done
}

func payloads(n, aggregates, offset int) [][]byte {
	out := make([][]byte, n)
	for i := range n {
		out[i] = pt.Payload(pt.Spec{Aggregate: fmt.Sprintf("agg-%02d", (offset+i)%aggregates)})
	}
	return out
}

type logRow struct {
	event, aggregate, mode, run string
	seqNo                       int64
}

func readLog(t *testing.T, pool *pgxpool.Pool) []logRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT event_id::TEXT, aggregate_id, mode, run, sequence_no FROM replay_log ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var out []logRow
	for rows.Next() {
		var r logRow
		if err := rows.Scan(&r.event, &r.aggregate, &r.mode, &r.run, &r.seqNo); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return out
}

// A replay of 1,000 processed events over 50 aggregates while new events for the same
// aggregates arrive and are processed: each event is replayed once, in its aggregate's
// journal order, no live event of an aggregate commits between two of its replayed
// ones, and every live event is applied exactly once. The replay's messages are
// published with ids of their own. Without the hold (replay_hold), the live sweeper
// interleaves live events with the replay.
func TestReplayBesideLiveTraffic(t *testing.T) {
	t.Parallel()
	db, reg := logDB(t)
	ctx := context.Background()
	const n, aggs = 1000, 50
	pt.Ingest(t, db.Pool, payloads(n, aggs, 0)...)
	sctx, stop := context.WithCancel(ctx)
	done := sweep(sctx, db.Pool, reg)
	testenv.Eventually(t, 2*time.Minute, "history processed", func() bool { return pt.CountStatus(t, db.Pool, "PROCESSED") == n })

	run, plan, err := replay.StorePlan(ctx, db.Pool, journal.Selection{}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Events != n || plan.Aggregates != aggs || run.Events != n {
		t.Fatalf("plan: %d events over %d aggregates, want %d over %d", plan.Events, plan.Aggregates, n, aggs)
	}
	if err := journal.StartReplayRun(ctx, db.Pool, run.ID, "fix", "operator", 0, true); err != nil {
		t.Fatal(err)
	}
	// Live traffic for the same aggregates while the replay runs.
	var live []string
	var liveMu sync.Mutex
	replayDone := make(chan struct{})
	ingested := make(chan error, 1)
	go func() {
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			var b journal.Batch
			for _, p := range payloads(10, aggs, i*10) {
				ev, err := message.Decode(p, func(string) string { return "" }, message.Options{DefaultEventType: pt.EffectType})
				if err != nil {
					ingested <- err
					return
				}
				b.Entries = append(b.Entries, journal.Entry{Event: ev, Destination: "/queue/test"})
				liveMu.Lock()
				live = append(live, ev.ID)
				liveMu.Unlock()
			}
			if _, err := journal.Ingest(ctx, db.Pool, b); err != nil {
				ingested <- err
				return
			}
			select {
			case <-replayDone:
				if i >= 20 {
					ingested <- nil
					return
				}
			default:
			}
			<-tick.C
		}
	}()
	state, err := replay.Executor{Pool: db.Pool, Dialect: database.PostgreSQL, Registry: reg}.Execute(ctx, run.ID)
	close(replayDone)
	if err != nil || state != journal.RunDone {
		t.Fatalf("execute: state %q, %v", state, err)
	}
	if err := <-ingested; err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "live events processed", func() bool {
		return pt.CountStatus(t, db.Pool, "PROCESSED") == n+len(live)
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	log := readLog(t, db.Pool)
	replayed, applied := map[string]int{}, map[string]int{}
	for _, r := range log {
		if r.mode == "replay" {
			if r.run != run.ID {
				t.Fatalf("replayed %s in run %q, want %s", r.event, r.run, run.ID)
			}
			replayed[r.event]++
		} else {
			applied[r.event]++
		}
	}
	if len(replayed) != n {
		t.Errorf("%d events replayed, want %d", len(replayed), n)
	}
	for id, c := range replayed {
		if c != 1 {
			t.Errorf("%s replayed %d times", id, c)
		}
	}
	for _, id := range live {
		if applied[id] != 1 {
			t.Errorf("live event %s applied %d times, want 1", id, applied[id])
		}
	}
	// Per aggregate: replayed events in journal order, and no live event between the
	// first and the last of them.
	type aggState struct {
		lastReplay       int64
		replays, between int
		liveSinceReplay  int
	}
	per := map[string]*aggState{}
	for _, r := range log[n:] { // after the history's first processing
		s := per[r.aggregate]
		if s == nil {
			s = &aggState{}
			per[r.aggregate] = s
		}
		if r.mode == "replay" {
			if r.seqNo <= s.lastReplay {
				t.Errorf("aggregate %s: replayed sequence %d after %d", r.aggregate, r.seqNo, s.lastReplay)
			}
			s.lastReplay = r.seqNo
			s.replays++
			s.between += s.liveSinceReplay
			s.liveSinceReplay = 0
		} else if s.replays > 0 {
			s.liveSinceReplay++
		}
	}
	interleaved := 0
	for agg, s := range per {
		if s.between > 0 {
			interleaved++
			t.Errorf("aggregate %s: %d live events between its replayed ones", agg, s.between)
		}
	}
	t.Logf("replayed %d events over %d aggregates beside %d live events; %d aggregates interleaved", len(replayed), len(per), len(live), interleaved)
	// The replay's messages are new rows, not duplicates of the first run's.
	var msgs int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&msgs); err != nil {
		t.Fatal(err)
	}
	if want := 2*n + len(live); msgs != want {
		t.Errorf("%d outbox rows, want %d (history, replay, live)", msgs, want)
	}
	var attempts int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM journal_attempt WHERE replay_run = $1::UUID`, run.ID).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != n {
		t.Errorf("%d attempts recorded with the run, want %d", attempts, n)
	}
	var holds int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM replay_hold`).Scan(&holds); err != nil || holds != 0 {
		t.Errorf("%d holds left after the run (%v)", holds, err)
	}
}
