package schema_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/schema"
)

// fakeJobs stands in for CockroachDB's schema-change jobs (SHOW JOBS), which
// PostgreSQL has none of: a job runs while running is set.
type fakeJobs struct {
	mu      sync.Mutex
	running bool
	status  string
	polls   atomic.Int32
}

func (f *fakeJobs) set(running bool, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running, f.status = running, status
}

func (f *fakeJobs) list(context.Context) ([]schema.SchemaJob, error) {
	f.polls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running {
		return nil, nil
	}
	return []schema.SchemaJob{{ID: 42, Status: f.status, Description: "ALTER TABLE journal ADD COLUMN IF NOT EXISTS x INT8"}}, nil
}

// waitPolls waits until jobs has been asked n more times.
func (f *fakeJobs) waitPolls(t *testing.T, n int32) {
	t.Helper()
	at := f.polls.Load()
	testenv.Eventually(t, 10*time.Second, "the migrator asks for jobs again", func() bool { return f.polls.Load() >= at+n })
}

// A migrator that takes the lease while a schema change still runs (a killed
// migrator's, whose job outlived it) waits for it to end before it migrates; one whose
// job waits for an operator (paused) is refused at once.
func TestMigratorWaitsForSchemaChangeJobs(t *testing.T) {
	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	jobs := &fakeJobs{}
	jobs.set(true, "running")
	var ran atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- schema.WithLeaseJobs(ctx, db.Pool, 3*time.Second, 10*time.Millisecond, jobs.list, func(context.Context) error {
			ran.Store(true)
			return nil
		})
	}()
	jobs.waitPolls(t, 3)
	if ran.Load() {
		t.Fatal("migrated while a schema change ran")
	}
	jobs.set(false, "")
	if err := <-done; err != nil || !ran.Load() {
		t.Fatalf("after the schema change ended: %v (migrated: %v)", err, ran.Load())
	}

	jobs.set(true, "paused")
	err := schema.WithLeaseJobs(ctx, db.Pool, 3*time.Second, 10*time.Millisecond, jobs.list, func(context.Context) error {
		t.Error("migrated while a paused schema change waits")
		return nil
	})
	if !errors.Is(err, schema.ErrSchemaChangeStuck) {
		t.Errorf("with a paused schema change: %v, want ErrSchemaChangeStuck", err)
	}
	if leaseHeld(t, db) {
		t.Error("the lease is held after the refusal")
	}
}

// A migrator whose statement was cancelled (its context ended: it is being stopped)
// while its schema change goes on keeps the lease until that job ends, so that the
// next migrator does not start beside it.
func TestLeaseKeptUntilInterruptedSchemaChangeEnds(t *testing.T) {
	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobs := &fakeJobs{}
	done := make(chan error, 1)
	go func() {
		done <- schema.WithLeaseJobs(ctx, db.Pool, 3*time.Second, 10*time.Millisecond, jobs.list, func(ctx context.Context) error {
			// The migration's statement started a schema change, then the migrator is
			// stopped: the statement ends, its job does not.
			jobs.set(true, "running")
			cancel()
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	jobs.waitPolls(t, 3)
	if !leaseHeld(t, db) {
		t.Fatal("the lease was released while the interrupted schema change ran")
	}
	jobs.set(false, "")
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("withLease: %v, want the migration's context.Canceled", err)
	}
	if leaseHeld(t, db) {
		t.Error("the lease is held after the schema change ended")
	}
}

// Each migration is recorded in the statement that checks the lease: a migrator whose
// lease another took records nothing (ErrLeaseLost), and the next one applies it again.
func TestRecordChecksTheLease(t *testing.T) {
	db := testenv.NewDB(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, schema.LeaseTableSQL); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, schema.TakeLeaseSQL, "me", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	recorded := func(v int) bool {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM schema_migrations WHERE version = $1`, v).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	mine := schema.Migration{Version: 9990, Name: "9990_mine.sql", ServesFrom: 9990}
	if err := schema.RecordMigration(ctx, db.Pool, mine, "me"); err != nil || !recorded(9990) {
		t.Fatalf("recording under the lease: %v (recorded: %v)", err, recorded(9990))
	}
	if err := schema.RecordMigration(ctx, db.Pool, mine, "me"); err != nil {
		t.Errorf("recording again (already recorded): %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE schema_migration_lock SET holder = 'thief'`); err != nil {
		t.Fatal(err)
	}
	lost := schema.Migration{Version: 9991, Name: "9991_lost.sql", ServesFrom: 9991}
	if err := schema.RecordMigration(ctx, db.Pool, lost, "me"); !errors.Is(err, schema.ErrLeaseLost) || recorded(9991) {
		t.Errorf("recording after the lease was taken: %v (recorded: %v), want ErrLeaseLost and no record", err, recorded(9991))
	}
}
