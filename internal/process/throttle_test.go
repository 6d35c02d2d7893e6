package process_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Issue 19: CockroachDB's license throttle refuses any statement with XXC02, a
// handler's own included. Recorded as the handler's failure, every try counted an
// attempt, and a throttled cluster turned events DEAD. It must abort the batch instead,
// count nothing, and leave the event for when the throttle lifts.
func TestLicenseThrottleIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	// CockroachDB refuses the handler's statement, which aborts the transaction as any
	// failed statement does; PostgreSQL stands in with a statement that fails.
	throttle := func(ctx context.Context, tx pgx.Tx, what string) error {
		_, _ = tx.Exec(ctx, "SELECT 1/0")
		return fmt.Errorf("%s: %w", what, &pgconn.PgError{Code: journal.CodeLicenseThrottled,
			Message: "No license installed. The maximum number of concurrently open transactions has been reached."})
	}
	for _, mode := range []string{"handler", "batch handler"} {
		t.Run(mode, func(t *testing.T) {
			db := testenv.NewDB(t)
			reg := process.NewRegistry()
			calls := 0
			if mode == "handler" {
				reg.Register(pt.EffectType, process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
					calls++
					return throttle(ctx, tx, "writing the customer")
				}))
			} else {
				reg.Register(pt.EffectType, batchFunc(func(ctx context.Context, tx pgx.Tx, evs []process.Event) ([]error, error) {
					calls++
					return nil, throttle(ctx, tx, "writing customers")
				}))
			}
			e := process.New(db.Pool, reg, process.Config{MaxAttempts: 2, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil, nil)
			id := pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{}))[0]
			for range 3 {
				_, err := e.Process(context.Background(), id)
				if !journal.IsLicenseThrottled(err) {
					t.Fatalf("Process = %v, want the throttle error", err)
				}
			}
			if status, attempts, lastErr := pt.Status(t, db.Pool, id); status != "RECEIVED" || attempts != 0 {
				t.Errorf("after 3 throttled runs: %s, %d attempts (%q); want RECEIVED, 0", status, attempts, lastErr)
			}
			if calls < 3 {
				t.Errorf("handler calls = %d", calls)
			}
		})
	}
}

func TestIsLicenseThrottled(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		fmt.Errorf("x: %w", &pgconn.PgError{Code: "XXC02"}): true,
		&pgconn.PgError{Code: "XXC01"}:                      false,
		&pgconn.PgError{Code: "40001"}:                      false,
		context.DeadlineExceeded:                            false,
	} {
		if got := journal.IsLicenseThrottled(err); got != want {
			t.Errorf("IsLicenseThrottled(%v) = %v", err, got)
		}
	}
	if !journal.IsUnavailable(&pgconn.PgError{Code: "XXC02"}) {
		t.Error("XXC02 must be unavailable: a throttled ingest must not quarantine")
	}
}

// batchFunc is a BatchHandler whose Handle fails the same way as the batch.
type batchFunc func(ctx context.Context, tx pgx.Tx, evs []process.Event) ([]error, error)

func (f batchFunc) HandleBatch(ctx context.Context, tx pgx.Tx, evs []process.Event) ([]error, error) {
	return f(ctx, tx, evs)
}

func (f batchFunc) Handle(ctx context.Context, tx pgx.Tx, ev process.Event) error {
	_, err := f(ctx, tx, []process.Event{ev})
	return err
}
