package outbox

import (
	"testing"

	"github.com/inboxd/inboxd/internal/defaults"
)

// A relay configured with zero values behaves as the product does: every default comes
// from the one table (package defaults).
func TestZeroConfigTakesTheTable(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"BatchSize", c.BatchSize, defaults.OutboxBatchSize},
		{"Lease", c.Lease, defaults.OutboxLease},
		{"PollInterval", c.PollInterval, defaults.OutboxPollInterval},
		{"Retention", c.Retention, defaults.OutboxRetention},
		{"Parallel", c.Parallel, defaults.OutboxPublishers},
	} {
		if f.got != f.want {
			t.Errorf("%s = %v, the table says %v", f.name, f.got, f.want)
		}
	}
}
