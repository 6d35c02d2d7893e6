package inboxdtest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestGoDocOutcomeListsEveryConstant: "go doc inboxdtest Outcome" shows each outcome,
// not the first one and "...".
func TestGoDocOutcomeListsEveryConstant(t *testing.T) {
	out, err := exec.Command("go", "doc", ".", "Outcome").CombinedOutput()
	if err != nil {
		t.Skipf("go doc: %v\n%s", err, out)
	}
	for _, c := range []Outcome{OutcomeProcessed, OutcomeRejected, OutcomeFailed, OutcomeDead, OutcomeDeferred} {
		if !strings.Contains(string(out), `"`+string(c)+`"`) {
			t.Errorf("go doc Outcome does not show %q:\n%s", c, out)
		}
	}
}
