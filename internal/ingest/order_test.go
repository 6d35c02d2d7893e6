package ingest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

// orderDB is the test database behind a wrapper that steers chosen ingest statements by
// the event ids they carry: the first one holding failID fails (as a lost connection
// would), the first one holding holdID waits until release is closed, and sent is closed
// once a statement holding sentID reaches the database.
type orderDB struct {
	database.DB
	failID, holdID, sentID string
	failed, held           atomic.Bool
	holding, release       chan struct{}
	sent                   chan struct{}
	sentOnce               sync.Once
}

func (o *orderDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !strings.Contains(sql, "INSERT INTO journal") || len(args) == 0 {
		return o.DB.QueryRow(ctx, sql, args...)
	}
	first := args[0]
	if _, ok := first.(pgx.QueryExecMode); ok && len(args) > 1 { // journal.Ingest names its mode first
		first = args[1]
	}
	payloads, _ := first.([]string)
	holds := func(id string) bool {
		for _, p := range payloads {
			if id != "" && strings.Contains(p, id) {
				return true
			}
		}
		return false
	}
	if holds(o.failID) && o.failed.CompareAndSwap(false, true) {
		return errRow{errors.New("injected: connection lost during ingest")}
	}
	if holds(o.holdID) && o.held.CompareAndSwap(false, true) {
		close(o.holding)
		select {
		case <-o.release:
		case <-ctx.Done():
			return errRow{ctx.Err()}
		}
	}
	if holds(o.sentID) {
		o.sentOnce.Do(func() { close(o.sent) })
	}
	return o.DB.QueryRow(ctx, sql, args...)
}

// TestOrderAfterFailedBatch is issue 18's ingest race: e1 and e2 of one aggregate are in
// consecutive batches B1 and B2 written with several commits in flight, and B1's write
// fails. B2 must not commit before the redelivered e1, or e2 would get the earlier
// sequence number and be processed first.
//
// With 3 in flight, a slow unrelated batch B0 keeps the acker from noticing B1's failure,
// so B2's decision is made while only B1's own write knows of it: deterministic. With 2
// in flight the acker and B2 race for it (run with -count=50).
func TestOrderAfterFailedBatch(t *testing.T) {
	for _, tc := range []struct {
		inFlight int
		slowB0   bool
	}{{3, true}, {2, false}} {
		t.Run(fmt.Sprintf("in flight %d", tc.inFlight), func(t *testing.T) {
			t.Parallel()
			testOrderAfterFailedBatch(t, tc.inFlight, tc.slowB0)
		})
	}
}

func testOrderAfterFailedBatch(t *testing.T, inFlight int, slowB0 bool) {
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	agg := "order-" + testenv.Suffix()
	y, e1, e2 := message.NewID(), message.NewID(), message.NewID()
	odb := &orderDB{DB: db.Pool, failID: e1, sentID: e2,
		holding: make(chan struct{}), release: make(chan struct{}), sent: make(chan struct{})}
	var skippedOnce sync.Once
	skippedE2 := make(chan struct{})
	h := hooks{skipped: func(_ string, b *batch) {
		if _, ok := b.keys["e:"+e2]; ok {
			skippedOnce.Do(func() { close(skippedE2) })
		}
	}}
	if slowB0 {
		odb.holdID = y
		publish(t, addr, q, fmt.Appendf(nil, `{"id":%q,"aggregateId":"other-%s"}`, y, agg), nil)
	} else {
		close(odb.release)
	}
	publish(t, addr, q, fmt.Appendf(nil, `{"id":%q,"aggregateId":%q,"n":1}`, e1, agg), nil)
	publish(t, addr, q, fmt.Appendf(nil, `{"id":%q,"aggregateId":%q,"n":2}`, e2, agg), nil)
	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 1, Prefetch: 4,
		CommitsInFlight: inFlight}, odb, h)
	if slowB0 {
		// Release B0 only once B2's fate is decided: written (the bug) or skipped.
		deadline := time.After(30 * time.Second)
		select {
		case <-odb.holding:
		case <-deadline:
			t.Fatal("B0 never reached the database")
		}
		select {
		case <-odb.sent:
		case <-skippedE2:
		case <-deadline:
			t.Fatal("B2 was neither written nor skipped")
		}
		close(odb.release)
	}
	testenv.Eventually(t, 30*time.Second, "e1 and e2 journaled", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM journal WHERE id = ANY($1::UUID[])`, []string{e1, e2}) == 2
	})
	var s1, s2 int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT
		(SELECT sequence_no FROM journal WHERE id = $1::UUID), (SELECT sequence_no FROM journal WHERE id = $2::UUID)`,
		e1, e2).Scan(&s1, &s2); err != nil {
		t.Fatal(err)
	}
	if !odb.failed.Load() {
		t.Fatal("B1's write never failed: the scenario was not exercised")
	}
	if s1 >= s2 {
		t.Fatalf("e2 (sequence %d) was journaled before e1 (sequence %d) of the same aggregate after e1's batch failed", s2, s1)
	}
	testenv.Eventually(t, 30*time.Second, "every message acked", func() bool {
		return r.counter("acked", q) >= float64(2+btoi(slowB0))
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
