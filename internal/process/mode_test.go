package process_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/eventctx"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// A handler sees each run's mode: live on the first attempt, retry after a failed one
// and after an operator's retry; and what it emits records its event (outbox.event_id).
func TestHandlerSeesModeAndEmitRecordsEvent(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	var mu sync.Mutex
	var modes []eventctx.Mode
	fail := 1 // the first run fails
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
		mu.Lock()
		modes = append(modes, ev.Mode)
		f := fail > 0
		fail--
		mu.Unlock()
		if f {
			return errors.New("down")
		}
		_, err := outbox.Emit(ctx, tx, outbox.Outgoing{Destination: "/queue/mode-test", Body: []byte(`{}`)})
		return err
	}))
	e := process.New(db.Pool, reg, process.Config{ImmediateRetries: -1, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil, nil)
	ids := pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{Aggregate: "m"}))
	ctx := context.Background()
	runSweeper(t, process.NewSweeper(e, process.SweeperConfig{Interval: time.Millisecond, Grace: 0, BatchSize: 10}))
	testenv.Eventually(t, 10*time.Second, "processed", func() bool { return pt.CountStatus(t, db.Pool, "PROCESSED") == 1 })

	mu.Lock()
	got := append([]eventctx.Mode(nil), modes...)
	mu.Unlock()
	if len(got) != 2 || got[0] != eventctx.Live || got[1] != eventctx.Retry {
		t.Fatalf("modes %v, want [live retry]", got)
	}
	rows, err := outbox.EmittedBy(ctx, db.Pool, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows[ids[0]]) != 1 || rows[ids[0]][0].Destination != "/queue/mode-test" {
		t.Fatalf("outbox rows of the event: %+v, want the one it emitted", rows)
	}

	// An operator's retry of a REJECTED-like settled event runs as a retry too.
	if _, err := db.Pool.Exec(ctx, `UPDATE journal_state SET status = 'REJECTED' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.RetryOne(ctx, db.Pool, ids[0]); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "reprocessed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(modes) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	if modes[2] != eventctx.Retry {
		t.Fatalf("operator retry ran as %q, want retry", modes[2])
	}
}
