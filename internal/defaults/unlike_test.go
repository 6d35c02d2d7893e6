package defaults

import (
	"slices"
	"testing"
	"time"
)

// TestUnlike: a component field is held to the setting named prefix+F, else F, and a
// named type of the setting's is compared as its value.
func TestUnlike(t *testing.T) {
	type mode string
	type config struct {
		Lease     time.Duration // OutboxLease
		Retention time.Duration // OutboxRetention, before Retention
		AckMode   mode          // AckMode, a string
		BatchSize int           // skipped
		Unrelated int
	}
	good := config{Lease: OutboxLease, Retention: OutboxRetention, AckMode: AckMode, BatchSize: 1}
	if got := Unlike(good, "Outbox", "BatchSize"); len(got) != 0 {
		t.Errorf("Unlike(defaults) = %q, want none", got)
	}
	bad := good
	bad.Retention, bad.AckMode = Retention, "client-individual"
	if got := Unlike(bad, "Outbox", "BatchSize"); len(got) != 2 ||
		!slices.ContainsFunc(got, func(s string) bool { return s[:9] == "Retention" }) {
		t.Errorf("Unlike = %q, want Retention and AckMode", got)
	}
}
