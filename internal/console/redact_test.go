package console

import (
	"net/http"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/database"
)

// Issue 28, item 8: on CockroachDB, /ui/feed (served without a token: it holds no
// data) showed INBOXD_WEBHOOK_URL as configured, credentials and certificate
// parameters included. It shows it redacted, as /journal/stats does.
func TestFeedPageRedactsWebhookURL(t *testing.T) {
	e := newEcho(t, Config{Dialect: database.CockroachDB,
		WebhookURL: "webhook-https://feeduser:hunter2@inboxd:8443/changefeed?ca_cert=LS0tLS1CRUdJTi&client_key=c2VjcmV0"})
	rec := get(e, "/ui/feed")
	if rec.Code != http.StatusOK {
		t.Fatalf("/ui/feed: %d", rec.Code)
	}
	body := rec.Body.String()
	for _, secret := range []string{"hunter2", "LS0tLS1CRUdJTi", "c2VjcmV0"} {
		if strings.Contains(body, secret) {
			t.Errorf("/ui/feed shows %q", secret)
		}
	}
	if !strings.Contains(body, "inboxd:8443/changefeed") {
		t.Errorf("/ui/feed no longer names the sink:\n%s", body)
	}
}
