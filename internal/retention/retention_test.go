package retention

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

func batch(t *testing.T, from, n int) journal.Batch {
	t.Helper()
	var b journal.Batch
	for i := from; i < from+n; i++ {
		body := fmt.Sprintf(`{"id":"6f1c1f0e-1c3a-4c55-9a65-%012d","aggregateId":"a%d"}`, i, i%7)
		ev, err := message.Decode([]byte(body), func(string) string { return "" }, message.Options{DefaultEventType: "t"})
		if err != nil {
			t.Fatal(err)
		}
		b.Entries = append(b.Entries, journal.Entry{Event: ev, Destination: "/queue/retention"})
	}
	return b
}

func counts(t *testing.T, db database.DB) journal.Counts {
	t.Helper()
	c, err := journal.CountRows(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// With a short retention, the running pruner deletes expired PROCESSED and REJECTED
// entries and old quarantine rows, never RECEIVED, FAILED or DEAD ones, while ingest
// goes on writing: every ingested entry is there afterwards.
func TestPrunerKeepsWhatItMust(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := testenv.NewDB(t)

	if _, err := journal.Ingest(ctx, db.Pool, batch(t, 0, 500)); err != nil {
		t.Fatal(err)
	}
	// 100 of each status, all last updated an hour ago.
	if _, err := db.Pool.Exec(ctx, `
		UPDATE journal SET updated_at = now() - INTERVAL '1 hour',
		       status = (ARRAY['RECEIVED', 'PROCESSED', 'FAILED', 'DEAD', 'REJECTED'])[1 + sequence_no % 5]`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO quarantine (id, reason, destination, body, received_at)
		SELECT gen_random_uuid(), 'not_json', '/q', 'x', now() - INTERVAL '2 hours' FROM generate_series(1, 30)`); err != nil {
		t.Fatal(err)
	}
	before := counts(t, db.Pool)

	passes := make(chan Stats, 100)
	p := New(db.Pool, Config{Journal: time.Minute, Quarantine: time.Hour, Interval: 20 * time.Millisecond, Batch: 25, Pause: time.Millisecond}, nil)
	p.passDone = func(s Stats) {
		select {
		case passes <- s:
		default:
		}
	}
	var wg, ingesting sync.WaitGroup
	wg.Add(1)
	ingesting.Add(1)
	go func() { defer wg.Done(); _ = p.Run(ctx) }()
	// Ingest goes on while the pruner runs: new rows are RECEIVED and recent.
	ingested := 0
	go func() {
		defer ingesting.Done()
		for i := 1; i <= 10; i++ {
			if _, err := journal.Ingest(context.Background(), db.Pool, batch(t, 1000*i, 100)); err != nil {
				t.Error(err)
				return
			}
			ingested += 100
		}
	}()
	deadline := time.After(30 * time.Second)
	var deleted Stats
	for deleted.Journal < int64(before.ByStatus[journal.StatusProcessed]+before.ByStatus[journal.StatusRejected]) || deleted.Quarantine < 30 {
		select {
		case s := <-passes:
			deleted.Journal += s.Journal
			deleted.Quarantine += s.Quarantine
		case <-deadline:
			t.Fatalf("pruner deleted %+v within 30s", deleted)
		}
	}
	ingesting.Wait()
	cancel()
	wg.Wait()

	after := counts(t, db.Pool)
	for _, s := range []journal.Status{journal.StatusFailed, journal.StatusDead} {
		if after.ByStatus[s] != before.ByStatus[s] {
			t.Errorf("%s: %d before, %d after; retention must never delete them", s, before.ByStatus[s], after.ByStatus[s])
		}
	}
	if want := before.ByStatus[journal.StatusReceived] + ingested; after.ByStatus[journal.StatusReceived] != want {
		t.Errorf("RECEIVED: %d, want %d (old ones kept, every new one ingested)", after.ByStatus[journal.StatusReceived], want)
	}
	if after.ByStatus[journal.StatusProcessed]+after.ByStatus[journal.StatusRejected] != 0 || after.Quarantine != 0 {
		t.Errorf("after pruning: %v, want no PROCESSED, REJECTED or quarantine rows", after)
	}
	if ingested != 1000 {
		t.Errorf("ingested %d entries while pruning, want 1000", ingested)
	}
}

func TestPrunerDisabled(t *testing.T) {
	if New(nil, Config{}, nil).Enabled() {
		t.Fatal("a pruner with no retention is enabled")
	}
	if err := New(nil, Config{}, nil).Run(context.Background()); err != nil {
		t.Fatalf("Run of a disabled pruner = %v, want nil at once", err)
	}
}
