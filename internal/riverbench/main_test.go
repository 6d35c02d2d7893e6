package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/bench"
	"github.com/inboxd/inboxd/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{"ok", []string{"-row=river", "-queue=/queue/x", "-n=10", "-db-url=postgres://x"}, false},
		{"unknown row", []string{"-row=e2e-max", "-queue=/queue/x", "-n=10", "-db-url=postgres://x"}, true},
		{"no queue", []string{"-row=river", "-n=10", "-db-url=postgres://x"}, true},
		{"no workers", []string{"-row=river", "-queue=/queue/x", "-n=10", "-db-url=postgres://x", "-workers=0"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Errorf("err = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
}

// TestRiverRows builds this binary and runs the bench's river rows through it against
// the real broker and database, checked as the bench checks them (every valid id one
// job, every malformed message rejected, every job completed with its customer): it
// fails in CI when either service is missing.
func TestRiverRows(t *testing.T) {
	testenv.Broker(t)
	testenv.NewDB(t)
	if testing.Short() {
		t.Skip("integration test")
	}
	bin := filepath.Join(t.TempDir(), "inboxd-river")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building inboxd-river: %v\n%s", err, out)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := bench.Main(ctx, []string{"-n=300", "-reps=1", "-rows=river-ingest,river", "-out=" + dir, "-warmup-broker=0",
		"-river-bin=" + bin, "-river-workers=20", "-river-pool-size=8",
		"-admin-url=" + testenv.AdminURL(), "-stomp-addr=" + testenv.StompAddr()}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Summaries) != 2 {
		t.Fatalf("got %d rows, want 2:\n%s", len(rep.Summaries), stdout.String())
	}
	for _, s := range rep.Summaries {
		if !s.OK || s.MsgPerSec <= 0 || !strings.HasPrefix(s.Check, "ok (jobs=") {
			t.Errorf("row %s: %+v", s.Row, s)
		}
	}
}
