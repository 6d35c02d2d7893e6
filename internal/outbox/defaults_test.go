package outbox

import (
	"reflect"
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
	// Every field the root package fills from a setting (Outbox+F, else F) takes that
	// setting's default, a field added with its setting included.
	def := map[string]any{}
	for _, s := range defaults.Settings() {
		def[s.Field] = s.Default
	}
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		want, ok := def["Outbox"+name]
		if !ok {
			want, ok = def[name]
		}
		if got := v.Field(i).Interface(); ok && got != want {
			t.Errorf("%s = %v, its setting's default is %v", name, got, want)
		}
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
