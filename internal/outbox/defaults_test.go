package outbox

import (
	"testing"
	"time"

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
	// And every field the root package fills from a setting, one added with it included.
	for _, e := range defaults.Unlike(c, "Outbox") {
		t.Error(e)
	}
}

// A refused row waits 1s, doubling, up to RetryMaxDelay (INBOXD_OUTBOX_RETRY_MAX_DELAY):
// 5m unless set.
func TestRowRetryCappedByRetryMaxDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cap       time.Duration
		attempt   int
		wantDelay time.Duration
	}{
		{0, 1, time.Second},
		{0, 20, 5 * time.Minute},
		{30 * time.Second, 4, 8 * time.Second},
		{30 * time.Second, 20, 30 * time.Second},
	} {
		r := &Relay{cfg: Config{RetryMaxDelay: tc.cap}.withDefaults()}
		if got := r.rowRetry().Delay(tc.attempt); got != tc.wantDelay {
			t.Errorf("RetryMaxDelay %s, attempt %d: waits %s, want %s", tc.cap, tc.attempt, got, tc.wantDelay)
		}
	}
}
