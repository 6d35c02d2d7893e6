package inboxd

import (
	"testing"

	"github.com/inboxd/inboxd/internal/database"
)

// TestEmbeddingDefaults: a Config{} suits a program that embeds inboxd. Its API listens
// on loopback only, and it serves no changefeed webhook (nor makes a certificate
// directory) on PostgreSQL, where nothing uses it. On CockroachDB, whose changefeeds need
// it, the webhook runs with the command line's address and directory, and a WebhookAddr
// asks for it anywhere.
func TestEmbeddingDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	if c.HTTPAddr != "127.0.0.1:8090" {
		t.Errorf("HTTPAddr = %q, want loopback 127.0.0.1:8090", c.HTTPAddr)
	}
	tests := []struct {
		name             string
		cfg              Config
		dialect          database.Dialect
		wantOff          bool
		wantAddr, wantCD string
	}{
		{"PostgreSQL: none", c, database.PostgreSQL, true, "", ""},
		{"CockroachDB: the default", c, database.CockroachDB, false, ":8443", "var/certs"},
		{"PostgreSQL, asked for", Config{WebhookAddr: "127.0.0.1:9443"}.WithDefaults(), database.PostgreSQL, false, "127.0.0.1:9443", "var/certs"},
		{"CockroachDB, disabled", Config{DisableWebhook: true}.WithDefaults(), database.CockroachDB, true, ":8443", ""},
		{"own directory", Config{WebhookAddr: ":1", CertDir: "/etc/x"}.WithDefaults(), database.PostgreSQL, false, ":1", "/etc/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cfg.withWebhook(tt.dialect)
			if got.DisableWebhook != tt.wantOff || got.WebhookAddr != tt.wantAddr || got.CertDir != tt.wantCD {
				t.Errorf("webhook off %v at %q in %q, want off %v at %q in %q",
					got.DisableWebhook, got.WebhookAddr, got.CertDir, tt.wantOff, tt.wantAddr, tt.wantCD)
			}
		})
	}
}
