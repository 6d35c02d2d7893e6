package inboxdtest

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/testenv"
)

// TestStandaloneFromPlainProgram: a program that is not a test binary publishes with
// Standalone and Publish (the kit's helpers read testing's flags only inside a test).
func TestStandaloneFromPlainProgram(t *testing.T) {
	testenv.Broker(t)
	out, err := exec.Command("go", "run", "./testdata/plainprogram").CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./testdata/plainprogram: %v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) == "" {
		t.Fatalf("the program printed no journal id")
	}
}
