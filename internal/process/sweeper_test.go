package process_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

func runSweeper(t *testing.T, s *process.Sweeper) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sweeper: %v", err)
		}
	})
}

// The PostgreSQL path: no feed, the sweeper alone takes journal rows to PROCESSED.
func TestSweeperOnly(t *testing.T) {
	db := testenv.NewDB(t)
	e, _, m := newEngine(t, db, process.Config{MaxAttempts: 3})
	e.Registry().RunOnDead(pt.EffectType) // the DEAD events' successors run on (parking: TestDeadParksAggregate)
	var payloads [][]byte
	for i := 0; i < 300; i++ {
		s := pt.Spec{Aggregate: fmt.Sprintf("agg-%d", i%25)}
		switch i % 50 {
		case 7:
			s.FailTimes = 1
		case 13:
			s.Always = true
		}
		payloads = append(payloads, pt.Payload(s))
	}
	pt.Ingest(t, db.Pool, payloads...)
	start := time.Now()
	runSweeper(t, process.NewSweeper(e, process.SweeperConfig{Interval: 10 * time.Millisecond, Grace: 0, BatchSize: 50}))
	testenv.Eventually(t, 30*time.Second, "all events terminal", func() bool {
		return pt.CountStatus(t, db.Pool, "RECEIVED")+pt.CountStatus(t, db.Pool, "FAILED") == 0
	})
	elapsed := time.Since(start)
	r := pt.Check(t, db.Pool)
	if r.ByStatus["PROCESSED"] != 294 || r.ByStatus["DEAD"] != 6 {
		t.Errorf("statuses = %v, want 294 PROCESSED and 6 DEAD", r.ByStatus)
	}
	if r.Effects != 294 {
		t.Errorf("effects = %d, want 294", r.Effects)
	}
	testenv.Eventually(t, 30*time.Second, "dead gauge", func() bool {
		return gaugeValue(t, m, "inboxd_dead_events") == 6
	})
	if v := counterValue(t, m, "inboxd_sweeper_picked_total", "kind", "retry"); v < 6 {
		t.Errorf("sweeper retries counted = %v, want >= 6", v)
	}
	t.Logf("sweeper-only: %d events in %s (%.0f events/s)", len(payloads), elapsed, float64(len(payloads))/elapsed.Seconds())
}

func TestSweeperGraceLeavesFreshRows(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	e, _, _ := newEngine(t, db, process.Config{})
	pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{}))
	p, err := process.NewSweeper(e, process.SweeperConfig{Grace: time.Hour}).Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p.Stranded+p.Retried != 0 {
		t.Errorf("swept %+v, want nothing inside the grace period", p)
	}
}

// Two inboxd instances (own pools, engines, sweepers) on one database.
func TestTwoSweepers(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	fx := pt.NewEffects(t, db.Pool)
	var payloads [][]byte
	for i := 0; i < 400; i++ {
		payloads = append(payloads, pt.Payload(pt.Spec{Aggregate: fmt.Sprintf("agg-%d", i%40)}))
	}
	ids := pt.Ingest(t, db.Pool, payloads...)
	for i := 0; i < 2; i++ {
		pool, err := pgxpool.New(context.Background(), db.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		reg := process.NewRegistry()
		reg.Register(pt.EffectType, fx)
		e := process.New(pool, reg, process.Config{Concurrency: 4}, metrics.New(), nil)
		runSweeper(t, process.NewSweeper(e, process.SweeperConfig{Interval: 5 * time.Millisecond, Grace: 0, BatchSize: 20}))
	}
	testenv.Eventually(t, 30*time.Second, "all processed", func() bool {
		return pt.CountStatus(t, db.Pool, "PROCESSED") == len(ids)
	})
	r := pt.Check(t, db.Pool)
	if r.Effects != len(ids) {
		t.Errorf("effects = %d, want %d", r.Effects, len(ids))
	}
	var mu sync.Mutex
	mu.Lock()
	defer mu.Unlock()
	if testenv.Serializable() {
		return // a conflict rolls a batch back and runs its handlers again; the effects above stay exact
	}
	for _, id := range ids {
		if c := fx.Calls(id); c != 1 {
			t.Errorf("event %s: handler ran %d times, want 1", id, c)
		}
	}
}

func gaugeValue(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}
