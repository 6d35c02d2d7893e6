package feed

import (
	"strings"
	"testing"
	"time"
)

// FuzzParseSinkURL feeds operator-supplied sink URLs through parsing and statement
// building: no panic, and nothing that parses may break out of the SQL literal.
func FuzzParseSinkURL(f *testing.F) {
	for _, s := range []string{
		"webhook-https://inboxd:8443/changefeed", "webhook-https://[::1]:8443/", "https://x",
		"webhook-https://a'b/c", "webhook-https://h/p'q", "webhook-https://h/%27", "webhook-https://u@h/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		s, err := ParseSinkURL(raw)
		if err != nil {
			return
		}
		if !strings.HasPrefix(s.String(), SchemeWebhookHTTPS+"://") {
			t.Fatalf("canonical form %q lost its scheme", s)
		}
		again, err := ParseSinkURL(s.String())
		if err != nil || again != s {
			t.Fatalf("canonical form %q does not round-trip: %v %v", s, again, err)
		}
		stmt, err := BuildCreate(Options{SinkURL: raw, ClientTimeout: time.Second})
		if err != nil {
			t.Fatalf("parsed sink %q but BuildCreate failed: %v", raw, err)
		}
		// Outside the INTO literal the statement must be exactly what we wrote.
		lit := quote(sinkURI(s, Options{}))
		if !strings.HasPrefix(stmt, "CREATE CHANGEFEED INTO "+lit+" WITH ") {
			t.Fatalf("statement %q does not start with the quoted sink %q", stmt, lit)
		}
	})
}

// FuzzRedact checks that redaction never panics and never lets a client key through.
func FuzzRedact(f *testing.F) {
	f.Add("a=b", "SECRETKEY")
	f.Add("client_key=x&ca_cert=y", "0123456789abcdef")
	f.Fuzz(func(t *testing.T, prefix, secret string) {
		if len(secret) < 8 || strings.ContainsAny(secret, "%&=#?+ ;") || strings.Contains(prefix, secret) {
			return
		}
		raw := "webhook-https://" + "h/p?" + prefix + "&client_key=" + secret
		if got := RedactSinkURI(raw); strings.Contains(got, secret) {
			t.Fatalf("RedactSinkURI(%q) = %q leaks the key", raw, got)
		}
		_ = RedactStatement("CREATE CHANGEFEED INTO '" + prefix + "' WITH webhook_auth_header = '" + secret + "'")
	})
}
