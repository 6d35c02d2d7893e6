package process_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TestIngestAndProcessingSendNoNotices: ingest and processing leave nothing in the
// server's log. Every notice the server sends on their pool is a line in it (a WARNING
// is logged at the default log_min_messages): SET LOCAL outside a transaction block was
// two such lines per ingest batch.
func TestIngestAndProcessingSendNoNotices(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	var (
		mu      sync.Mutex
		notices []string
	)
	pool := db.OpenPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			mu.Lock()
			defer mu.Unlock()
			notices = append(notices, n.Severity+": "+n.Message)
		}
	})
	fx := pt.NewEffects(t, db.Pool)
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, fx)
	e := process.New(pool, reg, process.Config{ImmediateRetries: -1}, nil, nil)

	var ids []string
	for range 3 { // several ingest batches, on a warm pool too
		ids = append(ids, pt.Ingest(t, pool, pt.Payload(pt.Spec{}), pt.Payload(pt.Spec{}), pt.Payload(pt.Spec{Always: true}))...)
	}
	items := make([]process.Item, len(ids))
	for i, id := range ids {
		items[i] = process.Item{ID: id}
	}
	if _, err := e.ProcessBatch(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	if r := pt.Check(t, db.Pool); r.Effects != 6 {
		t.Fatalf("effects = %d, want 6", r.Effects)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notices) > 0 {
		t.Errorf("the server sent %d notices, want none: %q", len(notices), notices)
	}
}
