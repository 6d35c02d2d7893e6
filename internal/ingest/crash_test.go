package ingest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
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
	// envHelperAfter: block-after-commit blocks after this many batches committed (default 1).
	envHelperAfter = "INBOXD_INGEST_HELPER_AFTER"
	helperMarker   = "INBOXD-HELPER-BLOCKED"
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
		after, _ := strconv.Atoi(os.Getenv(envHelperAfter))
		var n atomic.Int64
		h.afterIngest = func(context.Context, string, journal.Result) {
			if n.Add(1) >= int64(after) {
				block()
			}
		}
	case "block-before-commit":
		h.beforeIngest = func(context.Context, string, int) { block() }
	default:
		t.Fatalf("unknown helper mode %q", mode)
	}
	s, err := New(withBroker(Config{Addr: os.Getenv(envHelperAddr), Destinations: []string{os.Getenv(envHelperDest)},
		BatchSize: crashBatch, Linger: 5 * time.Millisecond}), pool)
	if err != nil {
		t.Fatal(err)
	}
	s.hooks = h
	_ = s.Run(ctx)
}

// runAndKill starts the helper in mode, waits until it blocks, and kills it with SIGKILL.
// env adds to the helper's environment.
func runAndKill(t *testing.T, mode, dbURL, addr, dest string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSubscriber$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHelperMode+"="+mode, envHelperDB+"="+dbURL, envHelperAddr+"="+addr, envHelperDest+"="+dest)
	cmd.Env = append(cmd.Env, env...)
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
	testenv.EachBroker(t, func(t *testing.T, b testenv.BrokerEnv) {
		addr := b.Addr
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
	})
}

func TestCrashBeforeCommit(t *testing.T) {
	t.Parallel()
	testenv.EachBroker(t, func(t *testing.T, b testenv.BrokerEnv) {
		addr := b.Addr
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
	})
}

// TestKillMidStreamExact is issue 30's bar, on each broker: 3,000 unique events, 900
// duplicates (30%) and 30 malformed, with one kill -9 mid-stream (after 40 batches
// committed, the last of them unacked), give exactly 3,000 journal entries, 30
// quarantined and an empty queue.
//
//	CI=true go test -race -count=1 -run 'TestKillMidStreamExact/rabbitmq' ./internal/ingest/
func TestKillMidStreamExact(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes 3,930 messages per broker")
	}
	t.Parallel()
	testenv.EachBroker(t, func(t *testing.T, b testenv.BrokerEnv) {
		const unique, dups, malformed = 3000, 900, 30
		const total = unique + dups + malformed
		db := testenv.NewDB(t)
		q := testenv.Queue(t)
		exp := publishPlan(t, b.Addr, q, total, float64(dups)/total, float64(malformed)/total, 30)
		if len(exp.IDs) != unique || exp.Duplicates != dups || exp.MalformedCount() != malformed {
			t.Fatalf("plan: %d unique, %d duplicates, %d malformed; want %d, %d, %d",
				len(exp.IDs), exp.Duplicates, exp.MalformedCount(), unique, dups, malformed)
		}

		runAndKill(t, "block-after-commit", db.URL, b.Addr, q, envHelperAfter+"=40")
		mid := count(t, db.Pool, `SELECT count(*) FROM journal`) + count(t, db.Pool, `SELECT count(*) FROM quarantine`)
		if mid == 0 || mid >= unique {
			t.Fatalf("after the kill, %d rows are committed; want a part of the stream", mid)
		}

		r := startSubscriber(t, Config{Addr: b.Addr, Destinations: []string{q}, BatchSize: crashBatch, Linger: 5 * time.Millisecond}, db.Pool, hooks{})
		// The killed helper acked all but its last batches, which come back: this one
		// acks less than was sent, so only the journal says when it is done.
		waitExact(t, db.Pool, exp, 60*time.Second)
		r.stop(t)
		if n := count(t, db.Pool, `SELECT count(*) FROM journal`); n != unique {
			t.Errorf("journal holds %d entries, want %d", n, unique)
		}
		if n := count(t, db.Pool, `SELECT count(*) FROM quarantine`); n != malformed {
			t.Errorf("quarantine holds %d rows, want %d", n, malformed)
		}
		assertDrained(t, b.Addr, q)
		t.Logf("%s: %d committed before the kill -9; then exactly %d journaled, %d quarantined, queue empty", b.Name, mid, unique, malformed)
	})
}
