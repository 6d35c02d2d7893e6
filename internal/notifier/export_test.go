package notifier

import (
	"testing"
	"time"
)

// SetPingAfter shortens the quiet time before a ping for one test; call it before Run.
func SetPingAfter(t testing.TB, d time.Duration) {
	old := pingAfter
	pingAfter = d
	t.Cleanup(func() { pingAfter = old })
}
