package process_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

const hangType = "hang"

// hanger is a handler that ignores its context: it blocks until the test ends.
type hanger struct {
	entered chan string
	release chan struct{}
	once    sync.Once
}

func newHanger(t *testing.T) *hanger {
	h := &hanger{entered: make(chan string, 100), release: make(chan struct{})}
	t.Cleanup(func() { h.once.Do(func() { close(h.release) }) })
	return h
}

func (h *hanger) Handle(_ context.Context, _ pgx.Tx, ev process.Event) error {
	h.entered <- ev.ID
	<-h.release // like time.Sleep(time.Hour): the context is ignored
	return nil
}

func hangEngine(t *testing.T, db *testenv.DB, cfg process.Config) (*process.Engine, *hanger) {
	t.Helper()
	fx := pt.NewEffects(t, db.Pool)
	h := newHanger(t)
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, fx)
	reg.Register(hangType, h)
	if cfg.BaseBackoff == 0 {
		cfg.BaseBackoff, cfg.MaxBackoff = time.Hour, time.Hour
	}
	return process.New(db.Pool, reg, cfg, metrics.New(), nil), h
}

// notLocked fails unless the entry's rows (journal and journal_state) are soon free: an
// abandoned transaction ends when the server sees its connection close, a moment after
// the client closed it.
func notLocked(t *testing.T, db *testenv.DB, id string) {
	t.Helper()
	free := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var got string
		return tx.QueryRow(ctx, `SELECT j.id::TEXT FROM journal AS j JOIN journal_state AS s ON s.id = j.id WHERE j.id = $1 FOR UPDATE NOWAIT`, id).Scan(&got) == nil
	}
	testenv.Eventually(t, 30*time.Second, "entry "+id+" unlocked", free)
}

// Issue 8: a handler that ignores its ctx holds its own entry only. The sweeper keeps
// processing 100 other aggregates meanwhile, and stops within its bound on shutdown,
// leaving the hung entry untouched and unlocked.
func TestHungHandlerHoldsOnlyItsEntry(t *testing.T) {
	db := testenv.NewDB(t)
	e, h := hangEngine(t, db, process.Config{Concurrency: 4, HandlerTimeout: time.Hour})
	hung := pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{Type: hangType, Aggregate: "stuck"}))[0]
	var payloads [][]byte
	for i := 0; i < 100; i++ {
		payloads = append(payloads, pt.Payload(pt.Spec{Aggregate: fmt.Sprintf("agg-%d", i)}))
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	sw := process.NewSweeper(e, process.SweeperConfig{Interval: 10 * time.Millisecond, Grace: 0, BatchSize: 20, StopTimeout: 300 * time.Millisecond})
	go func() { done <- sw.Run(ctx) }()
	defer cancel()
	select {
	case <-h.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("hung handler never ran")
	}
	pt.Ingest(t, db.Pool, payloads...)
	testenv.Eventually(t, 30*time.Second, "100 other aggregates processed while one handler hangs", func() bool {
		return pt.CountStatus(t, db.Pool, "PROCESSED") == 100
	})
	pt.Check(t, db.Pool)

	// Shutdown is bounded by StopTimeout plus the abandon grace, hung handler or not.
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sweeper did not stop within 10s with a hung handler")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("stop took %s, want within StopTimeout (300ms) + 1s grace", took)
	}
	// Not half-recorded: the entry is as it was, and free for the next worker.
	if status, attempts, _ := pt.Status(t, db.Pool, hung); status != "RECEIVED" || attempts != 0 {
		t.Errorf("hung entry after stop: %s, %d attempts; want RECEIVED, 0", status, attempts)
	}
	notLocked(t, db, hung)
}

// Issue 8: a handler past HandlerTimeout fails (attempt counted), whether it honours its
// ctx or not, and the statement_timeout of its transaction is set.
func TestHandlerTimeout(t *testing.T) {
	db := testenv.NewDB(t)
	fx := pt.NewEffects(t, db.Pool)
	h := newHanger(t)
	var stmtTimeout string
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, fx)
	reg.Register(hangType, h)
	reg.Register("slow", process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
		if err := tx.QueryRow(ctx, `SELECT current_setting('statement_timeout')`).Scan(&stmtTimeout); err != nil {
			return err
		}
		<-ctx.Done() // honours its ctx, but only returns when it ends
		return ctx.Err()
	}))
	e := process.New(db.Pool, reg, process.Config{HandlerTimeout: time.Second, MaxAttempts: 3, BaseBackoff: time.Hour, MaxBackoff: time.Hour}, metrics.New(), nil)
	ids := pt.Ingest(t, db.Pool,
		pt.Payload(pt.Spec{Type: hangType, Aggregate: "a"}),
		pt.Payload(pt.Spec{Type: "slow", Aggregate: "b"}),
		pt.Payload(pt.Spec{Aggregate: "c"}))
	items := []process.Item{{ID: ids[0]}, {ID: ids[1]}, {ID: ids[2]}}
	start := time.Now()
	outs, err := e.ProcessBatch(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("batch took %s with a hung handler, want about HandlerTimeout + 1s", took)
	}
	want := []process.Outcome{process.OutcomeFailed, process.OutcomeFailed, process.OutcomeProcessed}
	for i := range want {
		if outs[i] != want[i] {
			t.Errorf("outcome %d = %s, want %s", i, outs[i], want[i])
		}
	}
	for _, id := range ids[:2] {
		status, attempts, lastErr := pt.Status(t, db.Pool, id)
		if status != "FAILED" || attempts != 1 || !strings.Contains(lastErr, "timed out after 1s") {
			t.Errorf("%s: %s, %d attempts, %q; want FAILED, 1, timed out", id, status, attempts, lastErr)
		}
		notLocked(t, db, id)
	}
	// The server's bound: HandlerTimeout, floored for the engine's own statements (the
	// handler's deadline is its context's, which ended it at 1 s above).
	if stmtTimeout != "5s" {
		t.Errorf("statement_timeout in the processing transaction = %q, want 5s (HandlerTimeout 1s, floored)", stmtTimeout)
	}
	pt.Check(t, db.Pool)
}

// Issue 8: kill -9 of an instance (a real child process) whose handlers hold entries:
// another instance processes them within seconds, with no lease to wait out.
func TestKilledInstanceReleasesItsEntries(t *testing.T) {
	db := testenv.NewDB(t)
	fx := pt.NewEffects(t, db.Pool)
	var payloads [][]byte
	for i := 0; i < 40; i++ {
		payloads = append(payloads, pt.Payload(pt.Spec{Aggregate: fmt.Sprintf("agg-%d", i%10)}))
	}
	ids := pt.Ingest(t, db.Pool, payloads...)

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHungInstance$", "-test.v")
	cmd.Env = append(os.Environ(), "INBOXD_HELPER_DB="+db.URL)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	held := map[string]bool{}
	sc := bufio.NewScanner(stdout)
	deadline := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
	for len(held) < 1 && sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "holding "); ok {
			held[id] = true
		}
	}
	deadline.Stop()
	if len(held) < 1 {
		t.Fatal("child holds no entry")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()

	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, fx)
	e := process.New(pool, reg, process.Config{Concurrency: 4}, metrics.New(), nil)
	runSweeper(t, process.NewSweeper(e, process.SweeperConfig{Interval: 50 * time.Millisecond, Grace: 0}))
	testenv.Eventually(t, 30*time.Second, "the killed instance's entries processed by another", func() bool {
		return pt.CountStatus(t, db.Pool, "PROCESSED") == len(ids)
	})
	t.Logf("all %d entries processed %s after kill -9", len(ids), time.Since(killed).Round(time.Millisecond))
	r := pt.Check(t, db.Pool)
	if r.Effects != len(ids) {
		t.Errorf("effects = %d, want %d", r.Effects, len(ids))
	}
	for id := range held {
		if _, attempts, _ := pt.Status(t, db.Pool, id); attempts != 1 {
			t.Errorf("%s: %d attempts, want 1 (the killed run must not count)", id, attempts)
		}
	}
}

// TestHelperHungInstance is the child process of TestKilledInstanceReleasesItsEntries:
// an instance whose handlers hang while holding their entries (a batch each).
func TestHelperHungInstance(t *testing.T) {
	t.Parallel()
	url := os.Getenv("INBOXD_HELPER_DB")
	if url == "" {
		t.Skip("helper process only")
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
		// Write the effect, then hang: the kill must roll it back.
		if _, err := tx.Exec(ctx, `INSERT INTO test_effects (event_id, aggregate_id, sequence_no) VALUES ($1, $2, $3)`, ev.ID, ev.AggregateID, ev.SequenceNo); err != nil {
			return err
		}
		mu.Lock()
		fmt.Printf("holding %s\n", ev.ID)
		mu.Unlock()
		select {}
	}))
	e := process.New(pool, reg, process.Config{Concurrency: 4, HandlerTimeout: time.Hour}, metrics.New(), nil)
	_ = process.NewSweeper(e, process.SweeperConfig{Interval: 50 * time.Millisecond, Grace: 0}).Run(context.Background())
}
