package config

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/process"
)

func parse(t *testing.T, env map[string]string, args ...string) (*Config, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := Register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return c, c.Validate()
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		check   func(*Config) bool
		wantErr string
	}{
		{name: "defaults", check: func(c *Config) bool {
			return c.DatabaseURL == "postgres://postgres@127.0.0.1:5432/inboxd?sslmode=disable" &&
				c.StompAddr == "127.0.0.1:61613" && c.HTTPAddr == ":8090" && c.WebhookAddr == "" && !c.DisableWebhook &&
				len(c.Destinations) == 1 && c.Destinations[0] == "/queue/registrations"
		}},
		{name: "env fallback", env: map[string]string{"INBOXD_DESTINATION": "/queue/a, /queue/b", "INBOXD_BATCH_LINGER": "5ms"},
			check: func(c *Config) bool {
				return len(c.Destinations) == 2 && c.Destinations[1] == "/queue/b" && c.BatchLinger == 5*time.Millisecond
			}},
		// The webhook: unset, Run decides (CockroachDB only); set, it is asked for; empty, off.
		{name: "webhook asked for by env", env: map[string]string{"INBOXD_WEBHOOK_ADDR": ":9443"},
			check: func(c *Config) bool { return c.WebhookAddr == ":9443" && !c.DisableWebhook }},
		{name: "webhook asked for by flag", args: []string{"-webhook-addr", "127.0.0.1:9443"},
			check: func(c *Config) bool { return c.WebhookAddr == "127.0.0.1:9443" && !c.DisableWebhook }},
		{name: "webhook off", env: map[string]string{"INBOXD_WEBHOOK_ADDR": ""},
			check: func(c *Config) bool { return c.WebhookAddr == "" && c.DisableWebhook }},
		{name: "flag beats env", env: map[string]string{"INBOXD_STOMP_ADDR": "env:1"}, args: []string{"-stomp-addr", "flag:2"},
			check: func(c *Config) bool { return c.StompAddr == "flag:2" }},
		{name: "bad env number", env: map[string]string{"INBOXD_BATCH_SIZE": "lots"}, wantErr: "INBOXD_BATCH_SIZE"},
		{name: "bad flag duration", args: []string{"-batch-linger", "soon"}, wantErr: "not a duration"},
		{name: "prefetch below batch", args: []string{"-prefetch", "10", "-batch-size", "100"}, wantErr: "prefetch (10) must exceed batch-size (100)"},
		{name: "bad ack mode", args: []string{"-ack-mode", "auto"}, wantErr: "ack-mode"},
		{name: "body larger than a statement", args: []string{"-max-body-bytes", "16777216", "-max-inflight-bytes", "67108864"},
			wantErr: "max-body-bytes (16777216) must fit one statement"},
		{name: "statement bound too small", args: []string{"-max-statement-bytes", "1000"}, wantErr: "must be at least 1048576"},
		{name: "larger statements with the cluster setting raised", args: []string{"-max-statement-bytes", "33554432", "-max-body-bytes", "16777216"},
			check: func(c *Config) bool { return c.MaxStatementBytes == 32<<20 && c.MaxBodyBytes == 16<<20 }},
		{name: "cert without key", args: []string{"-cert-file", "x.pem"}, wantErr: "go together"},
		{name: "topic is durable by default", args: []string{"-destination", "/topic/registrations"},
			check: func(c *Config) bool {
				return c.ClientID == "inboxd" && c.SubscriptionName == "inboxd" && !c.NonDurableTopics
			}},
		{name: "non-durable topic refused", args: []string{"-destination", "/topic/registrations", "-client-id", ""}, wantErr: "silently lose"},
		{name: "non-durable topic opted in", env: map[string]string{"INBOXD_NON_DURABLE_TOPICS": "true"},
			args:  []string{"-destination", "/topic/registrations", "-subscription-name", ""},
			check: func(c *Config) bool { return c.NonDurableTopics }},
		{name: "bad bool", env: map[string]string{"INBOXD_NON_DURABLE_TOPICS": "maybe"}, wantErr: "INBOXD_NON_DURABLE_TOPICS"},
		{name: "client id charset", args: []string{"-client-id", "a b"}, wantErr: "client-id"},
		{name: "publish destination", args: []string{"-publish-destination", "/topic/VirtualTopic.registrations"},
			check: func(c *Config) bool { return c.PublishDestination == "/topic/VirtualTopic.registrations" }},
		{name: "bad publish destination", args: []string{"-publish-destination", "registrations"}, wantErr: "publish-destination"},
		// The recoverability policy's defaults are the engine's constants (one source).
		{name: "retry defaults are the engine's", check: func(c *Config) bool {
			return c.ImmediateRetries == process.DefaultImmediateRetries && c.MaxAttempts == process.DefaultMaxAttempts &&
				c.RetryBaseDelay == process.DefaultBaseBackoff && c.RetryMaxDelay == process.DefaultMaxBackoff
		}},
		{name: "retry policy from the environment", env: map[string]string{"INBOXD_IMMEDIATE_RETRIES": "0", "INBOXD_RETRY_MAX_DELAY": "1h"},
			args: []string{"-max-attempts", "25"},
			check: func(c *Config) bool {
				return c.ImmediateRetries < 0 && c.RetryMaxDelay == time.Hour && c.MaxAttempts == 25 // the library's "none"
			}},
		{name: "retry max below base", args: []string{"-retry-base-delay", "1m", "-retry-max-delay", "10s"}, wantErr: "retry-max-delay (10s) must be at least retry-base-delay (1m0s)"},
		// One convention for "none" and "forever": -1, as in the library (0 still says it).
		{name: "-1 means none and forever", args: []string{"-immediate-retries", "-1", "-retention", "-1s", "-quarantine-retention", "0"},
			check: func(c *Config) bool { return c.ImmediateRetries < 0 && c.Retention < 0 && c.QuarantineRetention < 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parse(t, tt.env, tt.args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !tt.check(c) {
				t.Errorf("config not as expected: %+v", c)
			}
		})
	}
}
