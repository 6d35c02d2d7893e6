package process

import (
	"testing"

	"github.com/inboxd/inboxd/internal/defaults"
)

// An engine and a sweeper configured with zero values behave as the product does:
// every default comes from the one table (package defaults).
func TestZeroConfigTakesTheTable(t *testing.T) {
	t.Parallel()
	e, s := Config{}.withDefaults(), SweeperConfig{}.withDefaults()
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"Concurrency", e.Concurrency, defaults.Concurrency()},
		{"BatchSize", e.BatchSize, defaults.ProcessBatchSize},
		{"HandlerTimeout", e.HandlerTimeout, defaults.HandlerTimeout},
		{"ImmediateRetries", e.ImmediateRetries, defaults.ImmediateRetries},
		{"MaxAttempts", e.MaxAttempts, defaults.MaxAttempts},
		{"BaseBackoff", e.BaseBackoff, defaults.RetryBaseDelay},
		{"MaxBackoff", e.MaxBackoff, defaults.RetryMaxDelay},
		{"KickLinger", e.KickLinger, defaults.KickLinger},
		{"sweeper Interval", s.Interval, defaults.SweepInterval},
		{"sweeper BatchSize", s.BatchSize, defaults.ProcessBatchSize},
	} {
		if f.got != f.want {
			t.Errorf("%s = %v, the table says %v", f.name, f.got, f.want)
		}
	}
	// And every field the root package fills from a setting, one added with it included;
	// the sweeper's BatchSize is processing's, not ingest's namesake.
	for _, e := range append(defaults.Unlike(e, "Process"), defaults.Unlike(s, "Sweep", "BatchSize")...) {
		t.Error(e)
	}
}
