package replay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/replay"
	"github.com/inboxd/inboxd/internal/testenv"
)

// failing fails every replay of its events; live runs succeed.
type failing struct{}

func (failing) Handle(ctx context.Context, tx pgx.Tx, ev process.Event) error {
	if ev.Mode == "replay" {
		return errors.New("still broken")
	}
	return nil
}

// The run's controls and a replay that fails: pause stops the runner before its next
// event and resume goes on; cancel ends the run and releases its aggregates; a
// replayed event that fails is retried with backoff up to the retry policy, then is
// dead and holds its aggregate (the run does not finish) until the run is cancelled.
func TestReplayControls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := func(t *testing.T, reg *process.Registry, n int) (*testenv.DB, journal.ReplayRun) {
		db := testenv.NewDB(t)
		if _, err := db.Pool.Exec(ctx, `CREATE TABLE replay_log (seq BIGSERIAL PRIMARY KEY, event_id UUID NOT NULL,
			aggregate_id TEXT NOT NULL, sequence_no INT8 NOT NULL, mode TEXT NOT NULL, run TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		pt.Ingest(t, db.Pool, payloads(n, 5, 0)...)
		sctx, stop := context.WithCancel(ctx)
		done := sweep(sctx, db.Pool, reg)
		testenv.Eventually(t, time.Minute, "history processed", func() bool { return pt.CountStatus(t, db.Pool, "PROCESSED") == n })
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		run, _, err := replay.StorePlan(ctx, db.Pool, journal.Selection{}, false, 0)
		if err != nil {
			t.Fatal(err)
		}
		return db, run
	}
	t.Run("pause, resume, cancel", func(t *testing.T) {
		t.Parallel()
		_, reg := registryOnly()
		db2, run := setup(t, reg, 20)
		x := replay.Executor{Pool: db2.Pool, Dialect: database.PostgreSQL, Registry: reg}
		if st, err := x.Execute(ctx, run.ID); err != nil || st != journal.RunPlanned {
			t.Fatalf("a planned run executes nothing: %q, %v", st, err)
		}
		if err := journal.StartReplayRun(ctx, db2.Pool, run.ID, "r", "ops", 0, false); err != nil {
			t.Fatal(err)
		}
		if err := journal.StartReplayRun(ctx, db2.Pool, run.ID, "r", "ops", 0, false); !errors.Is(err, journal.ErrRunState) {
			t.Fatalf("second start: %v, want ErrRunState", err)
		}
		if err := journal.PauseReplayRun(ctx, db2.Pool, run.ID); err != nil {
			t.Fatal(err)
		}
		if st, err := x.Execute(ctx, run.ID); err != nil || st != journal.RunPaused {
			t.Fatalf("paused run: %q, %v", st, err)
		}
		r, _ := journal.GetReplayRun(ctx, db2.Pool, run.ID, true)
		if r.Done != 0 || r.Pending != 20 {
			t.Fatalf("paused run replayed %d events", r.Done)
		}
		if err := journal.ResumeReplayRun(ctx, db2.Pool, run.ID); err != nil {
			t.Fatal(err)
		}
		if st, err := x.Execute(ctx, run.ID); err != nil || st != journal.RunDone {
			t.Fatalf("resumed run: %q, %v", st, err)
		}
		if err := journal.CancelReplayRun(ctx, db2.Pool, run.ID); !errors.Is(err, journal.ErrRunState) {
			t.Fatalf("cancelling a done run: %v, want ErrRunState", err)
		}
		r, _ = journal.GetReplayRun(ctx, db2.Pool, run.ID, true)
		if r.Done != 20 || r.StartedBy != "ops" || r.Reason != "r" || r.FinishedAt == nil {
			t.Errorf("done run: %+v", r)
		}
	})
	t.Run("a failing replay retries, then is dead and holds its aggregate until cancelled", func(t *testing.T) {
		t.Parallel()
		reg := process.NewRegistry()
		reg.Register(pt.EffectType, failing{})
		db, run := setup(t, reg, 10)
		if err := journal.StartReplayRun(ctx, db.Pool, run.ID, "r", "ops", 0, false); err != nil {
			t.Fatal(err)
		}
		x := replay.Executor{Pool: db.Pool, Dialect: database.PostgreSQL, Registry: reg, Idle: 10 * time.Millisecond,
			Engine: process.Config{MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, ImmediateRetries: -1}}
		xctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stopped := make(chan error, 1)
		go func() { _, err := x.Execute(xctx, run.ID); stopped <- err }()
		testenv.Eventually(t, time.Minute, "the first event of each aggregate dead", func() bool {
			r, err := journal.GetReplayRun(ctx, db.Pool, run.ID, true)
			return err == nil && r.Dead == 5
		})
		r, _ := journal.GetReplayRun(ctx, db.Pool, run.ID, true)
		if r.State != journal.RunRunning || r.Pending != 5 || r.Attempted != 15 {
			t.Errorf("run %s with %d pending, %d attempts; want running, 5 pending behind the dead, 15 attempts", r.State, r.Pending, r.Attempted)
		}
		var holds int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM replay_hold WHERE run_id = $1::UUID`, run.ID).Scan(&holds); err != nil || holds != 5 {
			t.Errorf("%d aggregates held, want 5 (%v)", holds, err)
		}
		if err := journal.CancelReplayRun(ctx, db.Pool, run.ID); err != nil {
			t.Fatal(err)
		}
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM replay_hold`).Scan(&holds); err != nil || holds != 0 {
			t.Errorf("%d aggregates held after cancel (%v)", holds, err)
		}
		var failed int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM journal_attempt WHERE replay_run = $1::UUID AND outcome IN ('FAILED', 'DEAD')`,
			run.ID).Scan(&failed); err != nil || failed != 15 {
			t.Errorf("%d failed attempts in the history, want 15 (%v)", failed, err)
		}
	})
}
