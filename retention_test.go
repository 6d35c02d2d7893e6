package inboxd

import (
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/retention"
)

// TestMigrateRetention: Migrate sets on CockroachDB the retention a Config asks for
// with WithRetention (issue 27: it always set the defaults, so an embedder's
// Config.Retention was silently ignored there), and the defaults without it. The
// statements each retention sends are pinned in internal/feed (TestRetentionStatements)
// and parsed by CockroachDB's parser in internal/sqlcheck.
func TestMigrateRetention(t *testing.T) {
	day := 24 * time.Hour
	tests := []struct {
		name string
		opts []MigrateOption
		want feed.Retention
	}{
		{"defaults", nil, feed.Retention{Journal: 7 * day, Quarantine: 30 * day}},
		{"an embedder's", []MigrateOption{WithRetention(Config{Retention: 3 * day, QuarantineRetention: 14 * day})}, feed.Retention{Journal: 3 * day, Quarantine: 14 * day}},
		{"zero is the default", []MigrateOption{WithRetention(Config{QuarantineRetention: day})}, feed.Retention{Journal: 7 * day, Quarantine: day}},
		{"negative is forever", []MigrateOption{WithRetention(Config{Retention: -1, QuarantineRetention: -1})}, feed.Retention{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := migrateOptionsOf(tt.opts).retention; got != tt.want {
				t.Errorf("retention %+v, want %+v", got, tt.want)
			}
			if _, err := feed.RetentionStatements(migrateOptionsOf(tt.opts).retention); err != nil {
				t.Error(err)
			}
		})
	}
	// Run compares the TTL in force with the same Config: the defaults in force (no TTL
	// on the journal, whose retention the pruner keeps) agree with a Config that sets
	// none, and not with an embedder's quarantine retention, nor with a journal TTL left
	// from before v0.3.0.
	inForce := func(d time.Duration) feed.TTLInForce { return feed.TTLInForce{Set: true, Known: true, Retention: d} }
	if d := feed.RetentionDrift(retentionOf(Config{}.WithDefaults()), feed.TTLInForce{}, inForce(30*day)); len(d) != 0 {
		t.Errorf("defaults: %q", d)
	}
	if d := feed.RetentionDrift(retentionOf(Config{Retention: 3 * day}.WithDefaults()), feed.TTLInForce{}, inForce(30*day)); len(d) != 0 {
		t.Errorf("an embedder's journal retention is the pruner's: %q", d)
	}
	if d := feed.RetentionDrift(retentionOf(Config{QuarantineRetention: 3 * day}.WithDefaults()), feed.TTLInForce{}, inForce(30*day)); len(d) != 1 {
		t.Errorf("an embedder's quarantine retention against the defaults in force: %q", d)
	}
	if d := feed.RetentionDrift(retentionOf(Config{}.WithDefaults()), inForce(7*day), inForce(30*day)); len(d) != 1 {
		t.Errorf("a journal TTL from before v0.3.0: %q", d)
	}
}

// TestPruneConfig: the pruner deletes expired journal entries on CockroachDB too (the
// journal's status is in journal_state, which the journal's row-level TTL cannot read);
// only the quarantine is left to CockroachDB's TTL.
func TestPruneConfig(t *testing.T) {
	day := 24 * time.Hour
	keep := feed.Retention{Journal: 7 * day, Quarantine: 30 * day}
	tests := []struct {
		name   string
		keep   feed.Retention
		rowTTL bool
		want   retention.Config
	}{
		{"postgresql", keep, false, retention.Config{Journal: 7 * day, Quarantine: 30 * day, Replay: 7 * day}},
		{"cockroachdb", keep, true, retention.Config{Journal: 7 * day, Replay: 7 * day}},
		{"forever", feed.Retention{}, true, retention.Config{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pruneConfig(tt.keep, tt.rowTTL); got != tt.want {
				t.Errorf("pruneConfig = %+v, want %+v", got, tt.want)
			}
		})
	}
}
