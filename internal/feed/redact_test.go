package feed

import (
	"strings"
	"testing"
)

func TestRedactSinkURI(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},
		{"webhook-https://inboxd:8443/changefeed", "webhook-https://inboxd:8443/changefeed"},
		{"webhook-https://inboxd:8443/cf?ca_cert=" + testCAQ + "&insecure_tls_skip_verify=false",
			"webhook-https://inboxd:8443/cf?ca_cert=redacted&insecure_tls_skip_verify=false"},
		{"webhook-https://h/p?client_key=S3CR3T&client_cert=abc", "webhook-https://h/p?client_cert=redacted&client_key=redacted"},
		{"kafka://user:pw@broker:9092?sasl_password=pw2", "kafka://user:redacted@broker:9092?sasl_password=redacted"},
		{"webhook-https://h/p?bad=%zz", "webhook-https://h/p?redacted"},
		{"::not a url", "redacted"},
	}
	for _, tt := range tests {
		if got := RedactSinkURI(tt.in); got != tt.want {
			t.Errorf("RedactSinkURI(%q)\n got  %q\n want %q", tt.in, got, tt.want)
		}
	}
}

func TestRedactStatement(t *testing.T) {
	t.Parallel()
	stmt, err := BuildCreate(DefaultOptions("webhook-https://inboxd:8443/changefeed", testCA, "Bearer it's-secret"))
	if err != nil {
		t.Fatal(err)
	}
	got := RedactStatement(stmt)
	for _, secret := range []string{"it''s-secret", "it's-secret", testCAQ, "LS0tLS1"} {
		if strings.Contains(got, secret) {
			t.Errorf("redacted statement still contains %q: %s", secret, got)
		}
	}
	want := "CREATE CHANGEFEED INTO 'webhook-https://inboxd:8443/changefeed?ca_cert=redacted' " +
		"WITH envelope = 'wrapped', updated, resolved = '10s', min_checkpoint_frequency = '10s', " +
		"webhook_auth_header = 'redacted', webhook_client_timeout = '10s', " +
		`webhook_sink_config = '{"Flush":{"Messages":100,"Bytes":1048576,"Frequency":"200ms"},"Retry":{"Max":"inf","Backoff":"500ms"}}' ` +
		"AS SELECT * FROM journal WHERE event_op() != 'delete'"
	if got != want {
		t.Errorf("RedactStatement:\n got  %s\n want %s", got, want)
	}
	// A description as CockroachDB stores it (options sorted, already partly redacted).
	desc := "CREATE CHANGEFEED INTO 'webhook-https://inboxd:8443/changefeed?ca_cert=" + testCAQ +
		"' WITH OPTIONS (webhook_auth_header = 'Bearer x', updated) AS SELECT * FROM journal"
	if got := RedactStatement(desc); strings.Contains(got, "Bearer x") || strings.Contains(got, testCAQ) {
		t.Errorf("description not redacted: %s", got)
	}
}

func TestSinkIdentity(t *testing.T) {
	t.Parallel()
	same := []string{
		"webhook-https://inboxd:8443/changefeed",
		"WEBHOOK-HTTPS://INBOXD:8443/changefeed/",
		"webhook-https://inboxd:8443/changefeed?ca_cert=redacted",
		"webhook-https://inboxd:8443/changefeed?ca_cert=" + testCAQ + "&insecure_tls_skip_verify=true",
	}
	for _, s := range same {
		if got := sinkIdentity(s); got != "inboxd:8443/changefeed" {
			t.Errorf("sinkIdentity(%q) = %q", s, got)
		}
	}
	for _, s := range []string{"webhook-https://inboxd:8443/other", "webhook-https://inboxd:9443/changefeed"} {
		if sinkIdentity(s) == sinkIdentity(same[0]) {
			t.Errorf("%q taken for the same sink", s)
		}
	}
	for _, s := range []string{"", "kafka://broker:9092", "nonsense"} {
		if got := sinkIdentity(s); got != "" {
			t.Errorf("sinkIdentity(%q) = %q, want empty", s, got)
		}
	}
}
