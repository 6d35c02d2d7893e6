package config

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

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
