package docs_test

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/testenv"
)

// quickStart is the README's library quick start: the Go block under its heading.
func quickStart(t *testing.T) string {
	t.Helper()
	blocks, _ := split(readDoc(t, "README.md"))
	for _, b := range blocks {
		if b.head == "Quick start: library" && b.lang == "go" {
			return b.body
		}
	}
	t.Fatal(`README.md: no Go block under "## Quick start: library"`)
	return ""
}

// TestDocsQuickStartProcessesAnEvent copies the README's library quick start into an
// empty module, builds it, and runs it as shown beside the running PostgreSQL and
// broker: it must create its database and tables, publish its order, and process it,
// with no other step. The database and queue are the test's own, through the variables
// the program reads; it fails, not skips, when CI=true and a service is missing.
func TestDocsQuickStartProcessesAnEvent(t *testing.T) {
	broker := testenv.Broker(t)
	admin := adminConn(t)

	dir := userModule(t)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(quickStart(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "orders")
	if out, err := goCmd(dir, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("the quick start does not build: %v\n%s", err, out)
	}

	// A database the program must create itself.
	name := "inboxd_test_quickstart_" + testenv.Suffix()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("dropping %s: %v", name, err)
		}
	})
	u, err := url.Parse(testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	dbURL := u.String()

	var logs bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+dbURL,
		"STOMP_ADDR="+broker,
		"QUEUE="+testenv.Queue(t),
		"HTTP_ADDR="+testenv.FreeAddr(t))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	// The order it published is PROCESSED, and its row is in the program's table.
	id := inboxd.JournalID("ord-0001")
	var status, body string
	testenv.Eventually(t, 60*time.Second, "the quick start's order to be processed", func() bool {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("the quick start exited before processing its order: %v\n%s", err, logs.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			return false // not created yet
		}
		defer conn.Close(ctx)
		if err := conn.QueryRow(ctx, `SELECT status FROM journal_state WHERE id = $1`, id).Scan(&status); err != nil || status != "PROCESSED" {
			return false
		}
		return conn.QueryRow(ctx, `SELECT body::text FROM orders WHERE id = 'ord-0001'`).Scan(&body) == nil
	})
	if !strings.Contains(body, `"total": 42`) {
		t.Errorf("orders row of ord-0001: %s", body)
	}

	// Ctrl-C stops it gracefully: Run returns nil and the program exits 0.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("the quick start did not exit cleanly on Ctrl-C: %v\n%s", err, logs.String())
		}
	case <-time.After(45 * time.Second):
		t.Fatalf("the quick start did not stop within 45s of Ctrl-C\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("the quick start logged an error:\n%s", logs.String())
	}
}

// adminConn connects to the tests' PostgreSQL, as testenv does: a missing database
// fails the test when CI=true and skips it otherwise.
func adminConn(t *testing.T) *pgx.Conn {
	t.Helper()
	testenv.Integration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testenv.AdminURL())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("service unavailable in CI: postgresql at %s: %v", testenv.AdminURL(), err)
		}
		t.Skipf("service unavailable (set CI=true to fail instead): postgresql at %s: %v", testenv.AdminURL(), err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
