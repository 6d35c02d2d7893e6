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

// CockroachDB's migration lock, the lease row, run here on PostgreSQL (its statements
// are accepted by both: internal/sqlcheck): migrators that contend for it never hold it
// together, and every one gets it in turn.
func TestLeaseExcludes(t *testing.T) {
	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var holders, most, done atomic.Int32
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := schema.WithLease(ctx, db.Pool, 3*time.Second, func(ctx context.Context) error {
				n := holders.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				// Hold it a moment, as a migration does, so that the others contend.
				select {
				case <-ctx.Done():
				case <-time.After(30 * time.Millisecond):
				}
				holders.Add(-1)
				done.Add(1)
				return nil
			})
			if err != nil {
				t.Errorf("withLease: %v", err)
			}
		}()
	}
	wg.Wait()
	if most.Load() != 1 || done.Load() != 6 {
		t.Errorf("at most %d holders at once (want 1), %d of 6 ran", most.Load(), done.Load())
	}
}

// A migrator that dies holding the lease (its row stays, unrenewed) delays the next
// one by the lease's length at most; and a holder whose lease another took is
// cancelled and told so (schema.ErrLeaseLost).
func TestLeaseExpiresAndIsLost(t *testing.T) {
	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.Pool.Exec(ctx, schema.LeaseTableSQL); err != nil {
		t.Fatal(err)
	}
	// A dead migrator's lease, with 1 s left.
	if _, err := db.Pool.Exec(ctx, schema.TakeLeaseSQL, "dead", time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := schema.WithLease(ctx, db.Pool, 3*time.Second, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 500*time.Millisecond {
		t.Errorf("took a live lease after %s", waited)
	}

	// The holder's lease is stolen (as after a pause longer than the lease): its next
	// renewal cancels its work.
	err := schema.WithLease(ctx, db.Pool, 600*time.Millisecond, func(ctx context.Context) error {
		if _, err := db.Pool.Exec(ctx, `UPDATE schema_migration_lock SET holder = 'thief' WHERE name = 'migrate'`); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, schema.ErrLeaseLost) {
		t.Errorf("withLease after its lease was taken: %v, want schema.ErrLeaseLost", err)
	}
}
