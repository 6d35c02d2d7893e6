package inboxd_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Client's replay, end to end: PlanReplay stores a frozen plan with its counts,
// StartReplay records who and why, the running Client executes the run (handlers see
// ModeReplay and the run's id), and ReplayStatus shows it done.
func TestClientReplay(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	c, err := inboxd.New(db.Pool, inboxd.Config{StompAddr: testenv.Broker(t), Destinations: []string{testenv.Queue(t)},
		DisableHTTP: true, DisableWebhook: true})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	replayed := map[string]string{} // event id: run
	c.Handle(pt.EffectType, inboxd.HandlerFunc(func(_ context.Context, _ pgx.Tx, ev inboxd.Event) error {
		if ev.Mode == inboxd.ModeReplay {
			mu.Lock()
			replayed[ev.ID] = ev.ReplayRun
			mu.Unlock()
		}
		return nil
	}))
	var payloads [][]byte
	for i := range 30 {
		payloads = append(payloads, pt.Payload(pt.Spec{Aggregate: fmt.Sprintf("agg-%d", i%3)}))
	}
	ids := pt.Ingest(t, db.Pool, payloads...)
	rctx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(rctx) }()
	defer func() { cancel(); <-stopped }()
	testenv.Eventually(t, time.Minute, "history processed", func() bool { return pt.CountStatus(t, db.Pool, "PROCESSED") == 30 })

	run, err := c.PlanReplay(ctx, inboxd.ReplaySelection{AggregateID: "agg-1"})
	if err != nil {
		t.Fatal(err)
	}
	if run.State != "planned" || run.Events != 10 || run.Aggregates != 1 || run.Pending != 10 || run.Types[pt.EffectType] != 10 {
		t.Fatalf("plan: %+v", run)
	}
	if _, err := c.PlanReplay(ctx, inboxd.ReplaySelection{Statuses: []string{"DEAD"}}); err == nil {
		t.Error("a replay of DEAD events planned; DEAD has retry")
	}
	if err := c.StartReplay(ctx, run.ID, inboxd.ReplayStart{Reason: "handler fix", StartedBy: "operator"}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the run done", func() bool {
		r, err := c.ReplayStatus(ctx, run.ID)
		return err == nil && r.State == "done"
	})
	r, err := c.ReplayStatus(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Done != 10 || r.Attempts != 10 || r.Reason != "handler fix" || r.StartedBy != "operator" || r.StartedAt == nil || r.FinishedAt == nil {
		t.Errorf("status: %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(replayed) != 10 {
		t.Errorf("%d events replayed, want 10", len(replayed))
	}
	for i, id := range ids {
		if run, ok := replayed[id]; ok != (i%3 == 1) || (ok && run != r.ID) {
			t.Errorf("event %d (%s): replayed %v in run %q", i, id, ok, run)
		}
	}
	if err := c.PauseReplay(ctx, run.ID); err == nil {
		t.Error("paused a done run")
	}
}
