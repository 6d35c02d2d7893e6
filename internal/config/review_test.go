package config

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

// Issue 28, item 6: the read token had no _FILE variant, unlike every other secret.
func TestReadTokenFile(t *testing.T) {
	tests := []struct {
		name    string
		env     func(t *testing.T) map[string]string
		args    func(t *testing.T) []string
		wantErr []string
	}{
		{name: "env",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"INBOXD_READ_TOKEN_FILE": secretFile(t, "r34d\n", 0o600)}
			}},
		{name: "flag",
			args: func(t *testing.T) []string { return []string{"-read-token-file", secretFile(t, "r34d", 0o400)} }},
		{name: "world-readable refused",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"INBOXD_READ_TOKEN_FILE": secretFile(t, "r34d", 0o644)}
			},
			wantErr: []string{"read-token-file", "readable by every user"}},
		{name: "both value and file",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"INBOXD_READ_TOKEN": "x", "INBOXD_READ_TOKEN_FILE": secretFile(t, "y", 0o600)}
			},
			wantErr: []string{"read-token and read-token-file are both set"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var env map[string]string
			var args []string
			if tt.env != nil {
				env = tt.env(t)
			}
			if tt.args != nil {
				args = tt.args(t)
			}
			c, err := parse(t, env, args...)
			checkParsed(t, c, err, tt.wantErr, func(t *testing.T, c *Config) {
				if c.ReadToken != "r34d" {
					t.Errorf("read token = %q, want r34d", c.ReadToken)
				}
			})
		})
	}
}

// Issue 28, item 6: -read-token on the command line gave no warning, while
// -admin-token did; every local user reads it in ps.
func TestReadTokenOnCommandLineWarned(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := Register(fs)
	if err := fs.Parse([]string{"-read-token", "r34d"}); err != nil {
		t.Fatal(err)
	}
	if names := c.SecretsOnCommandLine(fs); !slices.Contains(names, "-read-token") {
		t.Errorf("SecretsOnCommandLine = %v, want -read-token among them", names)
	}
}

// Issue 28, item 8: serve never validated INBOXD_WEBHOOK_URL; the changefeed it names
// could not be created, and the console showed it as given, credentials included.
func TestWebhookURLValidated(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"https://inboxd:8443/changefeed", "webhook-https://"},
		{"webhook-https://feed:hunter2@inboxd:8443/changefeed", "credentials"},
		{"webhook-https://inboxd:8443/changefeed?ca_cert=abc", "query"},
		{"webhook-https:///changefeed", "host"},
	} {
		_, err := parse(t, map[string]string{"INBOXD_WEBHOOK_URL": tc.url})
		if err == nil || !strings.Contains(err.Error(), "webhook-url") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("webhook-url %q: err %v, want one naming webhook-url and %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error repeats the password: %v", err)
		}
	}
	if _, err := parse(t, map[string]string{"INBOXD_WEBHOOK_URL": "webhook-https://inboxd.internal:8443/changefeed"}); err != nil {
		t.Errorf("a valid webhook-url refused: %v", err)
	}
	// With the webhook off there is nothing to post to: the URL is not checked.
	if _, err := parse(t, map[string]string{"INBOXD_WEBHOOK_URL": "https://x"}, "-webhook-addr", ""); err != nil {
		t.Errorf("webhook-url checked with the webhook off: %v", err)
	}
}
