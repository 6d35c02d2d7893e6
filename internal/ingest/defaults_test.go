package ingest

import (
	"testing"

	"github.com/inboxd/inboxd/internal/defaults"
)

// A Subscriber configured with zero values behaves as the product does: every default
// comes from the one table (package defaults), which the flags and the library read too.
func TestZeroConfigTakesTheTable(t *testing.T) {
	c, err := Config{Addr: "127.0.0.1:1", Destinations: []string{"/queue/a"}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"BatchSize", c.BatchSize, defaults.BatchSize},
		{"Linger", c.Linger, defaults.BatchLinger},
		{"CommitsInFlight", c.CommitsInFlight, defaults.CommitsInFlight},
		{"Prefetch", c.Prefetch, defaults.Prefetch},
		{"AckMode", string(c.AckMode), defaults.AckMode},
		{"MaxBodyBytes", c.MaxBodyBytes, defaults.MaxBodyBytes},
		{"MaxStatementBytes", c.MaxStatementBytes, defaults.MaxStatementBytes},
		{"MaxInflightBytes", c.MaxInflightBytes, int64(defaults.MaxInflightBytes)},
		{"CommitTimeout", c.CommitTimeout, defaults.CommitTimeout},
	} {
		if f.got != f.want {
			t.Errorf("%s = %v, the table says %v", f.name, f.got, f.want)
		}
	}
	// And every field the root package fills from a setting, one added with it included.
	// Destinations, ClientID and SubscriptionName have no default here: the caller names
	// them (the root package always does); Broker's zero is stompx's auto; IDSource is
	// parsed (zero: the payload's id), and MaxInflightBytes an int64, checked above.
	for _, e := range defaults.Unlike(c, "", "Destinations", "ClientID", "SubscriptionName", "Broker", "IDSource", "MaxInflightBytes") {
		t.Error(e)
	}
}
