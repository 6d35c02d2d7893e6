package replay_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/eventctx"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/replay"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TestHelperReplayRunner is the child process of TestReplaySurvivesKill9: it runs the
// replay run INBOXD_REPLAY_RUN of INBOXD_HELPER_DB until it is killed; with
// INBOXD_REPLAY_KILL_AT=N it kills itself inside the Nth replayed handler call, after
// the handler's write and before its transaction commits.
func TestHelperReplayRunner(t *testing.T) {
	url, run := os.Getenv("INBOXD_HELPER_DB"), os.Getenv("INBOXD_REPLAY_RUN")
	if url == "" || run == "" {
		t.Skip("the child of TestReplaySurvivesKill9")
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	reg := process.NewRegistry()
	var h process.Handler = logHandler{}
	if at, _ := strconv.Atoi(os.Getenv("INBOXD_REPLAY_KILL_AT")); at > 0 {
		h = &killingHandler{at: at}
	}
	reg.Register(pt.EffectType, h)
	os.Stdout.WriteString("running\n")
	_, err = replay.Executor{Pool: pool, Dialect: database.PostgreSQL, Registry: reg, LeaseTTL: 2 * time.Second}.Execute(context.Background(), run)
	t.Fatalf("the runner returned (%v); it should have been killed", err)
}

// killingHandler is logHandler until its at-th replayed call, which it ends by killing
// its own process after the handler's write: the item's transaction never commits.
type killingHandler struct {
	at, calls int
}

func (k *killingHandler) Handle(ctx context.Context, tx pgx.Tx, ev process.Event) error {
	if err := (logHandler{}).Handle(ctx, tx, ev); err != nil {
		return err
	}
	if ev.Mode == eventctx.Replay {
		if k.calls++; k.calls == k.at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal ends the process
		}
	}
	return nil
}

// A replay runner killed with SIGKILL in the middle of a run, then started again,
// replays each event of the plan exactly once: the log the handler writes, the items
// and the attempts recorded with the run all count one per event. Killed from outside,
// the kill lands anywhere; killed inside a handler, it lands at the commit boundary:
// the item before committed just before it, this one never will.
func TestReplaySurvivesKill9(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		killAt int // the replayed handler call that kills the runner; 0: a SIGKILL from outside
	}{
		{name: "killed from outside"},
		{name: "killed inside a replayed handler, before its commit", killAt: 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			replaySurvivesKill9(t, tt.killAt)
		})
	}
}

func replaySurvivesKill9(t *testing.T, killAt int) {
	db, reg := logDB(t)
	ctx := context.Background()
	const n = 400
	pt.Ingest(t, db.Pool, payloads(n, 50, 0)...)
	sctx, stop := context.WithCancel(ctx)
	done := sweep(sctx, db.Pool, reg)
	testenv.Eventually(t, 2*time.Minute, "history processed", func() bool { return pt.CountStatus(t, db.Pool, "PROCESSED") == n })
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	run, _, err := replay.StorePlan(ctx, db.Pool, journal.Selection{}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A rate limit keeps the run going long enough to be killed in its middle.
	if err := journal.StartReplayRun(ctx, db.Pool, run.ID, "crash test", "test", 200, false); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperReplayRunner$", "-test.v")
	cmd.Env = append(os.Environ(), "INBOXD_HELPER_DB="+db.URL, "INBOXD_REPLAY_RUN="+run.ID,
		"INBOXD_REPLAY_KILL_AT="+strconv.Itoa(killAt))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "FAIL") {
				t.Logf("child: %s", sc.Text())
			}
		}
	}()
	doneItems := func() int {
		r, err := journal.GetReplayRun(ctx, db.Pool, run.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		return int(r.Done)
	}
	if killAt == 0 {
		testenv.Eventually(t, time.Minute, "the child replays some events", func() bool { return doneItems() >= n/4 })
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	_ = cmd.Wait()
	atKill := doneItems()
	if atKill >= n {
		t.Fatalf("the child finished the run (%d events) before it was killed", atKill)
	}
	if killAt > 0 && atKill != killAt-1 {
		t.Fatalf("%d items done when the %dth handler call killed the runner, want %d: every earlier item committed, this one not", atKill, killAt, killAt-1)
	}
	// The dead runner's lease keeps the run until it expires; then the restarted runner
	// takes it over and finishes the run.
	x := replay.Executor{Pool: db.Pool, Dialect: database.PostgreSQL, Registry: reg}
	if _, err := x.Execute(ctx, run.ID); !errors.Is(err, journal.ErrRunLeased) {
		t.Errorf("runner beside the dead one's lease: %v, want ErrRunLeased", err)
	}
	var state string
	testenv.Eventually(t, time.Minute, "the restarted runner finishes the run", func() bool {
		state, err = x.Execute(ctx, run.ID)
		return !errors.Is(err, journal.ErrRunLeased)
	})
	if err != nil || state != journal.RunDone {
		t.Fatalf("restarted runner: state %q, %v", state, err)
	}
	replayed := map[string]int{}
	for _, r := range readLog(t, db.Pool) {
		if r.mode == "replay" {
			replayed[r.event]++
		}
	}
	if len(replayed) != n {
		t.Errorf("%d events replayed, want %d", len(replayed), n)
	}
	for id, c := range replayed {
		if c != 1 {
			t.Errorf("%s replayed %d times", id, c)
		}
	}
	var attempts, multi int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE attempts <> 1) FROM replay_item WHERE run_id = $1::UUID`,
		run.ID).Scan(&attempts, &multi); err != nil || attempts != n || multi != 0 {
		t.Errorf("%d items, %d with attempts other than 1 (%v)", attempts, multi, err)
	}
	var recorded int
	if err := db.Pool.QueryRow(ctx, `SELECT count(DISTINCT journal_id), count(*) FROM journal_attempt WHERE replay_run = $1::UUID`,
		run.ID).Scan(&recorded, &attempts); err != nil || recorded != n || attempts != n {
		t.Errorf("%d attempts of %d events recorded with the run, want %d of %d (%v)", attempts, recorded, n, n, err)
	}
	// Suppressed: the run wrote no outbox row.
	var msgs int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&msgs); err != nil || msgs != n {
		t.Errorf("%d outbox rows, want the history's %d: a suppressed run publishes nothing (%v)", msgs, n, err)
	}
	t.Logf("killed after %d of %d events; restarted runner finished the run", atKill, n)
}
