package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Chromium returns the path of a headless-capable Chromium for browser tests:
// INBOXD_TEST_CHROMIUM if set, else the first of chromium, chromium-browser and
// google-chrome on PATH (scripts/services.sh browser installs Debian's chromium).
// Missing, it skips the test, or fails it when CI=true.
func Chromium(t testing.TB) string {
	t.Helper()
	Integration(t)
	if p := os.Getenv("INBOXD_TEST_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			unavailable(t, "INBOXD_TEST_CHROMIUM=%s: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	unavailable(t, "no chromium on PATH (run scripts/services.sh browser)")
	return ""
}
