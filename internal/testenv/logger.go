package testenv

import (
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
)

// logKeep is how many of a test's last log lines Logger prints when the test fails:
// enough to see the outage or reconnect that came before, bounded so that one noisy
// failure cannot bury the others in CI's output.
const logKeep = 200

// Logger is a test's logger. Under -v it writes to stderr as it goes; otherwise it keeps
// the test's last log lines and prints them only if the test fails, so a failure in CI
// comes with what led to it.
func Logger(t testing.TB) *slog.Logger {
	t.Helper()
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test", t.Name())
	}
	r := &ring{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the test's last %d log lines:\n%s", logKeep, r.String())
		}
	})
	return slog.New(slog.NewTextHandler(r, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// ring keeps the last logKeep lines written to it.
type ring struct {
	mu    sync.Mutex
	lines []string
	next  int
}

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range strings.SplitAfter(string(p), "\n") {
		if l == "" {
			continue
		}
		if len(l) > 2000 {
			l = l[:2000] + "…\n"
		}
		if len(r.lines) < logKeep {
			r.lines = append(r.lines, l)
			continue
		}
		r.lines[r.next] = l
		r.next = (r.next + 1) % logKeep
	}
	return len(p), nil
}

func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines[r.next:], "") + strings.Join(r.lines[:r.next], "")
}
