package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// leakChildEnv makes TestLeakingChild leak: set only by TestMainFailsOnLeak.
const leakChildEnv = "INBOXD_TEST_LEAK_CHILD"

// TestMainFailsOnLeak runs this test binary again with one test that leaves a goroutine
// blocked: Main must fail the run although every test passed, and name the goroutine.
func TestMainFailsOnLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out leakGrace")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeakingChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), leakChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a run that leaked a goroutine passed:\n%s", out)
	}
	if !strings.Contains(string(out), "goleak") || !strings.Contains(string(out), "blockForever") {
		t.Fatalf("%v, output does not name the leaked goroutine:\n%s", err, out)
	}
}

func TestLeakingChild(t *testing.T) {
	if os.Getenv(leakChildEnv) == "" {
		t.Skip("the child run of TestMainFailsOnLeak")
	}
	go blockForever(make(chan struct{}))
}

func blockForever(ch chan struct{}) { <-ch }
