package ingest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Environment of the helper process the crash tests start and kill.
const (
	envHelperMode = "INBOXD_INGEST_HELPER" // block-after-commit | block-before-commit
	envHelperDB   = "INBOXD_INGEST_HELPER_DB"
	envHelperAddr = "INBOXD_INGEST_HELPER_ADDR"
	envHelperDest = "INBOXD_INGEST_HELPER_DEST"
	helperMarker  = "INBOXD-HELPER-BLOCKED"
)

const crashBatch = 25

// TestHelperSubscriber is not a test: the crash tests run it in a child process (this
// same test binary), which blocks forever at the chosen point until it is killed.
func TestHelperSubscriber(t *testing.T) {
	mode := os.Getenv(envHelperMode)
	if mode == "" {
		t.Skip("helper process for the crash tests")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(envHelperDB))
	if err != nil {
		t.Fatal(err)
	}
	block := func() {
		fmt.Println(helperMarker) // the parent waits for this line, then kills us
		time.Sleep(time.Hour)
	}
	var h hooks
	switch mode {
	case "block-after-commit":
		h.afterIngest = func(context.Context, string, journal.Result) { block() }
	case "block-before-commit":
		h.beforeIngest = func(context.Context, string, int) { block() }
	default:
		t.Fatalf("unknown helper mode %q", mode)
	}
	s, err := New(Config{Addr: os.Getenv(envHelperAddr), Destinations: []string{os.Getenv(envHelperDest)},
		BatchSize: crashBatch, Linger: 5 * time.Millisecond}, pool)
	if err != nil {
		t.Fatal(err)
	}
	s.hooks = h
	_ = s.Run(ctx)
}

// runAndKill starts the helper in mode, waits until it blocks, and kills it with SIGKILL.
func runAndKill(t *testing.T, mode, dbURL, addr, dest string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSubscriber$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHelperMode+"="+mode, envHelperDB+"="+dbURL, envHelperAddr+"="+addr, envHelperDest+"="+dest)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	blocked := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == helperMarker {
				close(blocked)
				break
			}
		}
		for sc.Scan() { // keep the pipe drained
		}
	}()
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatalf("helper did not reach %s within 30s; stderr:\n%s", mode, stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no deferred code, no DISCONNECT
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true
	if ws := cmd.ProcessState.String(); !strings.Contains(ws, "killed") {
		t.Fatalf("helper ended with %q, want killed", ws)
	}
}

func TestCrashAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	exp := publishPlan(t, addr, q, 200, 0.2, 0.04, 21)

	runAndKill(t, "block-after-commit", db.URL, addr, q)
	// At most the batches in flight were committed (each blocked before its ack), none acked.
	committed := count(t, db.Pool, `SELECT count(*) FROM journal`) + count(t, db.Pool, `SELECT count(*) FROM quarantine`)
	if max := defaults.CommitsInFlight * crashBatch; committed == 0 || committed > max {
		t.Fatalf("after the kill, %d rows are committed; want the batches in flight (1..%d)", committed, max)
	}

	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: crashBatch, Linger: 5 * time.Millisecond}, db.Pool, hooks{})
	r.finishExact(t, db.Pool, q, exp)
	// The committed batch came back and collapsed: its entries count as duplicates now.
	if dups := r.counter("duplicates", q); dups <= float64(exp.Duplicates) {
		t.Errorf("duplicates = %v, want more than the %d published (the redelivered committed batch)", dups, exp.Duplicates)
	}
	assertDrained(t, addr, q)
}

func TestCrashBeforeCommit(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	exp := publishPlan(t, addr, q, 200, 0.2, 0.04, 22)

	runAndKill(t, "block-before-commit", db.URL, addr, q)
	if n := count(t, db.Pool, `SELECT count(*) FROM journal`) + count(t, db.Pool, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Fatalf("after a kill before the first commit, %d rows exist; want 0", n)
	}

	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: crashBatch, Linger: 5 * time.Millisecond}, db.Pool, hooks{})
	r.finishExact(t, db.Pool, q, exp)
	if dups := r.counter("duplicates", q); dups != float64(exp.Duplicates) {
		t.Errorf("duplicates = %v, want %d", dups, exp.Duplicates)
	}
	assertDrained(t, addr, q)
}
